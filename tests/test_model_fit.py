"""Fitting the stage model: synthetic timings from known coefficients are recovered, robustly;
learning from run reports; prediction ranges and the selector's robust choice."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.exchange.plan import ExchangePlan
from croupier.jobs.calibrate import describe, from_reports
import croupier.model.fit as fit_module
from croupier.model.fit import Observation, cold, fit, format_estimate, observations_from_report, per_kind
from croupier.model.perf import Prediction
from croupier.model.profile import Curve, StorageProfile, call_weight
from croupier.model.selector import choose, robust
from croupier.model.stage import StageFacts, StagePrediction, Term, interval, kind_seconds, phase_calls, predict_stage
from croupier.report import cold_phase

CONCURRENCY = 2


def truth() -> StorageProfile:
    """The coefficients the synthetic timings are generated from."""
    return StorageProfile(
        name="truth", source="test",
        read=Curve((4096.0, 1e6, 16e6), (3000.0, 800.0, 60.0), (6000.0, 2000.0, 200.0)),
        write=Curve((4096.0, 1e6, 16e6), (1500.0, 400.0, 30.0), (3000.0, 1000.0, 100.0)),
        read_bandwidth=1e9, write_bandwidth=5e8, startup_seconds=0.02, wave_seconds=0.004,
        compute={"read:parquet": 2e-9, "hash_aggregate": 1.5e-9, "write:exchange-frames-arrow-hash": 1e-9,
                 "read:exchange-frames-arrow": 0.5e-9, "sort": 6e-9, "regroup": 0.4e-9, "write:output-parquet": 3e-9},
        call_seconds={"read:parquet": 2e-3, "write:output-parquet": 3e-3, "hash_aggregate": 0.5e-3, "regroup": 1e-3},
        read_scale=0.6, write_scale=1.3, first_touch_seconds_per_byte=2e-10, imbalance=0.07, concurrency=CONCURRENCY, max_streams=8,
    )  # fmt: skip


def wrong(profile: StorageProfile) -> StorageProfile:
    """The same store with every fitted coefficient wrong (the curves stay: the grid measures them;
    so does first touch, which the base profile states and the fit never estimates)."""
    return replace(profile, compute={}, call_seconds={}, read_scale=1.0, write_scale=1.0, startup_seconds=0.3, wave_seconds=0.1, imbalance=0.5)


#: Stage shapes: phase kinds with their share of D, and how the stage reads.
SHAPES = (
    ({"read:parquet": 1.0, "hash_aggregate": 1.0, "write:exchange-frames-arrow-hash": 1.0}, "scan"),
    ({"read:exchange-frames-arrow": 1.0, "hash_aggregate": 1.0, "write:output-parquet": 0.3}, "final"),
    ({"regroup": 1.0}, "level"),
    ({"read:exchange-frames-arrow": 1.0, "sort": 1.0, "write:output-parquet": 1.0}, "sort"),
)


def synthetic(t: StorageProfile, noise: float = 0.0, seed: int = 0) -> list[Observation]:
    """Stages of every shape at several task counts and sizes, timed exactly as the model says
    ``t`` would run them (plus relative noise on the stage's wall time)."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, role in SHAPES:
        for tasks in (1, 2, 3, 4, 8, 11, 16):
            for d in (5e6, 40e6, 200e6):
                phases = {k: d * r for k, r in shape.items()}
                reads = tasks if role == "scan" else tasks * (4 if role == "level" else tasks)
                fetched = 0 if role == "scan" else reads
                written = sum(v for k, v in phases.items() if k.startswith("write:")) or d
                facts = StageFacts(role, tasks, phases, reads, d, tasks, written, fetched, d if fetched else 0.0)
                out.append(_timed(facts, t, noise * rng.standard_normal()))
    return out


def _timed(facts: StageFacts, t: StorageProfile, error: float) -> Observation:
    prediction = predict_stage(facts, t, CONCURRENCY)
    c = min(facts.tasks, CONCURRENCY)
    pack = math.ceil(facts.tasks / c) * c / facts.tasks
    terms = {x.name.split()[0]: x.seconds * c / pack for x in prediction.terms}  # task-seconds
    readers = [k for k in facts.phases if k.startswith("read:")] or ["regroup"]
    writers = [k for k in facts.phases if k.startswith("write:")] or ["regroup"]
    phases = {}
    for kind, b in facts.phases.items():
        io = terms["read"] * b / sum(facts.phases[k] for k in readers) if kind in readers else 0.0
        io += terms["write"] * b / sum(facts.phases[k] for k in writers) if kind in writers else 0.0
        cpu = t.compute_cost(kind) * b + t.call_cost(kind) * facts.tasks * call_weight(kind)
        phases[kind] = (b, cpu + io, io, float(facts.tasks))
    return Observation(facts, CONCURRENCY, prediction.seconds * (1 + error), phases)


def coefficients(p: StorageProfile) -> dict[str, float]:
    out = {"t0": p.startup_seconds, "t1": p.wave_seconds, "imbalance": p.imbalance, "read_scale": p.read_scale, "write_scale": p.write_scale}
    return out | {f"compute:{k}": p.compute[k] for k in truth().compute} | {f"call:{k}": p.call_seconds[k] for k in truth().call_seconds}


def assert_recovered(fitted: StorageProfile, tolerance: float) -> None:
    for name, value in coefficients(truth()).items():
        assert coefficients(fitted)[name] == pytest.approx(value, rel=tolerance), name


def test_fit_recovers_every_coefficient_from_exact_timings() -> None:
    result = fit(synthetic(truth()), wrong(truth()), bootstrap=10)
    assert_recovered(result.profile, 1e-6)
    assert result.mape < 1e-6 and result.observations == 84
    assert "+-" in result.describe() and "compute:sort" in result.describe()


def test_fit_discounts_outliers_from_noisy_runs() -> None:
    """One stage in nine took 2.5 times as long (a noisy neighbour): every term still within 5%."""
    observations = synthetic(truth(), noise=0.002, seed=3)
    for i in range(0, len(observations), 9):
        observations[i] = replace(observations[i], wall=observations[i].wall * 2.5)
    result = fit(observations, wrong(truth()), bootstrap=10)
    assert_recovered(result.profile, 0.05)


def test_start_up_waves_and_imbalance_come_from_what_the_measured_phases_leave() -> None:
    """Phases scatter +-15% around the compute model from stage to stage (as real operators do)
    while start-up, waves and imbalance stay exact: t0, t1 and g are still recovered exactly,
    because step 3 explains the wall time the phases measurably leave, not what the fitted compute
    terms leave (on a 1 s stage a 5% miss there is 50 ms, which drowned a 20 ms start-up)."""
    rng = np.random.default_rng(7)
    observations = []
    for o in synthetic(truth()):
        c = min(o.facts.tasks, CONCURRENCY)
        waves = math.ceil(o.facts.tasks / c)
        pack = waves * c / o.facts.tasks
        factor = 1 + rng.uniform(-0.15, 0.15)
        phases = {k: (b, io + (wall - io) * factor, io, calls) for k, (b, wall, io, calls) in o.phases.items()}
        extra = sum(v[1] for v in phases.values()) - sum(v[1] for v in o.phases.values())
        observations.append(replace(o, phases=phases, wall=o.wall + (1 + truth().imbalance / waves) * pack * extra / c))
    result = fit(observations, wrong(truth()), bootstrap=5)
    assert result.profile.startup_seconds == pytest.approx(truth().startup_seconds, rel=1e-6)
    assert result.profile.wave_seconds == pytest.approx(truth().wave_seconds, rel=1e-6)
    assert result.profile.imbalance == pytest.approx(truth().imbalance, rel=1e-6)


def test_the_imbalance_is_predicted_on_one_task_s_work_and_billed_once() -> None:
    """g = 0.07 of one task's compute and storage (a function's over its waves: tasks are handed
    out as functions free up, so only the last ones' spread shows, however many waves there are);
    the other functions of the stage are done by then, so only the last one is billed for it."""
    for facts in (synthetic(truth())[5].facts, replace(synthetic(truth())[5].facts, tasks=5 * CONCURRENCY)):
        prediction = predict_stage(facts, truth(), CONCURRENCY)
        terms = {t.name.split()[0]: t.seconds for t in prediction.terms}
        waves = math.ceil(facts.tasks / min(facts.tasks, CONCURRENCY))
        assert terms["imbalance"] == pytest.approx(0.07 * (terms["compute"] + terms["read"] + terms["write"]) / waves)
        assert prediction.function_seconds(2) == pytest.approx(2 * prediction.seconds - terms["imbalance"])
    assert waves == 5


def test_fit_reports_uncertainty_that_grows_with_noise() -> None:
    quiet = fit(synthetic(truth(), noise=0.005, seed=1), wrong(truth()), bootstrap=40)
    noisy = fit(synthetic(truth(), noise=0.08, seed=1), wrong(truth()), bootstrap=40)
    assert noisy.errors["t0"] > quiet.errors["t0"] > 0
    assert noisy.profile.residual > quiet.profile.residual
    assert 0 < noisy.profile.uncertainty["t0"] < 10


def test_first_touch_is_the_base_profiles_never_fitted() -> None:
    """Warm functions never pay first touch, so the fit does not estimate it from stage times (it
    found noise there): a base without it stays without it, and one that states it keeps it and
    has it taken out of what t0 and t1 explain, so they are still recovered."""
    observations = synthetic(truth())
    stated = fit(observations, wrong(truth()), bootstrap=5)
    assert stated.profile.first_touch_seconds_per_byte == truth().first_touch_seconds_per_byte
    assert stated.profile.startup_seconds == pytest.approx(truth().startup_seconds, rel=1e-6)
    assert stated.profile.wave_seconds == pytest.approx(truth().wave_seconds, rel=1e-6)
    assert "first_touch" not in stated.estimates and "first_touch" not in stated.describe()
    none = fit(observations, replace(wrong(truth()), first_touch_seconds_per_byte=0.0), bootstrap=5)
    assert none.profile.first_touch_seconds_per_byte == 0.0


def _cold(o: Observation, slowdown: float) -> Observation:
    """``o`` as a cold function ran it: every phase touched as much fresh memory as its bytes and
    took ``slowdown`` times as long, and so did the stage."""
    phases = {k: (b, wall * slowdown, io, calls, max(b, calls * 2.0**21)) for k, (b, wall, io, calls, *_) in o.phases.items()}
    return replace(o, phases=phases, wall=o.wall * slowdown)


def test_a_runs_stages_in_cold_functions_are_not_learned_from() -> None:
    """A function's first tasks fault their memory in (a TPC-H Q1 task: 390 ms cold, 120 warm).
    A run's stages whose phases touched about as much fresh memory as their data are not learned
    from (a phase that touched a little counts as warm), unless all of them are (a platform with
    a fresh process per call: that is all there is to learn from)."""
    from croupier.model.cache import Entry, learn

    observations = synthetic(truth())
    entry = Entry(fit(observations, wrong(truth()), bootstrap=5).profile, observations)
    run = [_cold(o, 2.0) if i % 2 == 0 else o for i, o in enumerate(observations[:12])]
    assert sum(cold(o) for o in run) == 6 and not any(cold(o) for o in observations)
    learned = learn(entry, run, bootstrap=5)
    assert len(learned.history) == 6 and not any(cold(o) for o in learned.history)
    assert_recovered(learned.profile, 1e-6)  # the cold ones, twice as slow, would have moved it
    assert len(learn(entry, [_cold(o, 1.0) for o in observations[:12]], bootstrap=5).history) == 12
    # an operator seen only in a session's cold first run keeps its kind's price
    signed = _signed(observations[:12], "0badc0de", 3.0)
    assert "hash_aggregate#0badc0de" not in learn(entry, [_cold(o, 2.0) for o in signed] + observations[12:14], bootstrap=5).profile.compute
    assert not cold_phase((100e6, 1.0, 0.0, 4.0, 4e6)) and not cold_phase((0.0, 0.01, 0.0, 1.0, 5e5))  # under 5%; under 1 MiB
    assert cold_phase((100e6, 1.0, 0.0, 4.0, 6e6)) and cold_phase((0.0, 0.01, 0.0, 1.0, 2e6))
    assert not cold_phase((1e6, 0.1, 0.0, 16.0, 2e6))  # 16 calls of 125 KB each: warm calls touch that much
    assert not cold_phase((100e6, 1.0, 0.0, 4.0))  # an older report, without fresh memory: warm


def test_a_term_the_data_cannot_tell_keeps_the_base_value() -> None:
    """All stages with one task per function (one wave): t1 is not identifiable and is kept."""
    observations = [o for o in synthetic(truth()) if o.facts.tasks <= CONCURRENCY]
    base = replace(wrong(truth()), wave_seconds=0.123)
    result = fit(observations, base, bootstrap=5)
    assert math.isnan(result.estimates["t1"]) and result.profile.wave_seconds == 0.123
    assert "not identifiable" in result.describe()


def test_a_term_fitted_to_zero_is_reported_as_not_identified_not_as_a_certain_zero() -> None:
    assert format_estimate(0.0, 0.0, 1e3, "ms").startswith("not identified")
    assert "+-" not in format_estimate(0.0, 0.0, 1e3, "ms")
    assert "uncertainty not measured" in format_estimate(2e-3, 1e-18, 1e3, "ms")
    assert format_estimate(2e-3, 5e-4, 1e3, "ms").strip() == "2 +- 0.5 ms"
    assert "within 2 standard errors of 0" in format_estimate(2e-3, 2e-3, 1e3, "ms")
    assert "not identified (0)" in describe(replace(truth(), wave_seconds=0.0))


def test_exchange_reads_pay_their_fixed_cost_per_object_fetched() -> None:
    """A consumer of 12 producers opens 12 objects: 12 calls of read:exchange; other kinds once per task."""
    facts = StageFacts("c", 2, {"read:exchange-frames-arrow": 1e6, "sort": 1e6}, reads=24, read_bytes=1e6, exchange_reads=24, exchange_read_bytes=1e6)
    assert phase_calls(facts, "read:exchange-frames-arrow") == 24 and phase_calls(facts, "sort") == 2
    profile = replace(truth(), call_seconds={"read:exchange-frames-arrow": 1e-3}, compute={})
    only_calls = replace(facts, phases={"read:exchange-frames-arrow": 0.0})  # no per-byte cost: just the calls
    compute = next(t for t in predict_stage(only_calls, profile, 2).terms if t.name == "compute")
    assert compute.seconds == pytest.approx(24 * 1e-3 / 2)


def _stage_json(o: Observation) -> dict:
    f = o.facts
    data = f.reads - f.exchange_reads
    return {
        "name": f.name, "tasks": f.tasks, "wall_seconds": o.wall, "phases": {k: list(v) for k, v in o.phases.items()},
        "io": {"GET": {"requests": f.reads, "bytes": f.read_bytes}, "PUT": {"requests": f.writes, "bytes": f.write_bytes}},
        "exchange_io": {"GET": {"requests": f.exchange_reads, "bytes": f.exchange_read_bytes}} if f.exchange_reads else {},
        "predicted": {"concurrency": o.concurrency}, "shared": [], "_data_reads": data,
    }  # fmt: skip


def test_learning_from_reports_moves_a_wrong_coefficient_toward_the_truth(tmp_path: Path) -> None:
    """Run reports (JSON as --report writes it) of stages timed under the true coefficients refit
    a profile whose sort cost is 20 times too high."""
    t = truth()
    bad = replace(t, compute=dict(t.compute, sort=20 * t.compute["sort"]), revision=4)
    report = {"run_id": "r1", "stages": [_stage_json(o) for o in synthetic(t)]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(report))
    assert len(observations_from_report(report, CONCURRENCY)) == 84
    result = from_reports([path], bad, CONCURRENCY)
    assert result.profile.compute["sort"] == pytest.approx(t.compute["sort"], rel=1e-3)
    assert result.profile.revision == 5 and "refitted from 84 stages" in result.profile.source
    assert "compute per phase kind" in describe(result.profile)


def test_stages_that_shared_an_executor_call_are_one_observation() -> None:
    a, b = synthetic(truth())[:2]
    report = {"stages": [_stage_json(a) | {"shared": ["x", "y"], "wall_seconds": 1.0}, _stage_json(b) | {"shared": ["x", "y"], "wall_seconds": 1.0}]}
    (merged,) = observations_from_report(report, CONCURRENCY)
    assert merged.facts.tasks == a.facts.tasks + b.facts.tasks and merged.wall == 1.0


# --- ranges and the robust choice ---------------------------------------------------------------


def _prediction(seconds: float, spread: float, levels: int = 1) -> Prediction:
    stage = StagePrediction("s", (Term("compute", seconds, "", (("c", seconds),)),), {"c": spread}, 0.0)
    return Prediction(ExchangePlan.direct(4), 10**6, (stage,) * 1)


def test_ranges_come_from_coefficient_errors_and_residual() -> None:
    exact = replace(truth(), uncertainty={k: 0.0 for k in coefficients(truth())} | {"first_touch": 0.0}, residual=0.0)
    facts = StageFacts("s", 8, {"sort": 1e8, "read:parquet": 1e8}, 8, 1e8, 8, 1e8)
    assert predict_stage(facts, exact, 2).interval() == pytest.approx((predict_stage(facts, exact, 2).seconds,) * 2)
    sure = predict_stage(facts, replace(exact, residual=0.05), 2)
    unsure = predict_stage(facts, replace(exact, residual=0.05, uncertainty={"compute:sort": 0.3}), 2)
    low, high = unsure.interval()
    assert low < sure.interval()[0] < sure.seconds < sure.interval()[1] < high
    # coefficient errors add up linearly over stages that share them, residuals in quadrature
    two = interval([unsure, unsure])
    assert two[1] - 2 * unsure.seconds > math.sqrt(2) * (high - unsure.seconds)


def test_robust_choice_prefers_the_best_worst_case_when_ranges_overlap() -> None:
    shaky, steady, slow = _prediction(1.0, 0.4), _prediction(1.1, 0.02), _prediction(2.0, 0.01)
    assert shaky.high > steady.high and shaky.low < steady.high
    assert robust(shaky, [shaky, steady, slow]) is steady
    clear = _prediction(0.5, 0.01)
    assert robust(clear, [clear, steady, slow]) is clear  # no overlap: the point estimate stands


def test_a_worst_case_hardly_better_does_not_buy_a_slower_estimate() -> None:
    """A rival whose range ends a little lower but whose estimate is slower by more than that is
    not taken (the worst case alone took, on a 400 MB sort, a plan 1% safer that ran 16% slower);
    one whose range ends lower by more than its estimate loses is."""
    point = _prediction(1.0, 0.2)
    nearly = _prediction(1.06, 0.14)  # range ends 0.025 lower, estimate 0.06 slower
    assert point.low <= nearly.high and nearly.high < point.high
    assert nearly.seconds + nearly.high > point.seconds + point.high
    assert robust(point, [point, nearly]) is point
    safer = _prediction(1.06, 0.02)  # range ends 0.24 lower for the same 0.06
    assert robust(point, [point, nearly, safer]) is safer


def test_selector_explains_ranges_and_a_robust_choice() -> None:
    """Far beyond the grid's measured parallelism, the throughput terms are extrapolated (wider
    ranges); the choice and every candidate show a range."""
    profile = replace(truth(), concurrency=1000, function_memory=2 << 30, max_streams=4)
    choice = choose(50 * 10**9, profile, max_workers=300)
    assert choice.best.low <= choice.best.seconds <= choice.best.high
    text = choice.explain(5)
    assert "90% range" in text and f"({choice.best.low:.3f}-{choice.best.high:.3f})" in text
    if choice.point is not None:
        assert choice.best.high <= choice.point.high and "better worst case" in text


def test_calibrate_output_gives_every_coefficient_with_its_error() -> None:
    """``croupier calibrate`` prints each fitted coefficient, per-byte and per-call, with its +- error."""
    profile = fit(synthetic(truth()), wrong(truth()), bootstrap=10).profile
    text = describe(profile)
    for kind in truth().compute:
        row = next(line for line in text.splitlines() if line.strip().startswith(kind + " "))
        if truth().call_seconds.get(kind, 0.0) > 0:
            assert row.count("+-") == 2 and "ns/B" in row and "ms/call" in row, row  # the fit measured both
        else:  # a cost that is truly 0 is fitted to 0, which the fit cannot tell from "not identified"
            assert row.count("+-") == 1 and "ns/B" in row and row.endswith("not identified (0)"), row
    sort_row = next(line for line in text.splitlines() if line.strip().startswith("sort "))
    assert sort_row.split()[1] == "6", sort_row  # 6 ns/B, the truth's
    parquet_row = next(line for line in text.splitlines() if line.strip().startswith("read:parquet "))
    assert "2 +-" in parquet_row.split("ns/B")[1], parquet_row  # 2 ms per call, the truth's
    assert "stage start-up" in text and "first touch" in text and "read x" in text


# --- operator signatures: what one query's operator costs, learned from its runs -----------------


def _signed(observations: list[Observation], signature: str, factor: float) -> list[Observation]:
    """``observations`` with their hash_aggregate phases renamed to ``hash_aggregate#signature``
    and ``factor`` times as costly per byte (the same kind of operator computing something else)."""
    out = []
    for o in observations:
        phases, extra = {}, 0.0
        for kind, (b, wall, io, calls) in o.phases.items():
            if kind == "hash_aggregate":
                cpu = wall - io - truth().call_cost(kind) * calls
                kind, wall, extra = f"hash_aggregate#{signature}", io + truth().call_cost(kind) * calls + factor * cpu, (factor - 1) * cpu
            phases[kind] = (b, wall, io, calls)
        facts = replace(o.facts, phases={k: v[0] for k, v in phases.items()}, calls={k: v[3] for k, v in phases.items()})
        c = min(o.facts.tasks, CONCURRENCY)
        waves = math.ceil(o.facts.tasks / c)
        pack = waves * c / o.facts.tasks
        out.append(replace(o, facts=facts, phases=phases, wall=o.wall + (1 + truth().imbalance / waves) * pack * extra / c))  # work and its imbalance
    return out


def test_operator_signatures_are_fitted_apart_and_their_kind_from_all_of_them() -> None:
    """Two aggregations (one 3 times as costly per byte) are priced apart; their kind, which
    prices an aggregation never seen, from both; the per-call cost is not counted twice."""
    cheap, costly = synthetic(truth())[:21], synthetic(truth())[21:42]
    observations = _signed(cheap, "aaaa0001", 1.0) + _signed(costly, "bbbb0002", 3.0) + synthetic(truth())[42:]
    profile = fit(observations, wrong(truth()), bootstrap=5).profile
    c = truth().compute["hash_aggregate"]
    assert profile.compute_cost("hash_aggregate#aaaa0001") == pytest.approx(c, rel=1e-2)  # seconds of their time: their own costs, nearly whole
    assert profile.compute_cost("hash_aggregate#bbbb0002") == pytest.approx(3 * c, rel=1e-2)
    assert c < profile.compute_cost("hash_aggregate#cccc0003") == profile.compute_cost("hash_aggregate") < 3 * c
    assert profile.call_cost("hash_aggregate#aaaa0001") == pytest.approx(truth().call_cost("hash_aggregate"), rel=1e-2)


def test_a_signature_seen_at_one_size_keeps_its_kinds_per_call_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage run again at the same size cannot split per byte from per call: its signature gets
    a per-byte cost net of its kind's per-call cost, so predicting it again is right (its own
    cost taken whole: how much of it counts is the next test's)."""
    monkeypatch.setattr(fit_module, "SIGNATURE_SECONDS", 0.0)
    same = [o for o in synthetic(truth()) if o.facts.name == "scan" and o.facts.tasks == 4 and o.facts.phases["read:parquet"] == 40e6]
    rest = synthetic(truth())
    profile = fit(rest + _signed(same, "dddd0004", 2.0), wrong(truth()), bootstrap=5).profile
    c = truth().compute["hash_aggregate"]
    assert profile.compute_cost("hash_aggregate#dddd0004") == pytest.approx(2 * c, rel=1e-3)
    (again,) = _signed(same, "dddd0004", 2.0)
    assert predict_stage(again.facts, profile, CONCURRENCY).seconds == pytest.approx(again.wall, rel=1e-3)


def test_a_signature_is_priced_by_itself_as_far_as_its_measured_time_tells() -> None:
    """One run of a query's few-millisecond stage is mostly noise and first calls (a warm-up run's
    4 ms final stage took twice its later time): a signature's cost lies between its own and its
    kind's, by how many core-seconds of it were measured (half-way at SIGNATURE_SECONDS)."""
    tiny = [o for o in synthetic(truth()) if o.facts.name == "scan" and o.facts.tasks == 1 and o.facts.phases["read:parquet"] == 5e6]
    big = [o for o in synthetic(truth()) if o.facts.name == "scan" and o.facts.tasks == 16 and o.facts.phases["read:parquet"] == 200e6]
    c = truth().compute["hash_aggregate"]
    for few, signature in ((tiny, "eeee0005"), (big, "ffff0006")):
        (signed,) = _signed(few, signature, 3.0)
        own = signed.phases[f"hash_aggregate#{signature}"]
        seconds = own[1] - own[2]
        w = seconds / (seconds + fit_module.SIGNATURE_SECONDS)
        profile = fit(synthetic(truth()) + [signed], wrong(truth()), bootstrap=5).profile
        kind = profile.compute_cost("hash_aggregate")
        assert profile.compute_cost(f"hash_aggregate#{signature}") == pytest.approx(w * 3 * c + (1 - w) * kind, rel=1e-3)
    assert 0.2 < 1e-2 / (1e-2 + fit_module.SIGNATURE_SECONDS) < 0.5 < 0.3 / (0.3 + fit_module.SIGNATURE_SECONDS)  # 10 ms: mostly the kind's; 300 ms: its own


def test_signatures_that_left_the_observations_leave_the_profile() -> None:
    """A profile learning from ad-hoc queries does not grow without bound."""
    old = replace(truth(), compute=dict(truth().compute, **{"sort#0ld00000": 1e-9}), call_seconds=dict(truth().call_seconds, **{"sort#0ld00000": 1e-3}),
                  uncertainty={"compute:sort#0ld00000": 0.1, "compute:sort": 0.1})  # fmt: skip
    profile = fit(_signed(synthetic(truth()), "eeee0005", 1.0), old, bootstrap=5).profile
    assert "sort#0ld00000" not in profile.compute and "sort#0ld00000" not in profile.call_seconds
    assert "compute:sort#0ld00000" not in profile.uncertainty and "compute:sort" in profile.uncertainty
    assert "hash_aggregate#eeee0005" in profile.compute and "hash_aggregate" in profile.compute


def test_operator_kinds_carry_a_stable_signature_of_what_they_compute() -> None:
    """The same operator has the same signature in every process (BLAKE2, not the salted hash()),
    and a different expression another one; scans are signed by columns and predicate, not place."""
    import subprocess
    import sys

    from croupier.dag.operators import Filter
    from croupier.dag.scan import ScanSpec
    from croupier.expr import col
    from croupier.model.profile import base_kind

    kind = Filter(col("a") < 3).cost_kind
    assert base_kind(kind) == "filter" and kind != Filter(col("a") < 4).cost_kind
    code = "from croupier.dag.operators import Filter; from croupier.expr import col; print(Filter(col('a') < 3).cost_kind)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == kind
    here, there = ScanSpec("/a/*.parquet", "parquet", ("x", "y")), ScanSpec("s3://b/c/*.parquet", "parquet", ("x", "y"))
    assert here.cost_kind == there.cost_kind != ScanSpec("/a/*.parquet", "parquet", ("x",)).cost_kind
    assert base_kind(here.cost_kind) == "read:parquet"


def test_projections_that_compute_are_priced_apart_from_those_that_pick_columns() -> None:
    """Picking or renaming columns shares them (nearly free); computing expressions costs per row:
    priced as one kind, TPC-H's computing projections ran 12x their prediction (issue 15)."""
    from croupier.dag.operators import Head, Select, WithColumns
    from croupier.expr import col, lit, when
    from croupier.model.profile import base_kind

    picks = [Select((col("a"), col("b").alias("c"), col("d").alias("e").alias("f"))), WithColumns((col("a").alias("x"),)), Head(3)]
    computes = [Select((col("a"), (col("b") * (1 - col("c"))).alias("d"))), WithColumns((col("d").dt.year().alias("y"),)), Select((when(col("a") > 1).then(col("b")).otherwise(0).alias("z"),)), WithColumns((lit(1).alias("one"),))]
    assert [base_kind(op.cost_kind) for op in picks] == ["project"] * len(picks)
    assert [base_kind(op.cost_kind) for op in computes] == ["evaluate"] * len(computes)


def test_a_compressed_exchange_is_priced_at_the_bytes_it_stores() -> None:
    """The fit measures bytes stored per byte of data of each exchange write kind; a plan's
    exchange then writes and fetches that many bytes while its phases process all the data (on
    SeaweedFS, zstd stores TeraSort records at a third: priced at the full size, every sort was
    predicted 50-80% too slow)."""
    from croupier.model.perf import predict, stage_facts, stored_ratio

    observations = synthetic(truth())
    for i, o in enumerate(observations):
        if "write:exchange-frames-arrow-hash" in o.phases:
            observations[i] = replace(o, facts=replace(o.facts, write_bytes=o.phases["write:exchange-frames-arrow-hash"][0] / 3))
    profile = fit(observations, wrong(truth()), bootstrap=5).profile
    assert profile.stored_ratio("write:exchange-frames-arrow-hash") == pytest.approx(1 / 3)
    assert profile.stored_ratio("write:exchange-records-raw") == 1.0  # never measured: stored as is
    phases = {"map": ("read:parquet", "write:exchange-frames-arrow-hash"), "reduce": ("read:exchange-frames-arrow", "hash_aggregate", "write:output-parquet")}
    plan = ExchangePlan.direct(4)
    squeezed, plain = predict(plan, 10**8, profile, CONCURRENCY, phases=phases), predict(plan, 10**8, replace(profile, stored={}), CONCURRENCY, phases=phases)
    mapper, reducer = stage_facts(plan, 10**8, phases=phases, stored=stored_ratio(profile, phases))
    assert mapper.write_bytes == pytest.approx(1e8 / 3) and reducer.exchange_read_bytes == pytest.approx(1e8 / 3)
    assert mapper.read_bytes == reducer.write_bytes == 1e8 and set(mapper.phases.values()) == {1e8}
    assert squeezed.seconds < plain.seconds
    compute = [next(t for t in s.terms if t.name == "compute").seconds for s in (squeezed.stages + plain.stages)]
    assert compute[:2] == pytest.approx(compute[2:]), "the phases process all the data either way"



def test_a_profiles_remembered_lookups_follow_its_own_tables() -> None:
    """Lookups are remembered per profile; a profile made from it with other tables (as every
    refit makes one) answers from its own tables, and the first keeps its answers."""
    from dataclasses import replace

    from croupier.model.profile import StorageProfile

    first = StorageProfile.load("local")
    kind = "hash_aggregate#0000abcd"
    before = (first.compute_cost(kind), first.call_cost(kind), first.relative_error(f"compute:{kind}"))
    second = replace(first, compute=first.compute | {kind: 1e-6}, call_seconds=first.call_seconds | {kind: 0.5}, uncertainty={f"compute:{kind}": 0.25})
    assert (second.compute_cost(kind), second.call_cost(kind), second.relative_error(f"compute:{kind}")) == (1e-6, 0.5, 0.25)
    assert (first.compute_cost(kind), first.call_cost(kind), first.relative_error(f"compute:{kind}")) == before
    assert before[0] != 1e-6


def test_a_stage_whose_tasks_found_a_kept_side_pays_only_the_decodes_that_ran() -> None:
    """Six probe tasks on two functions: two fetched and decoded the broadcast side (two objects),
    four found it kept (``read:cached``); the side's fixed decode cost is paid twice, not six times."""
    facts = StageFacts("probe", 6, {"read:exchange-frames-arrow": 1e6}, exchange_reads=2, calls={"read:exchange-frames-arrow": 2, "read:cached": 4})
    assert phase_calls(facts, "read:exchange-frames-arrow") == 2
    assert phase_calls(facts, "read:cached") == 4
    many = StageFacts("reduce", 4, {"read:exchange-frames-arrow": 1e6}, exchange_reads=48, calls={"read:exchange-frames-arrow": 4})
    assert phase_calls(many, "read:exchange-frames-arrow") == 48  # one per object fetched
    # the kept side is not priced as a read (the "read:" family's cost per call) but at nothing,
    # until runs measure it
    profile = replace(StorageProfile.load("local"), call_seconds={"read:": 5e-4, "read:exchange-frames-arrow": 3e-4})
    probe = replace(facts, phases=facts.phases | {"read:cached": 0.0})
    per_call = kind_seconds(probe, profile)[1]
    assert per_call["read:cached"] == 0.0 and per_call["read:exchange-frames-arrow"] == 2 * 3e-4
    measured = replace(profile, call_seconds=profile.call_seconds | {"read:cached": 1e-5})
    assert kind_seconds(probe, measured)[1]["read:cached"] == 4e-5


def test_a_kind_whose_calls_all_move_a_few_bytes_is_priced_per_call() -> None:
    """A gathered query tail writes a few hundred bytes per call at every scale: what it takes is
    its fixed cost (read per byte it came out at 1,000 ns/B, and a gather of a few megabytes would
    have been predicted seconds); a kind moving megabytes per call, as many at every scale, is
    priced per byte."""
    calls = np.array([4.0, 12.0, 4.0, 12.0])
    c, d = per_kind(calls * 300.0, calls, calls * 5e-4)
    assert math.isnan(c) and d == pytest.approx(5e-4)
    nbytes = calls * 4e6
    c, d = per_kind(nbytes, calls, nbytes * 1e-9)
    assert c == pytest.approx(1e-9) and math.isnan(d)
    # two observations only (too few to tell per byte from per call), one of megabytes per call
    few, mixed = np.array([100.0, 1.0]), np.array([100.0 * 300, 4e6])
    c, d = per_kind(mixed, few, mixed * 1e-9 + few * 5e-4)
    assert not math.isnan(c) and math.isnan(d)


def test_an_operators_call_costs_more_the_more_expressions_it_runs() -> None:
    """Polars plans and sets up every expression of a call: TPC-H's final aggregations, fused with
    their casts and renames (about 50 expressions), took 2-4 ms per task where a per-call cost
    calibrated on operators of a few expressions said 0.9. An operator's kind carries its
    expressions; its calls weigh 1 + expressions / EXPRESSIONS_PER_CALL, in the prediction and in
    the fit, which recovers the per-call cost from operators of several widths."""
    from croupier.dag.operators import AggSpec, Aggregate, Fused, Select
    from croupier.expr import col
    from croupier.model.profile import EXPRESSIONS_PER_CALL, base_kind

    narrow = Aggregate(("k",), (AggSpec("sum", "v", "s"),))
    wide = Fused((Aggregate(("k",), tuple(AggSpec("sum", f"v{i}", f"s{i}") for i in range(20))), Select(tuple(col(f"s{i}") * 2 for i in range(20)))))
    assert narrow.expressions == 2 and wide.expressions == 41
    assert base_kind(wide.cost_kind) == base_kind(narrow.cost_kind) == "hash_aggregate"
    assert call_weight(wide.cost_kind) == pytest.approx(1 + 41 / EXPRESSIONS_PER_CALL)
    assert call_weight("read:parquet-snappy#1f0c9a2e") == call_weight("write:result") == 1.0
    t = truth()
    facts = [StageFacts("final", tasks, {kind: 1e4 * tasks}) for kind in (narrow.cost_kind, wide.cost_kind) for tasks in (1, 2, 4, 8)]
    compute = [next(x.seconds for x in predict_stage(f, t, 1).terms if x.name == "compute") for f in (facts[0], facts[4])]
    assert compute[1] - compute[0] == pytest.approx(t.call_seconds["hash_aggregate"] * (call_weight(wide.cost_kind) - call_weight(narrow.cost_kind)))
    observed = synthetic(t) + [_timed(f, t, 0.0) for f in facts]
    assert all(o.phases[k][3] == o.facts.tasks for o in observed[-8:] for k in o.phases)  # calls are calls; the model weighs them
    fitted = fit(observed, wrong(t), bootstrap=5).profile
    assert fitted.call_seconds["hash_aggregate"] == pytest.approx(t.call_seconds["hash_aggregate"], rel=1e-6)


def _nnls_by_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares the slow way: every subset of free columns by np.linalg.lstsq,
    the feasible one with the least squared residual."""
    n = a.shape[1]
    best, best_cost = np.zeros(n), float(b @ b)
    for mask in range(1, 1 << n):
        cols = [j for j in range(n) if mask >> j & 1]
        sol = np.linalg.lstsq(a[:, cols], b, rcond=None)[0]
        if (sol < 0).any():
            continue
        x = np.zeros(n)
        x[cols] = sol
        cost = float((a @ x - b) @ (a @ x - b))
        if cost < best_cost - 1e-9 * max(float(b @ b), 1e-30):
            best, best_cost = x, cost
    return best


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(3, 30))
def test_the_fits_small_solvers_agree_with_numpys(seed: int, columns: int, rows: int) -> None:
    """nnls (closed-form 1 x 1 and 2 x 2 solves in plain floats) and the small-array median give
    what numpy's general routines give, on well- and ill-conditioned systems alike."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 1, (rows, columns)) * rng.choice([1e-3, 1.0, 1e3], columns)
    if columns > 1 and seed % 4 == 0:
        a[:, 1] = a[:, 0] * 2  # two columns telling the same thing
    b = a @ rng.uniform(-1, 2, columns) + rng.normal(0, 0.01, rows)
    ours, theirs = fit_module.nnls(a, b), _nnls_by_lstsq(a, b)
    cost = lambda x: float((a @ x - b) @ (a @ x - b))  # noqa: E731
    assert (ours >= 0).all()
    assert cost(ours) <= cost(theirs) * (1 + 1e-6) + 1e-12
    values = rng.normal(0, 1, rows)
    assert fit_module.median(values) == pytest.approx(float(np.median(values)))
