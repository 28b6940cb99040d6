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
from functools import partial
from typing import Any, Callable, Iterable, Mapping

from croupier.exchange.move import FETCH_THREADS
from croupier.model.profile import StorageProfile, call_weight

#: z of the two-sided 90% range.
Z90 = 1.645
#: Relative error added to a storage term read off the q(s, P) curve outside what the grid measured.
EXTRAPOLATION_ERROR = 0.3


class _Why:
    """The ``why`` field of :class:`Term`: its text, given as a string or as a callable that
    returns it (formatted on first read, then kept). A selector predicts every term of dozens of
    candidates per exchange and reads the text of one dominant term: formatting all of them took
    a good part of its time. Reading the field always gives the string, so equality, ``repr``,
    :func:`dataclasses.replace` and :func:`dataclasses.asdict` see the text."""

    def __get__(self, term: Term | None, owner: type | None = None) -> str:
        if term is None:
            return ""  # the field's default, as a dataclass asks the class
        why = term.__dict__["_why"]
        if not isinstance(why, str):
            why = term.__dict__["_why"] = why()
        return why

    def __set__(self, term: Term, why: str | Callable[[], str]) -> None:
        term.__dict__["_why"] = why  # only through object.__setattr__: the frozen dataclass refuses sets


@dataclass(frozen=True)
class Term:
    """One named contribution to a stage's time; ``sources`` splits it by the coefficient that
    scales each part (for the prediction's range). ``why`` may be given as a callable returning
    the text (a :func:`functools.partial` of a module-level function, so a term still pickles):
    it is formatted only when read."""

    name: str
    seconds: float
    why: str = _Why()  # type: ignore[assignment]
    sources: tuple[tuple[str, float], ...] = ()

    def __init__(self, name: str, seconds: float, why: str | Callable[[], str] = "", sources: tuple[tuple[str, float], ...] = ()) -> None:
        # the fields set straight (the dataclass's own __init__ sets each through
        # object.__setattr__, twice as slow: a selection makes thousands of terms)
        d = self.__dict__
        d["name"], d["seconds"], d["_why"], d["sources"] = name, seconds, why, sources


@dataclass(frozen=True)
class StagePrediction:
    """Predicted time of one stage, as the terms that add up to it, and its uncertainty:
    ``spread`` = seconds of one standard error per coefficient, ``noise`` = the residual's."""

    name: str
    terms: tuple[Term, ...]
    spread: Mapping[str, float] = field(default_factory=dict)
    noise: float = 0.0
    #: the sum of the terms, added up once (a selector reads it many times per candidate)
    seconds: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", sum([t.seconds for t in self.terms]))

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

    def key(self) -> tuple[Any, ...]:
        """Every field, hashable: equal facts have equal keys (a selector predicts the stages its
        candidates share once, by this key). A new field goes here too."""
        return (self.name, self.tasks, tuple(self.phases.items()), self.reads, self.read_bytes, self.writes, self.write_bytes,
                self.exchange_reads, self.exchange_read_bytes, tuple(self.calls.items()))  # fmt: skip


def io_term(kind: str, data: float, requests: int, profile: StorageProfile, c: int, streams: float = 1.0) -> Term:
    """max(bandwidth term, throughput term) for requests of one direction, ``streams`` in flight per
    function, before the profile's read/write multiplier."""
    return Term(*_io(kind, data, requests, profile, c, streams))


#: A term not made yet: (name, seconds, why, sources), as :class:`Term` takes them. The storage
#: terms of a stage are combined (:func:`_add`) and scaled (:func:`_scaled`) before they are terms.
_Raw = tuple[str, float, "str | Callable[[], str]", tuple[tuple[str, float], ...]]


def _io(kind: str, data: float, requests: int, profile: StorageProfile, c: int, streams: float = 1.0) -> _Raw:
    """:func:`io_term`, not yet a term."""
    curve, bw = (profile.read, profile.read_bandwidth) if kind == "read" else (profile.write, profile.write_bandwidth)
    size = data / requests if requests else 0.0
    flight = c * max(1.0, streams)
    bandwidth = data / (bw * (c if profile.network_per_function else flight)) if data else 0.0
    q = curve.q(size, flight)
    throughput = requests / q if requests else 0.0
    sources: tuple[tuple[str, float], ...] = ((f"{kind}_scale", max(bandwidth, throughput)),)
    if _extrapolated(curve.sizes, size, flight, profile.max_streams):
        sources += ((f"extrapolation:{kind}", max(bandwidth, throughput)),)
    if throughput >= bandwidth:
        return f"{kind} throughput", throughput, partial(_throughput_why, kind, requests, size, q, flight), sources
    return f"{kind} bandwidth", bandwidth, partial(_bandwidth_why, data, bw, c, flight, profile.network_per_function), sources


def _throughput_why(kind: str, requests: int, size: float, q: float, flight: float) -> str:
    rate = f"{q:,.0f}" if q >= 10 else f"{q:.3g}"  # never "0 req/s" for a slow store
    return f"{requests:,.0f} {kind}s of {size / 1e6:.3g} MB at {rate} req/s with {flight:g} in flight"


def _bandwidth_why(data: float, bw: float, c: int, flight: float, network_per_function: bool) -> str:
    per = f"per function x {c:g}" if network_per_function else f"per stream x {flight:g}"
    return f"{data / 1e6:,.0f} MB at {bw / 1e6:.0f} MB/s {per}"


def _extrapolated(sizes: tuple[float, ...], size: float, flight: float, max_streams: int) -> bool:
    if not sizes or size <= 0:
        return False
    return size < sizes[0] / 2 or size > sizes[-1] * 2 or (max_streams > 0 and flight > 2 * max_streams)


def _scaled(term: _Raw, scale: float, pack: float) -> Term:
    name, seconds, why, sources = term
    factor = scale * pack
    return Term(name, seconds * factor, why, tuple([(k, v * factor) for k, v in sources]))


def _add(a: _Raw, b: _Raw) -> _Raw:
    """Two storage terms of one direction run one after the other (data reads, then fetches)."""
    if not b[1]:
        return a
    if not a[1]:
        return b
    sources: dict[str, float] = {}
    for k, v in a[3] + b[3]:
        sources[k] = sources.get(k, 0.0) + v
    main = a if a[1] >= b[1] else b
    return main[0], a[1] + b[1], main[2], tuple(sources.items())


def phase_calls(facts: StageFacts, kind: str) -> float:
    """How many times a stage pays phase ``kind``'s fixed cost: an exchange read once per object it
    fetches (each is opened and decoded apart: a consumer of 12 producers pays it 12 times, which
    a cost per task under-predicted several-fold on TPC-H), every other kind once per call. (Not
    once per task: a task that found a broadcast side kept by its function decodes nothing.) An
    operator's call counts for more the more expressions it runs (:func:`call_weight`)."""
    if kind.startswith("read:exchange") and facts.exchange_reads > 0:
        return float(max(facts.exchange_reads, facts.calls.get(kind, facts.tasks)))
    return facts.calls.get(kind, max(1, facts.tasks)) * call_weight(kind)


def kind_seconds(facts: StageFacts, profile: StorageProfile) -> tuple[dict[str, float], dict[str, float]]:
    """Core-seconds of the stage's phase kinds, all tasks together: per byte (c_k * bytes_k, kinds
    that move bytes) and per call (d_k * :func:`phase_calls`). The compute term divides their sum
    over the functions; the simulator (:mod:`croupier.sim.engine`) over the tasks, as one task's."""
    per_byte = {k: profile.compute_cost(k) * b for k, b in facts.phases.items() if b}
    per_call = {k: profile.call_cost(k) * phase_calls(facts, k) for k in facts.phases}
    return per_byte, per_call


def first_touch_seconds(facts: StageFacts, profile: StorageProfile) -> float:
    """Seconds a function's first task spends pulling in fresh memory: f * the bytes of one task
    through the stage's largest phase (paid once per function, not per wave). (Nothing to work out for a warm
    profile's 0: the selector predicts tens of thousands of stages planning a query at cloud scale.)"""
    if not profile.first_touch_seconds_per_byte:
        return 0.0
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
    # the texts (why) are formatted only when read: see _Why
    startup = Term("start-up", t0 + t1, partial(_startup_why, waves, c), (("t0", t0), ("t1", t1)))
    per_byte, per_call = kind_seconds(facts, profile)
    per_kind = {k: per_byte.get(k, 0.0) + per_call[k] for k in facts.phases}
    compute = Term(
        "compute",
        pack * sum(per_kind.values()) / c,
        partial(_compute_why, facts.phases, per_kind, c),
        tuple([(f"compute:{k}", pack * v / c) for k, v in per_byte.items()] + [(f"call:{k}", pack * v / c) for k, v in per_call.items() if v]),
    )
    f = first_touch_seconds(facts, profile)
    touch = Term("first-touch memory", f, partial(_touch_why, facts.phases, tasks), (("first_touch", f),))
    fetched = facts.exchange_reads
    data_reads = _io("read", facts.read_bytes - facts.exchange_read_bytes, facts.reads - fetched, profile, c)
    streams = min(FETCH_THREADS, fetched / tasks) if fetched else 1.0
    fetches = _io("read", facts.exchange_read_bytes, fetched, profile, c, streams)
    read = _scaled(_add(data_reads, fetches), profile.read_scale, pack)
    write = _scaled(_io("write", facts.write_bytes, facts.writes, profile, c), profile.write_scale, pack)
    late = profile.imbalance * (compute.seconds + read.seconds + write.seconds) / waves
    imbalance = Term("imbalance", late, partial(_imbalance_why, profile.imbalance), (("imbalance", late),))
    terms = (startup, touch, compute, read, write, imbalance)
    spread: dict[str, float] = {}
    errors = profile.memo("errors")  # coefficient -> its relative error (_error)
    for term in terms:
        for coefficient, seconds in term.sources:
            error = errors.get(coefficient)
            if error is None:
                error = errors[coefficient] = _error(profile, coefficient)
            spread[coefficient] = spread.get(coefficient, 0.0) + seconds * error
    total = sum([t.seconds for t in terms])
    return StagePrediction(facts.name, terms, spread, profile.residual * total)


def _startup_why(waves: int, c: int) -> str:
    return f"{waves} wave(s) of {c} functions"


def _compute_why(phases: Mapping[str, float], per_kind: dict[str, float], c: int) -> str:
    heaviest = max(per_kind, key=lambda k: per_kind[k]) if per_kind else "nothing"
    return f"{sum(phases.values()) / 1e6:,.0f} MB through {len(per_kind)} phase kind(s) on {c} cores, most in {heaviest}"


def _touch_why(phases: Mapping[str, float], tasks: int) -> str:
    largest = max(phases.values(), default=0.0)
    return f"{largest / tasks / 1e6:,.1f} MB of fresh memory per function"


def _imbalance_why(imbalance: float) -> str:
    return f"unequal tasks: the last ends {100 * imbalance:.0f}% of a task's work later"


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
