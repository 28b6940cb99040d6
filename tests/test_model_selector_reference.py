"""The selector's fast paths against a plain reference: identical choices, numbers and texts.

The model remembers per profile what it derives from it (per-kind costs, coefficient errors,
q(s, P)) and per plan what it counts (stages, requests), predicts the stages candidates share once,
formats a term's ``why`` only when read, and adds up stage and prediction times once, to make the
selector fast enough to run between the stages of every query. This test keeps a
straightforward copy of the model as it was before (every lookup made afresh, every text formatted
at once) and checks that :func:`croupier.model.selector.choose` gives exactly the same candidates
(seconds, ranges, costs, requests, every term with its sources and text, dominant terms) on random
cases, going back and forth between profiles that share a name but not their tables, so that a
memo shared between profiles, or kept across a change, fails it.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import asdict, replace
from functools import partial
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from croupier.exchange.move import FETCH_THREADS
from croupier.exchange.plan import ExchangePlan
from croupier.model.perf import SORT_PHASES, Prediction, cost, job_requests, predict
from croupier.model.profile import DEFAULT_COMPUTE, DEFAULT_UNCERTAINTY, Curve, StorageProfile, lookup_key
from croupier.model.selector import choose
from croupier.model.stage import EXTRAPOLATION_ERROR, StageFacts, StagePrediction, Term, interval

# --- the reference: the model without memos or lazy texts ------------------------------------------


def ref_q(curve: Curve, size: float, workers: float) -> float:
    def interp(values: tuple[float, ...], s: float) -> float:
        sizes = curve.sizes
        if s <= sizes[0]:
            return values[0]
        if s >= sizes[-1]:
            return values[-1] * (sizes[-1] / s) if len(sizes) > 1 else values[-1]
        for i in range(1, len(sizes)):
            if s <= sizes[i]:
                x0, x1 = math.log(sizes[i - 1]), math.log(sizes[i])
                y0, y1 = math.log(values[i - 1]), math.log(values[i])
                return math.exp(y0 + (y1 - y0) * (math.log(s) - x0) / (x1 - x0))
        return values[-1]

    return max(1e-9, min(interp(curve.per_worker, max(size, 1.0)) * workers, interp(curve.ceiling, max(size, 1.0))))


def ref_error(profile: StorageProfile, coefficient: str) -> float:
    if coefficient.startswith("extrapolation:"):
        return EXTRAPOLATION_ERROR
    for table, prefix in (("compute", "compute:"), ("call_seconds", "call:")):
        if coefficient.startswith(prefix):
            key = lookup_key(getattr(profile, table), coefficient.removeprefix(prefix))
            return profile.uncertainty.get(f"{prefix}{key}", DEFAULT_UNCERTAINTY) if key is not None else DEFAULT_UNCERTAINTY
    return profile.uncertainty.get(coefficient, DEFAULT_UNCERTAINTY)


def ref_io(kind: str, data: float, requests: int, profile: StorageProfile, c: int, streams: float = 1.0) -> Term:
    curve, bw = (profile.read, profile.read_bandwidth) if kind == "read" else (profile.write, profile.write_bandwidth)
    size = data / requests if requests else 0.0
    flight = c * max(1.0, streams)
    bandwidth = data / (bw * (c if profile.network_per_function else flight)) if data else 0.0
    q = ref_q(curve, size, flight)
    throughput = requests / q if requests else 0.0
    sources: tuple[tuple[str, float], ...] = ((f"{kind}_scale", max(bandwidth, throughput)),)
    sizes = curve.sizes
    if sizes and size > 0 and (size < sizes[0] / 2 or size > sizes[-1] * 2 or (profile.max_streams > 0 and flight > 2 * profile.max_streams)):
        sources += ((f"extrapolation:{kind}", max(bandwidth, throughput)),)
    if throughput >= bandwidth:
        rate = f"{q:,.0f}" if q >= 10 else f"{q:.3g}"
        return Term(f"{kind} throughput", throughput, f"{requests:,.0f} {kind}s of {size / 1e6:.3g} MB at {rate} req/s with {flight:g} in flight", sources)
    per = f"per function x {c:g}" if profile.network_per_function else f"per stream x {flight:g}"
    return Term(f"{kind} bandwidth", bandwidth, f"{data / 1e6:,.0f} MB at {bw / 1e6:.0f} MB/s {per}", sources)


def ref_add(a: Term, b: Term) -> Term:
    if not b.seconds:
        return a
    if not a.seconds:
        return b
    sources: dict[str, float] = {}
    for k, v in a.sources + b.sources:
        sources[k] = sources.get(k, 0.0) + v
    main = a if a.seconds >= b.seconds else b
    return Term(main.name, a.seconds + b.seconds, main.why, tuple(sources.items()))


def ref_scaled(term: Term, scale: float, pack: float) -> Term:
    factor = scale * pack
    return Term(term.name, term.seconds * factor, term.why, tuple((k, v * factor) for k, v in term.sources))


def ref_calls(facts: StageFacts, kind: str) -> float:
    if kind.startswith("read:exchange") and facts.exchange_reads > 0:
        return float(max(facts.exchange_reads, facts.calls.get(kind, facts.tasks)))
    return facts.calls.get(kind, max(1, facts.tasks))


def ref_stage(facts: StageFacts, profile: StorageProfile, concurrency: int | None) -> tuple[tuple[Term, ...], dict[str, float], float]:
    """The terms, spread and noise of a stage, every lookup made afresh."""
    tasks = max(1, facts.tasks)
    c = max(1, min(tasks, concurrency or profile.concurrency, tasks))
    waves = math.ceil(tasks / c)
    pack = waves * c / tasks
    t0, t1 = profile.startup_seconds, profile.wave_seconds * waves
    startup = Term("start-up", t0 + t1, f"{waves} wave(s) of {c} functions", (("t0", t0), ("t1", t1)))
    compute_of = {k: (profile.compute[key] if (key := lookup_key(profile.compute, k)) is not None else DEFAULT_COMPUTE) for k in facts.phases}
    call_of = {k: (profile.call_seconds[key] if (key := lookup_key(profile.call_seconds, k)) is not None else 0.0) for k in facts.phases}
    per_byte = {k: compute_of[k] * b for k, b in facts.phases.items() if b}
    per_call = {k: call_of[k] * ref_calls(facts, k) for k in facts.phases}
    per_kind = {k: per_byte.get(k, 0.0) + per_call[k] for k in facts.phases}
    heaviest = max(per_kind, key=lambda k: per_kind[k]) if per_kind else "nothing"
    compute = Term(
        "compute",
        pack * sum(per_kind.values()) / c,
        f"{sum(facts.phases.values()) / 1e6:,.0f} MB through {len(per_kind)} phase kind(s) on {c} cores, most in {heaviest}",
        tuple((f"compute:{k}", pack * v / c) for k, v in per_byte.items()) + tuple((f"call:{k}", pack * v / c) for k, v in per_call.items() if v),
    )
    largest = max(facts.phases.values(), default=0.0)
    f = largest / max(1, facts.tasks) * profile.first_touch_seconds_per_byte
    touch = Term("first-touch memory", f, f"{largest / tasks / 1e6:,.1f} MB of fresh memory per function", (("first_touch", f),))
    fetched = facts.exchange_reads
    data_reads = ref_io("read", facts.read_bytes - facts.exchange_read_bytes, facts.reads - fetched, profile, c)
    streams = min(FETCH_THREADS, fetched / tasks) if fetched else 1.0
    fetches = ref_io("read", facts.exchange_read_bytes, fetched, profile, c, streams)
    read = ref_scaled(ref_add(data_reads, fetches), profile.read_scale, pack)
    write = ref_scaled(ref_io("write", facts.write_bytes, facts.writes, profile, c), profile.write_scale, pack)
    late = profile.imbalance * (compute.seconds + read.seconds + write.seconds) / waves
    imbalance = Term("imbalance", late, f"unequal tasks: the last ends {100 * profile.imbalance:.0f}% of a task's work later", (("imbalance", late),))
    terms = (startup, touch, compute, read, write, imbalance)
    spread: dict[str, float] = {}
    for term in terms:
        for coefficient, seconds in term.sources:
            spread[coefficient] = spread.get(coefficient, 0.0) + seconds * ref_error(profile, coefficient)
    return terms, spread, profile.residual * sum(t.seconds for t in terms)


def ref_facts(plan: ExchangePlan, data_bytes: int, producers_done: bool, phases: dict[str, tuple[str, ...]] | None, profile: StorageProfile) -> list[StageFacts]:
    kinds = {**SORT_PHASES, **(phases or {})}
    write_kind = next((k for k in kinds.get("map", ()) if k.startswith("write:exchange")), None)
    key = lookup_key(profile.stored, write_kind) if write_kind is not None else None
    stored = profile.stored[key] if key is not None else 1.0
    p, m, d = plan.workers, plan.producers, float(data_bytes)
    counts = plan.counts(data_bytes)
    facts = []
    for stage in plan.stages():
        if stage.reads is None and producers_done:
            continue
        first, last = stage.reads is None, stage.writes is None
        written = stage.writes if stage.writes is not None else stage.reads
        assert written is not None
        name = "map" if first else ("reduce" if last else f"level-{written + 1}")
        role = "map" if first else ("reduce" if last else "level")
        fetched = 0 if first else counts[stage.reads].gets + counts[stage.reads].ranged_gets
        reads = (m if any(k.startswith("read:") for k in kinds[role]) else 0) if first else fetched
        writes = counts[stage.writes].puts if not last else (p if any(k.startswith("write:output") for k in kinds[role]) else 0)
        write_bytes = (d * stored if not last else d) if writes else 0.0
        read_bytes = (d * stored if not first else d) if reads else 0.0
        facts.append(StageFacts(name, stage.tasks, {k: d for k in kinds[role]}, reads, read_bytes, writes, write_bytes, fetched, d * stored if fetched else 0.0))
    return facts


def reference(plan: ExchangePlan, data_bytes: int, profile: StorageProfile, concurrency: int | None, producers_done: bool, phases: dict[str, tuple[str, ...]] | None) -> dict[str, Any]:
    """What a candidate must show: every stage's terms (texts formatted at once), spread and
    noise; the totals, range, requests, cost and dominant term."""
    stages = [ref_stage(f, profile, concurrency) for f in ref_facts(plan, data_bytes, producers_done, phases, profile)]
    seconds = sum(sum(t.seconds for t in terms) for terms, _, _ in stages)
    plain = tuple(StagePrediction(f"s{i}", terms, spread, noise) for i, (terms, spread, noise) in enumerate(stages))
    low, high = interval(plain)
    requests = job_requests(plan)
    usd = cost(Prediction(plan, data_bytes, plain, requests), profile, concurrency)
    totals: dict[str, float] = {}
    whys: dict[str, str] = {}
    for terms, _, _ in stages:
        for t in terms:
            totals[t.name] = totals.get(t.name, 0.0) + t.seconds
            whys.setdefault(t.name, t.why)
    name = max(totals, key=lambda k: totals[k])
    return {
        "stages": [([(t.name, t.seconds, t.why, t.sources) for t in terms], list(spread.items()), noise) for terms, spread, noise in stages],
        "seconds": seconds, "low": low, "high": high, "requests": requests, "cost": usd,
        "dominant": (name, totals[name], whys[name]),
    }  # fmt: skip


def shown(c: Prediction) -> dict[str, Any]:
    """The same of a candidate the selector predicted."""
    d = c.dominant()
    return {
        "stages": [([(t.name, t.seconds, t.why, t.sources) for t in s.terms], list(s.spread.items()), s.noise) for s in c.stages],
        "seconds": c.seconds, "low": c.low, "high": c.high, "requests": c.requests, "cost": c.cost,
        "dominant": (d.name, d.seconds, d.why),
    }  # fmt: skip


# --- profiles that share a name but not their tables -----------------------------------------------

BASE = StorageProfile.load("local")
PROFILES = [
    BASE,
    StorageProfile.load("aws-s3"),
    # the same name and curves, other per-kind tables and errors: a memo kept by name or by kind
    # alone would answer with the first profile's
    replace(
        BASE,
        compute={**{k: v * 3.0 for k, v in BASE.compute.items()}, "hash_aggregate": 7e-9, "hash_join#0a58d760": 2e-8},
        call_seconds={**{k: v * 2.0 + 1e-4 for k, v in BASE.call_seconds.items()}, "read:exchange": 3e-3},
        uncertainty={**{k: v * 1.5 for k, v in BASE.uncertainty.items()}, "compute:hash_aggregate": 0.4, "t1": 0.02},
        stored={"write:exchange": 0.5}, imbalance=0.35, residual=0.3, max_streams=1,
    ),
    # other curves (new Curve objects with other points), per-function network
    replace(
        BASE,
        read=Curve(BASE.read.sizes, tuple(v / 3 for v in BASE.read.per_worker), tuple(v / 2 for v in BASE.read.ceiling)),
        write=Curve(BASE.write.sizes[1:], BASE.write.per_worker[1:], BASE.write.ceiling[1:]),
        network_per_function=True, read_bandwidth=BASE.read_bandwidth / 7,
    ),
]
PHASES: list[dict[str, tuple[str, ...]] | None] = [
    None,
    {"reduce": ("read:exchange-frames-arrow", "hash_aggregate", "write:exchange-frames-arrow-single"), "level": ("read:exchange-frames-arrow", "write:exchange-frames-arrow-hash")},
    {"reduce": ("read:exchange-frames-arrow", "read:exchange-frames-arrow", "hash_join#0a58d760", "project#28e3ed1d", "write:exchange-frames-arrow-hash")},
    {"map": ("read:parquet", "filter", "write:exchange-frames-arrow-hash"), "reduce": ("read:exchange-frames-arrow", "hash_aggregate#3a4fe8f4", "write:output-parquet")},
    {"reduce": ("read:exchange-frames-zstd", "an_unknown_kind", "write:result")},
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(range(len(PROFILES))),
            st.integers(1, 400_000_000),
            st.sampled_from([1, 2, 3, 8, 15]),
            st.sampled_from([None, 16, 128]),
            st.sampled_from([1, 2, 4, None]),
            st.booleans(),
            st.sampled_from(range(len(PHASES))),
        ),
        min_size=2,
        max_size=4,
    )
)
def test_choose_matches_the_reference_model(cases: list[tuple[int, int, int, int | None, int | None, bool, int]]) -> None:
    for which, data_bytes, senders, buckets, concurrency, done, phase in cases:  # several profiles in turn: memos must not mix
        profile, phases = PROFILES[which], PHASES[phase]
        choice = choose(data_bytes, profile, concurrency=concurrency, senders=senders, buckets=buckets, producers_done=done, phases=phases, max_workers=12)
        refs = {id(c): reference(c.plan, data_bytes, profile, concurrency, done, phases) for c in choice.candidates}  # once per candidate
        for c in choice.candidates:
            assert shown(c) == refs[id(c)], (c.plan.name, c.workers)
        # the choice itself, by the rule applied to the reference numbers
        point = min(choice.candidates, key=lambda c: (refs[id(c)]["seconds"], refs[id(c)]["cost"]))
        rivals = [c for c in choice.candidates if refs[id(c)]["low"] <= refs[id(point)]["high"]]
        best = min(rivals, key=lambda c: (round(refs[id(c)]["seconds"] + refs[id(c)]["high"], 9), refs[id(c)]["seconds"], len(c.stages)))
        assert (choice.best.plan.name, choice.best.workers) == (best.plan.name, best.workers)
        d = choice.best.dominant()
        assert f"dominated by {d.name}: {refs[id(choice.best)]['dominant'][2]}" in choice.explain()


def test_a_fresh_copy_of_a_profile_predicts_the_same() -> None:
    """Memos are the profile's own: a profile used a while and an untouched copy agree exactly."""
    used = PROFILES[2]
    for d in (7_000, 15_000_000):
        choose(d, used, concurrency=2, senders=8, buckets=128, producers_done=True, phases=PHASES[1])
    fresh = StorageProfile.from_dict(asdict(used))
    for d in (7_000, 1_100_000, 200_000_000):
        a = choose(d, used, concurrency=2, senders=8, buckets=128, producers_done=True, phases=PHASES[1])
        b = choose(d, fresh, concurrency=2, senders=8, buckets=128, producers_done=True, phases=PHASES[1])
        assert a.explain(rows=100) == b.explain(rows=100)
        assert [shown(c) for c in a.candidates] == [shown(c) for c in b.candidates]


def test_a_term_formats_its_why_when_read_and_behaves_as_its_text() -> None:
    lazy = Term("read throughput", 1.5, partial("{} reads of {:.3g} MB".format, 12, 0.25), (("read_scale", 1.5),))
    plain = Term("read throughput", 1.5, "12 reads of 0.25 MB", (("read_scale", 1.5),))
    assert lazy.why == plain.why == "12 reads of 0.25 MB"
    assert lazy == plain and hash(lazy) == hash(plain) and repr(lazy) == repr(plain) and asdict(lazy) == asdict(plain)
    assert replace(lazy, seconds=2.0) == replace(plain, seconds=2.0)
    assert Term("x", 1.0).why == "" and Term("x", 1.0) == Term("x", 1.0, "", ())
    prediction = predict(ExchangePlan.direct(4), 10**8, BASE, 2)
    again = pickle.loads(pickle.dumps(prediction))  # a prediction's terms still pickle (their texts unread)
    assert again.explain() == prediction.explain() and again.stages == prediction.stages and again.seconds == prediction.seconds


def test_stage_facts_that_differ_in_any_field_have_different_keys() -> None:
    """The selector predicts a stage its candidates share once, by :meth:`StageFacts.key`: facts
    that differ in any field must not share a prediction."""
    from dataclasses import fields

    base = StageFacts("reduce", 4, {"sort": 1e6}, 8, 1e6, 4, 1e6, 8, 1e6, {"sort": 4.0})
    changed = {"name": "map", "tasks": 5, "phases": {"sort": 2e6}, "reads": 9, "read_bytes": 2e6, "writes": 5, "write_bytes": 2e6,
               "exchange_reads": 9, "exchange_read_bytes": 2e6, "calls": {"sort": 5.0}}  # fmt: skip
    assert set(changed) == {f.name for f in fields(StageFacts)}, "a new field: give it a changed value here and a place in key()"
    assert base.key() == replace(base).key()
    for name, value in changed.items():
        assert replace(base, **{name: value}).key() != base.key(), name
