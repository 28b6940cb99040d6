"""Performance and cost models of the exchange plans (SEER Eq. 1-2 generalised, Eq. 4).

An exchange runs the stages its plan lists (:meth:`ExchangePlan.stages`): producers, levels 2..k,
consumers (k+1 stages; a memory level's group tasks stand in for two). With D bytes,
P workers of which C run at once (waves of C), each stage costs (see :mod:`croupier.model.stage`)

    start-up(waves) + first-touch(D/P) + compute(phase kinds) + max(D/(b_r C s), R/q_r(s_r, C s)) + max(D/(b_w C), W/q_w(s_w, C))

where R, W are the stage's reads and writes (from the plan's counts), s_r, s_w their sizes, s the
fetches a consumer keeps in flight, and the producers read the input and the consumers write the
output as whole objects of D/P. The phase kinds of each role are the stages' own: TeraSort's by
default, the consumer stage's operators for a query exchange (the binder passes them). Every term
is kept, named, so a prediction can say which dominates and why, and with the profile's
uncertainties each prediction has a 90% range. Cost (SEER Eq. 4, reads and writes priced apart):
functions (each stage's running functions for that stage's time, in GB-s, and one invocation per
task) + read and write requests + storage GB-s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from croupier.exchange.plan import ExchangePlan, LevelStage
from croupier.model.profile import StorageProfile
from croupier.model.stage import StageFacts, StagePrediction, Term, interval, predict_stage


@dataclass(frozen=True)
class Prediction:
    """Predicted time, requests and cost of running ``plan`` on D bytes."""

    plan: ExchangePlan
    data_bytes: int
    stages: tuple[StagePrediction, ...]
    requests: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0
    tier: str = "slow"  # where the exchange's objects go: "slow", "fast", "hybrid" (croupier.model.tier)
    fast_share: float = 1.0  # on the fast tier: the share of its producers whose objects fit (the rest spill to the slow tier)
    #: the sum of the stages' times, added up once (the selector sorts and compares by it)
    seconds: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", sum([s.seconds for s in self.stages]))

    @property
    def workers(self) -> int:
        return self.plan.workers

    @cached_property
    def range(self) -> tuple[float, float]:
        """The 90% range of :attr:`seconds`."""
        return interval(self.stages)

    @property
    def low(self) -> float:
        return self.range[0]

    @property
    def high(self) -> float:
        return self.range[1]

    def dominant(self) -> Term:
        """The kind of term that contributes most time over all stages."""
        totals: dict[str, float] = {}
        whys: dict[str, str] = {}
        for stage in self.stages:
            for term in stage.terms:
                totals[term.name] = totals.get(term.name, 0.0) + term.seconds
                whys.setdefault(term.name, term.why)
        name = max(totals, key=lambda k: totals[k])
        return Term(name, totals[name], whys[name])

    def explain(self) -> str:
        """Stage by stage, the terms of this prediction."""
        lines = [f"{self.plan.name}, P={self.workers}, D={self.data_bytes:,} B: {self.seconds:.3f} s ({self.low:.3f}-{self.high:.3f}), ${self.cost:.6f}"]
        for stage in self.stages:
            lines.append(f"  {stage.name:<8} {stage.seconds:8.3f} s = " + " + ".join(f"{t.name} {t.seconds:.3f}" for t in stage.terms))
        d = self.dominant()
        lines.append(f"  dominant: {d.name} ({d.seconds:.3f} s): {d.why}")
        return "\n".join(lines)


#: Phase kinds of the TeraSort plan's stages (what their tasks report), for predictions from a plan.
SORT_PHASES = {
    "map": ("read:records-gensort", "write:exchange-records"),
    "level": ("regroup",),
    "reduce": ("read:exchange-records", "records_sort", "write:output-records-gensort"),
}


def predict(
    plan: ExchangePlan,
    data_bytes: int,
    profile: StorageProfile,
    concurrency: int | None = None,
    producers_done: bool = False,
    phases: dict[str, tuple[str, ...]] | None = None,
    shared: dict[Any, StagePrediction] | None = None,
    stored: float | None = None,
) -> Prediction:
    """Predict the stages of ``plan`` on ``data_bytes``: producers (M tasks: read input, cut into
    buckets, write level 1), levels 2..k (P tasks: regroup; a memory level: P / g tasks in place of
two level stages), consumers (P tasks: read level k, run
    their operators, write). ``phases`` names the phase kinds of "map", "level" and "reduce"
    (default: TeraSort's); ``producers_done``: the producers already ran (late binding), so their
    stage is left out — no plan can change it. ``shared``: the stages predicted for other plans
    with the same ``profile`` and ``concurrency``, by their facts (the selector's candidates have
    many stages in common); new ones are added to it. ``stored``: bytes the exchange's objects
    hold per byte of data, when measured (late binding: what the producers wrote over what they
    sent); else the producers' write kind's ratio in the profile.
    """
    facts = stage_facts(plan, data_bytes, producers_done, phases, stored_ratio(profile, phases) if stored is None else stored)
    if shared is None:
        stages = tuple(predict_stage(f, profile, concurrency) for f in facts)
    else:
        stages = tuple(_shared_stage(f, profile, concurrency, shared) for f in facts)
    requests = job_requests(plan)
    prediction = Prediction(plan, data_bytes, stages, requests)
    return Prediction(plan, data_bytes, stages, requests, cost(prediction, profile, concurrency, [f.tasks for f in facts]))


def _shared_stage(facts: StageFacts, profile: StorageProfile, concurrency: int | None, shared: dict[Any, StagePrediction]) -> StagePrediction:
    """:func:`predict_stage` of ``facts``, or the prediction ``shared`` holds for equal facts."""
    key = facts.key()
    stage = shared.get(key)
    if stage is None:
        stage = shared[key] = predict_stage(facts, profile, concurrency)
    return stage


def job_requests(plan: ExchangePlan) -> dict[str, int]:
    """Requests of a sort through ``plan``: the exchange's, plus one input GET per producer and one
    output PUT per consumer."""
    return dict(_shape(plan)[2])


@lru_cache(maxsize=4096)
def _shape(plan: ExchangePlan) -> tuple[tuple[LevelStage, ...], tuple[tuple[int, int], ...], dict[str, int]]:
    """What a prediction takes from ``plan`` whatever the data: its stages, each level's (PUTs,
    GETs of either kind), and its job's requests. Remembered by the plan's value (plans are
    immutable dataclasses, equal when their fields are): the selector predicts the same candidate
    plans for every exchange of a run, and counting them took a good part of its time."""
    counts = plan.counts()
    counted = plan.predicted_requests()
    requests = {"PUT": counted["PUT"] + plan.workers, "GET": counted["GET"] + plan.producers, "GET_RANGE": counted["GET_RANGE"]}
    return tuple(plan.stages()), tuple((c.puts, c.gets + c.ranged_gets) for c in counts), requests


def exchange_write_kind(phases: dict[str, tuple[str, ...]] | None = None) -> str | None:
    """The phase kind of the producers' exchange write (TeraSort's when ``phases`` do not say)."""
    kinds = {**SORT_PHASES, **(phases or {})}
    return next((k for k in kinds.get("map", ()) if k.startswith("write:exchange")), None)


def stored_ratio(profile: StorageProfile, phases: dict[str, tuple[str, ...]] | None = None) -> float:
    """Bytes the exchange's objects hold per byte of data: its write kind's measured ratio."""
    kind = exchange_write_kind(phases)
    return profile.stored_ratio(kind) if kind is not None else 1.0


def stage_facts(
    plan: ExchangePlan,
    data_bytes: int,
    producers_done: bool = False,
    phases: dict[str, tuple[str, ...]] | None = None,
    stored: float = 1.0,
) -> list[StageFacts]:
    """What each stage of ``plan`` does on ``data_bytes`` (tasks, bytes per phase kind, reads and
    writes with their bytes, exchange fetches), in the order :func:`predict` predicts them; other
    accountings of the same stages (:mod:`croupier.plan.cloud`) start from these facts too.
    ``stored``: bytes the exchange's objects hold per byte of data (its codec's compression;
    :func:`stored_ratio`): what its writes and fetches move, while its phases process ``data_bytes``."""
    kinds = {**SORT_PHASES, **(phases or {})}
    # producers read their input only when a phase of theirs reads (an exchange in isolation does not)
    reads_input = any(k.startswith("read:") for k in kinds["map"])
    writes_output = any(k.startswith("write:output") for k in kinds["reduce"])
    p, m = plan.workers, plan.producers
    d = float(data_bytes)
    stages, counts, _ = _shape(plan)  # (PUTs, GETs) per level: the requests do not depend on the data
    facts = []
    for stage in stages:
        if stage.reads is None and producers_done:
            continue
        first, last = stage.reads is None, stage.writes is None
        written = stage.writes if stage.writes is not None else stage.reads
        assert written is not None
        name = "map" if first else ("reduce" if last else f"level-{written + 1}")
        role = "map" if first else ("reduce" if last else "level")
        fetched = 0 if first else counts[stage.reads][1]
        reads = (m if reads_input else 0) if first else fetched
        writes = counts[stage.writes][0] if not last else (p if writes_output else 0)
        write_bytes = (d * stored if not last else d) if writes else 0.0
        read_bytes = (d * stored if not first else d) if reads else 0.0
        facts.append(StageFacts(name, stage.tasks, {k: d for k in kinds[role]}, reads, read_bytes, writes, write_bytes, fetched, d * stored if fetched else 0.0))
    return facts


def stage_tasks(prediction: Prediction) -> list[int]:
    """Tasks of each predicted stage: M producers, then each level's (a memory level's group
    tasks), then P consumers (the producers' stage is absent when the prediction left it out)."""
    tasks = [stage.tasks for stage in prediction.plan.stages()]
    return tasks[len(tasks) - len(prediction.stages) :]


def cost(prediction: Prediction, profile: StorageProfile, concurrency: int | None = None, tasks: list[int] | None = None) -> float:
    """SEER Eq. 4 with reads and writes priced apart, in USD: each stage bills its running
    functions (its tasks, at most ``concurrency`` at once) for that stage's time, and one
    invocation per task; plus read and write requests and the intermediate data's storage.
    ``tasks``: :func:`stage_tasks` of the prediction, when the caller knows them already."""
    prices = profile.prices
    gb = profile.function_memory / 2**30
    c = max(1, concurrency or profile.concurrency)
    tasks = stage_tasks(prediction) if tasks is None else tasks
    gb_seconds = sum(s.function_seconds(min(t, c)) * gb for t, s in zip(tasks, prediction.stages))
    functions = prices.function_gb_second * gb_seconds + prices.invocation * sum(tasks)
    reads = prices.read_request * (prediction.requests.get("GET", 0) + prediction.requests.get("GET_RANGE", 0))
    writes = prices.write_request * prediction.requests.get("PUT", 0)
    stored_gb = prediction.data_bytes * prediction.plan.stored_levels / 1e9
    return functions + reads + writes + prices.storage_gb_second * prediction.seconds * stored_gb
