"""The time model of one stage, from what the stage does: SEER Eq. 1-2 per stage, compute per kind.

A stage runs ``tasks`` functions, C at a time (C = min(tasks, concurrency)), in ceil(tasks / C)
waves. Its time is the sum of named terms::

    start-up(waves)                  t0 + t1 * waves
    compute                          sum over phase kinds k of  c_k * bytes_k / C
    first-touch memory               f * bytes of one task (fresh memory its first task pulls in)
    read                             max(bytes_read / (b_r C),  reads / q_r(read size, C))
    write                            max(bytes_written / (b_w C), writes / q_w(write size, C))

Phase kinds are what the tasks report for every run (``read:parquet``, ``hash_aggregate``,
``write:exchange-records-raw-recordsrange``, ``regroup``, ...; see :mod:`croupier.dag.task`);
c_k are seconds per byte on one core, calibrated per kind (:mod:`croupier.model.profile`). The
same function predicts a stage from a plan (the selector: bytes and requests from the plan's
counts) and from a finished stage's measured bytes and requests (the run report: predicted
beside measured), so the two can never disagree on the formula.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

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

    def dominant(self) -> Term:
        return max(self.terms, key=lambda t: t.seconds)

    def to_dict(self) -> dict[str, Any]:
        d = self.dominant()
        return {"seconds": round(self.seconds, 4), "dominant": d.name, "why": d.why, "terms": {t.name: round(t.seconds, 4) for t in self.terms}}


@dataclass(frozen=True)
class StageFacts:
    """What a stage does, in the model's units (from a plan, or measured after a run)."""

    name: str
    tasks: int
    phases: Mapping[str, float] = field(default_factory=dict)  # kind -> bytes through it
    reads: int = 0
    read_bytes: float = 0.0
    writes: int = 0
    write_bytes: float = 0.0


def io_term(kind: str, data: float, requests: int, profile: StorageProfile, c: int) -> Term:
    """max(bandwidth term, throughput term) for one direction of one stage."""
    curve, bw = (profile.read, profile.read_bandwidth) if kind == "read" else (profile.write, profile.write_bandwidth)
    size = data / requests if requests else 0.0
    bandwidth = data / (bw * c) if data else 0.0
    q = curve.q(size, c)
    throughput = requests / q if requests else 0.0
    bandwidth, throughput = bandwidth * profile.io_scale, throughput * profile.io_scale
    if throughput >= bandwidth:
        return Term(f"{kind} throughput", throughput, f"{requests:,} {kind}s of {size / 1e6:.3g} MB at {q:,.0f} req/s with {c} at once")
    return Term(f"{kind} bandwidth", bandwidth, f"{data / 1e6:,.0f} MB at {bw / 1e6:.0f} MB/s per worker x {c}")


def predict_stage(facts: StageFacts, profile: StorageProfile, concurrency: int | None = None) -> StagePrediction:
    """The stage's predicted time, term by term (see the module docstring)."""
    tasks = max(1, facts.tasks)
    c = max(1, min(tasks, concurrency or profile.concurrency))
    waves = math.ceil(tasks / c)
    startup = Term("start-up", profile.startup_seconds + profile.wave_seconds * waves, f"{waves} wave(s) of {c} functions")
    per_kind = {k: profile.compute_cost(k) * b for k, b in facts.phases.items() if b}
    cpu = sum(per_kind.values()) * profile.compute_scale / c
    heaviest = max(per_kind, key=lambda k: per_kind[k]) if per_kind else "nothing"
    compute = Term("compute", cpu, f"{sum(facts.phases.values()) / 1e6:,.0f} MB through {len(per_kind)} phase kind(s) on {c} cores, most in {heaviest}")
    largest = max(facts.phases.values(), default=0.0)
    touch = Term("first-touch memory", largest / tasks * profile.first_touch_seconds_per_byte, f"{largest / tasks / 1e6:,.1f} MB of fresh memory per function")
    read = io_term("read", facts.read_bytes, facts.reads, profile, c)
    write = io_term("write", facts.write_bytes, facts.writes, profile, c)
    return StagePrediction(facts.name, (startup, touch, compute, read, write))


def facts_from_report(stage: Any) -> StageFacts:
    """The facts of a finished stage (a :class:`croupier.report.StageReport`)."""
    io = stage.io
    reads = io.requests("GET") + io.requests("GET_RANGE")
    return StageFacts(
        stage.name,
        stage.tasks,
        {kind: values[0] for kind, values in stage.phases.items()},
        reads,
        float(io.bytes_read),
        io.requests("PUT"),
        float(io.bytes_written),
    )


def stage_cost(facts: StageFacts, function_seconds: float, profile: StorageProfile) -> float:
    """USD of a stage (SEER Eq. 4, reads and writes priced apart): function GB-seconds and
    invocations, plus read and write requests, at the profile's prices."""
    prices = profile.prices
    gb = profile.function_memory / 2**30
    return (
        prices.function_gb_second * function_seconds * gb
        + prices.invocation * facts.tasks
        + prices.read_request * facts.reads
        + prices.write_request * facts.writes
    )
