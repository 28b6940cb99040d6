"""Performance and cost models of the exchange plans (SEER Eq. 1-2 generalised, Eq. 4).

A sort with a k-level plan runs k+1 stages (map, levels 2..k, reduce). With D bytes, P workers of
which C run at once (waves of C), each stage costs

    start-up(P) + first-touch(D/P) + compute + max(D/(b_r C), R/q_r(s_r, C)) + max(D/(b_w C), W/q_w(s_w, C))

where R, W are the stage's reads and writes (from the plan's counts), s_r, s_w their sizes, and the
map reads the input and the reduce writes the output as whole objects of D/P. Every term is kept,
named, so a prediction can say which dominates and why. Cost (SEER Eq. 4, reads and writes priced
apart): functions (GB-s and invocations) + read and write requests + storage GB-s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from croupier.exchange.plan import ExchangePlan
from croupier.model.profile import StorageProfile


@dataclass(frozen=True)
class Term:
    """One named contribution to a stage's time."""

    name: str
    seconds: float
    why: str = ""


@dataclass(frozen=True)
class StagePrediction:
    """Predicted time of one stage, as the terms that add up to it."""

    name: str
    terms: tuple[Term, ...]

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.terms)


@dataclass(frozen=True)
class Prediction:
    """Predicted time, requests and cost of running ``plan`` on D bytes."""

    plan: ExchangePlan
    data_bytes: int
    stages: tuple[StagePrediction, ...]
    requests: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0

    @property
    def workers(self) -> int:
        return self.plan.workers

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stages)

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
        lines = [f"{self.plan.name}, P={self.workers}, D={self.data_bytes:,} B: {self.seconds:.3f} s, ${self.cost:.6f}"]
        for stage in self.stages:
            lines.append(f"  {stage.name:<8} {stage.seconds:8.3f} s = " + " + ".join(f"{t.name} {t.seconds:.3f}" for t in stage.terms))
        d = self.dominant()
        lines.append(f"  dominant: {d.name} ({d.seconds:.3f} s): {d.why}")
        return "\n".join(lines)


def _io(kind: str, data: float, requests: int, size: float, profile: StorageProfile, c: int) -> Term:
    """max(bandwidth term, throughput term) for one direction of one stage."""
    curve, bw = (profile.read, profile.read_bandwidth) if kind == "read" else (profile.write, profile.write_bandwidth)
    bandwidth = data / (bw * c) if data else 0.0
    q = curve.q(size, c)
    throughput = requests / q if requests else 0.0
    bandwidth, throughput = bandwidth * profile.io_scale, throughput * profile.io_scale
    if throughput >= bandwidth:
        return Term(f"{kind} throughput", throughput, f"{requests:,} {kind}s of {size / 1e6:.3g} MB at {q:,.0f} req/s with {c} at once")
    return Term(f"{kind} bandwidth", bandwidth, f"{data / 1e6:,.0f} MB at {bw / 1e6:.0f} MB/s per worker x {c}")


def predict(plan: ExchangePlan, data_bytes: int, profile: StorageProfile, concurrency: int | None = None, producers_done: bool = False) -> Prediction:
    """Predict the stages of ``plan`` on ``data_bytes``: producers (M tasks: read input, partition,
    write level 1), levels 2..k (P tasks: regroup), consumers (P tasks: read, sort, write output).

    ``producers_done``: the producers have already written level 1 (late binding); their stage is
    left out, since no plan can change it.
    """
    p, m = plan.workers, plan.producers
    limit = concurrency or profile.concurrency
    d = float(data_bytes)
    counts = plan.counts(data_bytes)
    stages = []
    for i in range(plan.levels + 1):
        tasks = m if i == 0 else p
        c = max(1, min(tasks, limit))
        waves = math.ceil(tasks / c)
        startup = Term("start-up", profile.startup_seconds + profile.wave_seconds * waves, f"{waves} wave(s) of {c} functions")
        # A function's first task touches fresh memory (page faults); later tasks reuse it: ~ D/tasks.
        touch = Term("first-touch memory", d / tasks * profile.first_touch_seconds_per_byte, f"{d / tasks / 1e6:,.0f} MB of fresh memory per function")
        if i == 0:
            read = _io("read", d, m, d / m, profile, c)
            compute = Term("compute", d * profile.partition_seconds_per_byte * profile.compute_scale / c, "partitioning records by key")
        else:
            prev = counts[i - 1]
            read = _io("read", d, prev.gets + prev.ranged_gets, prev.read_bytes, profile, c)
            per_byte = profile.sort_seconds_per_byte if i == plan.levels else profile.regroup_seconds_per_byte
            compute = Term("compute", d * per_byte * profile.compute_scale / c, "sorting" if i == plan.levels else "regrouping segments")
        if i < plan.levels:
            write = _io("write", d, counts[i].puts, counts[i].object_bytes, profile, c)
        else:
            write = _io("write", d, p, d / p, profile, c)
        name = "map" if i == 0 else ("reduce" if i == plan.levels else f"level-{i + 1}")
        if i == 0 and producers_done:
            continue
        stages.append(StagePrediction(name, (startup, touch, compute, read, write)))
    requests = plan.predicted_requests()
    requests = {"PUT": requests["PUT"] + p, "GET": requests["GET"] + m, "GET_RANGE": requests["GET_RANGE"]}
    prediction = Prediction(plan, data_bytes, tuple(stages), requests)
    return Prediction(plan, data_bytes, tuple(stages), requests, cost(prediction, profile))


def cost(prediction: Prediction, profile: StorageProfile) -> float:
    """SEER Eq. 4 with reads and writes priced apart, in USD."""
    prices = profile.prices
    p, seconds = prediction.workers, prediction.seconds
    gb = profile.function_memory / 2**30
    functions = (prices.function_gb_second * seconds * gb + prices.invocation) * p * len(prediction.stages)
    reads = prices.read_request * (prediction.requests.get("GET", 0) + prediction.requests.get("GET_RANGE", 0))
    writes = prices.write_request * prediction.requests.get("PUT", 0)
    stored_gb = prediction.data_bytes * prediction.plan.levels / 1e9
    return functions + reads + writes + prices.storage_gb_second * seconds * stored_gb
