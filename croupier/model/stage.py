"""The time model of one stage, from what the stage does: SEER Eq. 1-2 per stage, compute per kind.

A stage runs ``tasks`` functions, C at a time (C = min(tasks, concurrency)), in W = ceil(tasks / C)
waves. Its time is the sum of named terms::

    start-up(waves)        t0 + t1 * W
    first-touch memory     f * bytes of one task (fresh memory its first task pulls in)
    compute                pack * sum over phase kinds k of  (c_k * bytes_k + d_k * calls_k) / C
    read                   pack * read_scale * max(bytes_read / (b_r C s),  reads / q_r(read size, C s))
    write                  pack * write_scale * max(bytes_written / (b_w C), writes / q_w(write size, C))
    imbalance              g * (compute + read + write) / W

``pack`` = W * C / tasks is the makespan of equal tasks run in waves over perfect packing (11 tasks
on 2 functions take 6 task-times, not 5.5). Real tasks are not equal (data skew, a neighbour's
load, one function's page cache), and the stage ends with the last: ``g`` is how much later, as a
fraction of one task's time (its function's work over its W waves). Functions take the next task
as they free up, so unequal tasks even out across waves and only the last ones' spread shows: a
stage of 14 waves ended 10-13 ms after its work on TPC-H, where a fraction of all its work
predicted 30 ms, while its per-wave costs (t1) were fitted at half their size to make up for it.
Only the last function runs that long, so it is billed once (:meth:`StagePrediction.function_seconds`).

``s`` is the requests a task keeps in flight: 1 for reads of stored data, up to
:data:`croupier.exchange.move.FETCH_THREADS` for exchange fetches (a task fetching 16 objects has
8 in flight), which is why exchange reads are their own term.
Phase kinds are what the tasks report for every run (``read:parquet``, ``hash_aggregate``,
``write:exchange-records-raw-recordsrange``, ``regroup``, ...; see :mod:`croupier.dag.task`);
c_k are seconds per byte on one core and d_k seconds per call (fixed costs: a Parquet footer, an
empty exchange object), calibrated per kind (:mod:`croupier.model.fit`); calls_k is the tasks
(each runs each of its phases once) unless measured, except for exchange reads, which pay d_k
per object fetched (:func:`phase_calls`). The same
function predicts a stage from a plan (the selector: bytes and requests from the plan's counts)
and from a finished stage's measured bytes and requests (the run report: predicted beside
measured), so the two can never disagree on the formula.

Every term names the coefficients it scales (``Term.sources``); with the profile's relative
standard error of each coefficient and its unexplained residual spread, a prediction has a range
(:func:`interval`): coefficient errors add up linearly across the stages of a plan (they are the
same coefficients), residual noise adds up in quadrature (stages are timed apart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from croupier.exchange.move import FETCH_THREADS
from croupier.model.profile import StorageProfile

#: z of the two-sided 90% range.
Z90 = 1.645
#: Relative error added to a storage term read off the q(s, P) curve outside what the grid measured.
EXTRAPOLATION_ERROR = 0.3


@dataclass(frozen=True)
class Term:
    """One named contribution to a stage's time; ``sources`` splits it by the coefficient that
    scales each part (for the prediction's range)."""

    name: str
    seconds: float
    why: str = ""
    sources: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class StagePrediction:
    """Predicted time of one stage, as the terms that add up to it, and its uncertainty:
    ``spread`` = seconds of one standard error per coefficient, ``noise`` = the residual's."""

    name: str
    terms: tuple[Term, ...]
    spread: Mapping[str, float] = field(default_factory=dict)
    noise: float = 0.0

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.terms)

    def dominant(self) -> Term:
        return max(self.terms, key=lambda t: t.seconds)

    def function_seconds(self, functions: int) -> float:
        """Function-seconds billed for the stage run on ``functions`` at once: all of them for its
        time, except the imbalance (its unequal tasks' spread), which only the last one pays."""
        late = sum(t.seconds for t in self.terms if t.name.endswith("imbalance"))  # a fast tier's too
        return functions * (self.seconds - late) + late

    def interval(self) -> tuple[float, float]:
        """The 90% range of this stage's time."""
        return interval([self])

    def to_dict(self) -> dict[str, Any]:
        d = self.dominant()
        low, high = self.interval()
        return {
            "seconds": round(self.seconds, 4),
            "low": round(low, 4),
            "high": round(high, 4),
            "dominant": d.name,
            "why": d.why,
            "terms": {t.name: round(t.seconds, 4) for t in self.terms},
        }


def interval(stages: Iterable[StagePrediction]) -> tuple[float, float]:
    """The 90% range of the summed time of ``stages``: coefficient errors add linearly across
    stages (shared coefficients), residual noise in quadrature; never below zero."""
    stages = list(stages)
    total = sum(s.seconds for s in stages)
    spread: dict[str, float] = {}
    for s in stages:
        for coefficient, seconds in s.spread.items():
            spread[coefficient] = spread.get(coefficient, 0.0) + seconds
    sd = math.sqrt(sum(v * v for v in spread.values()) + sum(s.noise**2 for s in stages))
    return max(0.0, total - Z90 * sd), total + Z90 * sd


@dataclass(frozen=True)
class StageFacts:
    """What a stage does, in the model's units (from a plan, or measured after a run).
    ``exchange_reads``/``exchange_read_bytes`` are the part of the reads that are exchange fetches."""

    name: str
    tasks: int
    phases: Mapping[str, float] = field(default_factory=dict)  # kind -> bytes through it
    reads: int = 0
    read_bytes: float = 0.0
    writes: int = 0
    write_bytes: float = 0.0
    exchange_reads: int = 0
    exchange_read_bytes: float = 0.0
    calls: Mapping[str, float] = field(default_factory=dict)  # kind -> calls over the tasks (default: tasks)


def io_term(kind: str, data: float, requests: int, profile: StorageProfile, c: int, streams: float = 1.0) -> Term:
    """max(bandwidth term, throughput term) for requests of one direction, ``streams`` in flight per
    function, before the profile's read/write multiplier."""
    curve, bw = (profile.read, profile.read_bandwidth) if kind == "read" else (profile.write, profile.write_bandwidth)
    size = data / requests if requests else 0.0
    flight = c * max(1.0, streams)
    bandwidth = data / (bw * (c if profile.network_per_function else flight)) if data else 0.0
    q = curve.q(size, flight)
    throughput = requests / q if requests else 0.0
    sources = ((f"{kind}_scale", max(bandwidth, throughput)),)
    if _extrapolated(curve.sizes, size, flight, profile.max_streams):
        sources += ((f"extrapolation:{kind}", max(bandwidth, throughput)),)
    if throughput >= bandwidth:
        rate = f"{q:,.0f}" if q >= 10 else f"{q:.3g}"  # never "0 req/s" for a slow store
        return Term(f"{kind} throughput", throughput, f"{requests:,.0f} {kind}s of {size / 1e6:.3g} MB at {rate} req/s with {flight:g} in flight", sources)
    per = f"per function x {c:g}" if profile.network_per_function else f"per stream x {flight:g}"
    return Term(f"{kind} bandwidth", bandwidth, f"{data / 1e6:,.0f} MB at {bw / 1e6:.0f} MB/s {per}", sources)


def _extrapolated(sizes: tuple[float, ...], size: float, flight: float, max_streams: int) -> bool:
    if not sizes or size <= 0:
        return False
    return size < sizes[0] / 2 or size > sizes[-1] * 2 or (max_streams > 0 and flight > 2 * max_streams)


def _scaled(term: Term, scale: float, pack: float) -> Term:
    factor = scale * pack
    return Term(term.name, term.seconds * factor, term.why, tuple((k, v * factor) for k, v in term.sources))


def _add(a: Term, b: Term) -> Term:
    """Two storage terms of one direction run one after the other (data reads, then fetches)."""
    if not b.seconds:
        return a
    if not a.seconds:
        return b
    sources: dict[str, float] = {}
    for k, v in a.sources + b.sources:
        sources[k] = sources.get(k, 0.0) + v
    main = a if a.seconds >= b.seconds else b
    return Term(main.name, a.seconds + b.seconds, main.why, tuple(sources.items()))


def phase_calls(facts: StageFacts, kind: str) -> float:
    """How many times a stage pays phase ``kind``'s fixed cost: an exchange read once per object it
    fetches (each is opened and decoded apart: a consumer of 12 producers pays it 12 times, which
    a cost per task under-predicted several-fold on TPC-H), every other kind once per call. (Not
    once per task: a task that found a broadcast side kept by its function decodes nothing.)"""
    if kind.startswith("read:exchange") and facts.exchange_reads > 0:
        return float(max(facts.exchange_reads, facts.calls.get(kind, facts.tasks)))
    return facts.calls.get(kind, max(1, facts.tasks))


def kind_seconds(facts: StageFacts, profile: StorageProfile) -> tuple[dict[str, float], dict[str, float]]:
    """Core-seconds of the stage's phase kinds, all tasks together: per byte (c_k * bytes_k, kinds
    that move bytes) and per call (d_k * :func:`phase_calls`). The compute term divides their sum
    over the functions; the simulator (:mod:`croupier.sim.engine`) over the tasks, as one task's."""
    per_byte = {k: profile.compute_cost(k) * b for k, b in facts.phases.items() if b}
    per_call = {k: profile.call_cost(k) * phase_calls(facts, k) for k in facts.phases}
    return per_byte, per_call


def first_touch_seconds(facts: StageFacts, profile: StorageProfile) -> float:
    """Seconds a function's first task spends pulling in fresh memory: f * the bytes of one task
    through the stage's largest phase (paid once per function, not per wave)."""
    return max(facts.phases.values(), default=0.0) / max(1, facts.tasks) * profile.first_touch_seconds_per_byte


def predict_stage(facts: StageFacts, profile: StorageProfile, concurrency: int | None = None, slots: int | None = None) -> StagePrediction:
    """The stage's predicted time, term by term, with its uncertainty (see the module docstring).
    ``slots``: at most this many of its tasks can run at once whatever the concurrency (a hybrid
    exchange's producers run a round of m at a time)."""
    tasks = max(1, facts.tasks)
    c = max(1, min(tasks, concurrency or profile.concurrency, slots or tasks))
    waves = math.ceil(tasks / c)
    pack = waves * c / tasks
    t0, t1 = profile.startup_seconds, profile.wave_seconds * waves
    startup = Term("start-up", t0 + t1, f"{waves} wave(s) of {c} functions", (("t0", t0), ("t1", t1)))
    per_byte, per_call = kind_seconds(facts, profile)
    per_kind = {k: per_byte.get(k, 0.0) + per_call[k] for k in facts.phases}
    heaviest = max(per_kind, key=lambda k: per_kind[k]) if per_kind else "nothing"
    compute = Term(
        "compute",
        pack * sum(per_kind.values()) / c,
        f"{sum(facts.phases.values()) / 1e6:,.0f} MB through {len(per_kind)} phase kind(s) on {c} cores, most in {heaviest}",
        tuple((f"compute:{k}", pack * v / c) for k, v in per_byte.items()) + tuple((f"call:{k}", pack * v / c) for k, v in per_call.items() if v),
    )
    largest = max(facts.phases.values(), default=0.0)
    f = first_touch_seconds(facts, profile)
    touch = Term("first-touch memory", f, f"{largest / tasks / 1e6:,.1f} MB of fresh memory per function", (("first_touch", f),))
    fetched = facts.exchange_reads
    data_reads = io_term("read", facts.read_bytes - facts.exchange_read_bytes, facts.reads - fetched, profile, c)
    streams = min(FETCH_THREADS, fetched / tasks) if fetched else 1.0
    fetches = io_term("read", facts.exchange_read_bytes, fetched, profile, c, streams)
    read = _scaled(_add(data_reads, fetches), profile.read_scale, pack)
    write = _scaled(io_term("write", facts.write_bytes, facts.writes, profile, c), profile.write_scale, pack)
    late = profile.imbalance * (compute.seconds + read.seconds + write.seconds) / waves
    imbalance = Term("imbalance", late, f"unequal tasks: the last ends {100 * profile.imbalance:.0f}% of a task's work later", (("imbalance", late),))
    terms = (startup, touch, compute, read, write, imbalance)
    spread: dict[str, float] = {}
    for term in terms:
        for coefficient, seconds in term.sources:
            spread[coefficient] = spread.get(coefficient, 0.0) + seconds * _error(profile, coefficient)
    total = sum(t.seconds for t in terms)
    return StagePrediction(facts.name, terms, spread, profile.residual * total)


def _error(profile: StorageProfile, coefficient: str) -> float:
    if coefficient.startswith("extrapolation:"):
        return EXTRAPOLATION_ERROR
    return profile.relative_error(coefficient)


def facts_from_report(stage: Any) -> StageFacts:
    """The facts of a finished stage (a :class:`croupier.report.StageReport`)."""
    io, exchange = stage.io, stage.exchange
    reads = io.requests("GET") + io.requests("GET_RANGE")
    return StageFacts(
        stage.name,
        stage.tasks,
        {kind: values[0] for kind, values in stage.phases.items()},
        reads,
        float(io.bytes_read),
        io.requests("PUT"),
        float(io.bytes_written),
        exchange.requests("GET") + exchange.requests("GET_RANGE"),
        float(exchange.bytes_read),
        {kind: values[3] for kind, values in stage.phases.items()},
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
