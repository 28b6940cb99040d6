"""Fitting a profile's coefficients from measured stages, robustly, each with its uncertainty.

The data are :class:`Observation` s: finished stages (of the calibration workload or of any run),
each with its facts, the concurrency it ran with, its wall time and, per phase kind, the bytes,
wall seconds and request seconds its tasks spent there. The stage model
(:mod:`croupier.model.stage`) has three groups of coefficients, fitted in three steps so that every
one is told apart by what measures it directly (issue 15: identifiable terms)::

    1. compute per phase kind:       phase wall - request time  =  c_k * bytes + d_k * calls  (per kind)
    2. read and write multipliers:   request time of the phases =  scale * C * grid term  (per direction)
    3. start-up, waves, imbalance:   stage wall - pack * busy / C  =  t0 + t1 * waves + g * pack * busy / (C * waves)
                                     (busy: the measured phase time of all tasks)

Step 1 and 2 read time *inside* the tasks, so no stage-level overhead leaks into them; step 3
explains what the phases leave of each stage's wall time by three terms, which differ in how
they grow (not at all; with waves; with one task's work, as the spread of unequal tasks does). What
the phases leave is measured (their wall time, not steps 1-2's fit of it): a fitted phase time
a few per cent off on a one-second stage is tens of milliseconds, which a fit of the leftovers
read as negative overhead and pulled t0 and t1 to zero, so that small stages, whose time is
mostly that overhead (a task's round trip to its function, ~1 ms here), were predicted 30-60%
short on TPC-H.

The first-touch term (fresh memory a function's *first* task pulls in) is not fitted: the fit
is of warm functions, which never pay it. The calibration drops its warm-up pass, and a run's
stages are learned from only when they ran warm (:func:`warm_only`): every phase says how much
fresh memory its process faulted in (:class:`croupier.dag.task.Phases`), and a stage with a phase
that touched about as much as its data (:func:`croupier.report.cold_phase`) ran in functions
still faulting their memory in. A session's first query in fresh workers took twice as long in
its first stage as the same query warm, and learning from it priced TPC-H Q1's aggregation 27%
above what every later run took. (The calibration keeps its stages that grew their memory: its
larger pass does, and leaving them out lost more, where it has few stages per kind, than it
mended: SeaweedFS's stages were predicted 3 points worse.) Fitting the first-touch cost from the
bytes of one task found noise instead: five calibrations on one machine gave 0 to 2.3 ns/B, and
predictions with it were up to 50% too slow for warm runs at small P
(``bench/sim_validation.py``). A profile's first-touch cost is its base's: 0 from the request
grid, or what a platform's published cold starts state.

Every estimate is robust (Huber weights on the residuals, so a run disturbed by a noisy neighbour
counts little) and carries a bootstrap standard error (resampling stages). A coefficient the data
cannot tell (no variation in its regressor, or no bytes of a kind) keeps the base profile's value
and its uncertainty, and the fit report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from croupier.model.profile import OWN_PRICE_ONLY, SIGNATURE, Curve, StorageProfile, base_kind, call_weight
from croupier.model.stage import StageFacts, phase_calls, predict_stage
from croupier.report import ran_cold

#: Huber constant (in robust standard deviations) beyond which a residual's weight falls off.
HUBER_K = 1.5
BOOTSTRAP = 100
#: Phase kinds whose requests are reads, writes, or both (an exchange level passes data on).
READ_PREFIX, WRITE_PREFIX, BOTH = "read:", "write:", ("regroup",)
#: Fallback keys fitted from all kinds of a family, for kinds a later run has that the fit never saw.
FAMILIES = ("read:", "write:", "")
#: Narrower fallbacks, over every kind they prefix (their families keep those kinds too): a
#: Parquet read of a codec never measured is priced as all Parquet reads measured.
SUBFAMILIES = ("read:parquet",)


def cold(observation: Observation) -> bool:
    """Whether any phase of a stage ran cold (:func:`croupier.report.cold_phase`)."""
    return ran_cold(observation.phases)


def warm_only(observations: Sequence[Observation]) -> list[Observation]:
    """A run's stages to learn from: those that ran in warm functions, unless none did (a
    platform that starts a fresh process for every call: its cold stages are all there is)."""
    return [o for o in observations if not cold(o)] or list(observations)


@dataclass(frozen=True)
class Observation:
    """One finished stage, as the fit sees it.

    ``phases``: per kind, [bytes, wall seconds, request seconds, calls, fresh memory bytes] summed
    over the tasks (the last missing from reports older than it).
    """

    facts: StageFacts
    concurrency: int
    wall: float
    phases: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        f = self.facts
        return {
            "name": f.name, "tasks": f.tasks, "reads": f.reads, "read_bytes": f.read_bytes, "writes": f.writes,
            "write_bytes": f.write_bytes, "exchange_reads": f.exchange_reads, "exchange_read_bytes": f.exchange_read_bytes,
            "concurrency": self.concurrency, "wall": self.wall, "source": self.source,
            "phases": {k: [round(float(x), 6) for x in v] for k, v in self.phases.items()},
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Observation:
        phases = {k: tuple(float(x) for x in v) for k, v in d["phases"].items()}
        facts = StageFacts(
            d["name"], int(d["tasks"]), {k: v[0] for k, v in phases.items()}, int(d["reads"]), float(d["read_bytes"]),
            int(d["writes"]), float(d["write_bytes"]), int(d.get("exchange_reads", 0)), float(d.get("exchange_read_bytes", 0.0)),
            {k: v[3] for k, v in phases.items()},
        )  # fmt: skip
        return cls(facts, int(d["concurrency"]), float(d["wall"]), phases, str(d.get("source", "")))


def observation_from_report(stage: Any, concurrency: int, source: str = "") -> Observation | None:
    """The observation of a finished stage (a :class:`croupier.report.StageReport` or its JSON
    dict); None for stages the model does not describe (no tasks, no phases: the driver)."""
    from croupier.model.stage import facts_from_report

    if isinstance(stage, Mapping):
        return _observation_from_json(stage, concurrency, source)
    if not stage.tasks or not stage.phases:
        return None
    phases = {k: tuple(float(x) for x in v) for k, v in stage.phases.items()}
    return Observation(facts_from_report(stage), concurrency, float(stage.wall_seconds), phases, source)


def _observation_from_json(stage: Mapping[str, Any], concurrency: int, source: str) -> Observation | None:
    if not stage.get("tasks") or not stage.get("phases"):
        return None
    io, exchange = stage.get("io", {}), stage.get("exchange_io", {})

    def count(stats: Mapping[str, Any], kinds: Sequence[str], what: str) -> float:
        return float(sum(stats.get(k, {}).get(what, 0) for k in kinds))

    phases = {k: tuple(float(x) for x in v) for k, v in stage["phases"].items()}
    facts = StageFacts(
        stage["name"], int(stage["tasks"]), {k: v[0] for k, v in phases.items()},
        int(count(io, ("GET", "GET_RANGE"), "requests")), count(io, ("GET", "GET_RANGE"), "bytes"),
        int(count(io, ("PUT",), "requests")), count(io, ("PUT",), "bytes"),
        int(count(exchange, ("GET", "GET_RANGE"), "requests")), count(exchange, ("GET", "GET_RANGE"), "bytes"),
        {k: v[3] for k, v in phases.items()},
    )  # fmt: skip
    return Observation(facts, concurrency, float(stage["wall_seconds"]), phases, source)


def observations_from_report(report: Any, concurrency: int, source: str = "") -> list[Observation]:
    """The observations of a run report (a :class:`croupier.report.RunReport` or its JSON dict):
    one per stage, except that stages that ran in one executor call (``shared``) are one
    observation together — their tasks shared the functions, and their wall time is the call's."""
    stages = report["stages"] if isinstance(report, Mapping) else report.stages
    out: list[Observation] = []
    groups: dict[tuple[str, ...], list[Observation]] = {}
    for stage in stages:
        obs = observation_from_report(stage, concurrency, source)
        if obs is None:
            continue
        shared = tuple(stage.get("shared", ()) if isinstance(stage, Mapping) else getattr(stage, "shared", ()))
        if len(shared) > 1:
            groups.setdefault(shared, []).append(obs)
        else:
            out.append(obs)
    out += [merge(group) for group in groups.values()]
    return out


def merge(group: Sequence[Observation]) -> Observation:
    """Stages run as one executor call, as one observation: facts and phases added up."""
    if len(group) == 1:
        return group[0]
    phases: dict[str, list[float]] = {}
    for o in group:
        for k, v in o.phases.items():
            total = phases.setdefault(k, [])
            total += [0.0] * (len(v) - len(total))
            for i, x in enumerate(v):
                total[i] += x
    fs = [o.facts for o in group]
    facts = StageFacts(
        "+".join(f.name for f in fs), sum(f.tasks for f in fs), {k: v[0] for k, v in phases.items()},
        sum(f.reads for f in fs), sum(f.read_bytes for f in fs), sum(f.writes for f in fs), sum(f.write_bytes for f in fs),
        sum(f.exchange_reads for f in fs), sum(f.exchange_read_bytes for f in fs), {k: v[3] for k, v in phases.items()},
    )  # fmt: skip
    return Observation(facts, group[0].concurrency, max(o.wall for o in group), {k: tuple(v) for k, v in phases.items()}, group[0].source)


def fit_curve(points: Mapping[tuple[int, int], float], sizes: Sequence[int]) -> tuple[Curve, float]:
    """Fit q(s, P) = min(a P, qmax) per size from aggregate requests/s measured at (size, P):
    a = the rate at the smallest P measured, per request in flight; qmax = the best aggregate
    rate seen. Return the curve and its mean absolute % error over the points."""
    per_worker, ceiling, errors = [], [], []
    for size in sizes:
        at = {p: q for (s, p), q in points.items() if s == size}
        a = at[min(at)] / min(at)
        qmax = max(at.values())
        per_worker.append(a)
        ceiling.append(max(qmax, a))
        errors += [abs(min(a * p, qmax) - q) / q for p, q in at.items()]
    return Curve(tuple(float(s) for s in sizes), tuple(per_worker), tuple(ceiling)), 100 * float(np.mean(errors))


# --- robust estimators --------------------------------------------------------------------------


#: Relative change of an estimate between two reweighting rounds below which the rounds stop.
CONVERGED = 1e-9


def median(values: np.ndarray) -> float:
    """The median of a small 1-d array: np.median's own overhead (~50 us a call) was a third of
    a calibration's bootstrap, which calls it tens of thousands of times on a few values."""
    ordered = np.sort(values)
    n = len(ordered)
    return float(ordered[(n - 1) // 2] + ordered[n // 2]) / 2


def huber_weights(residuals: np.ndarray) -> np.ndarray:
    """Weights in (0, 1]: 1 within HUBER_K robust standard deviations, falling as 1/|r| beyond."""
    scale = 1.4826 * median(np.abs(residuals - median(residuals))) if len(residuals) else 0.0
    if scale <= 0:
        return np.ones_like(residuals)
    z = np.abs(residuals) / (HUBER_K * scale)
    return np.where(z <= 1, 1.0, 1.0 / np.maximum(z, 1e-12))


def robust_ratio(x: np.ndarray, y: np.ndarray) -> float:
    """c in y = c x (through the origin), weighted by x (big observations count more), with Huber
    weights on each observation's deviation per unit of x. NaN when x has nothing."""
    keep = x > 0
    x, y = x[keep], y[keep]
    if not len(x) or x.sum() <= 0:
        return math.nan
    c = float(y.sum() / x.sum())
    for _ in range(8):
        w = huber_weights(y / x - c)
        previous, c = c, float((w * y).sum() / (w * x).sum())
        if abs(c - previous) <= CONVERGED * abs(c):
            break
    return max(0.0, c)


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0, for a few columns: the best of the feasible
    solutions over all subsets of free columns (exact for the 2 and 3 columns used here), from the
    normal equations (a few tiny solves in plain floats, fast enough to bootstrap: numpy's call
    overhead on 2 x 2 systems was most of a calibration's fit)."""
    n = a.shape[1]
    ata, atb, btb = (a.T @ a).tolist(), (a.T @ b).tolist(), float(b @ b)
    best, best_cost = [0.0] * n, btb
    for mask in range(1, 1 << n):
        cols = [j for j in range(n) if mask >> j & 1]
        sub = [[ata[i][j] for j in cols] for i in cols]
        rhs = [atb[i] for i in cols]
        sol = _solve(sub, rhs)
        if min(sol) < 0:
            continue
        cost = btb - 2 * sum(x * y for x, y in zip(sol, rhs)) + sum(sol[i] * sub[i][j] * sol[j] for i in range(len(cols)) for j in range(len(cols)))
        if cost < best_cost - 1e-12 * max(btb, 1e-30):
            best, best_cost = [0.0] * n, cost
            for j, x in zip(cols, sol):
                best[j] = x
    return np.array(best)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """x in a x = b: 1 x 1 and 2 x 2 systems in closed form, larger or singular ones by numpy."""
    if len(b) == 1 and a[0][0] != 0:
        return [b[0] / a[0][0]]
    if len(b) == 2:
        det = a[0][0] * a[1][1] - a[0][1] * a[1][0]
        if abs(det) > 1e-12 * abs(a[0][0] * a[1][1]):
            return [(a[1][1] * b[0] - a[0][1] * b[1]) / det, (a[0][0] * b[1] - a[1][0] * b[0]) / det]
    try:
        return [float(x) for x in np.linalg.solve(np.array(a), np.array(b))]
    except np.linalg.LinAlgError:
        return [float(x) for x in np.linalg.lstsq(np.array(a), np.array(b), rcond=None)[0]]


# --- the design: what each observation contributes to each step, computed once -------------------


@dataclass
class Design:
    """Per observation: the model's regressors under the base profile's curves (they do not depend
    on the coefficients being fitted), and the measured quantities each step fits."""

    kinds: list[str]
    bytes: np.ndarray  # (n, kinds): bytes per kind
    calls: np.ndarray  # (n, kinds): calls per kind (one per task that ran the phase), weighed (stage.phase_calls)
    raw: np.ndarray  # (n, kinds): the calls themselves (what a call moves is bytes per raw call)
    cpu: np.ndarray  # (n, kinds): phase wall - request seconds, task-seconds
    read_io: np.ndarray  # (n,): request seconds of read phases, task-seconds
    write_io: np.ndarray
    both_io: np.ndarray  # (n,): request seconds of phases that read and write (exchange levels)
    read_unit: np.ndarray  # (n,): the read term with multiplier 1, task-seconds (C x stage seconds)
    write_unit: np.ndarray
    c: np.ndarray  # functions at once
    pack: np.ndarray
    waves: np.ndarray
    task_bytes: np.ndarray  # largest phase bytes / tasks
    busy: np.ndarray  # (n,): measured wall seconds of all phases, task-seconds
    wall: np.ndarray


def design(observations: Sequence[Observation], base: StorageProfile) -> Design:
    """The fit's design matrices (see :class:`Design`)."""
    kinds = sorted({k for o in observations for k in o.phases})
    index = {k: i for i, k in enumerate(kinds)}
    n = len(observations)
    nbytes, calls, cpu = np.zeros((n, len(kinds))), np.zeros((n, len(kinds))), np.zeros((n, len(kinds)))
    raw = np.zeros((n, len(kinds)))
    cols = {name: np.zeros(n) for name in ("read_io", "write_io", "both_io", "read_unit", "write_unit", "c", "pack", "waves", "task_bytes", "busy", "wall")}
    unit = replace(base, read_scale=1.0, write_scale=1.0)
    for i, o in enumerate(observations):
        tasks = max(1, o.facts.tasks)
        c = max(1, min(tasks, o.concurrency))
        waves = math.ceil(tasks / c)
        terms = {t.name.split()[0]: t.seconds for t in predict_stage(o.facts, unit, o.concurrency).terms if t.name.startswith(("read", "write"))}
        r_unit, w_unit = terms.get("read", 0.0) * c / (waves * c / tasks), terms.get("write", 0.0) * c / (waves * c / tasks)
        r_io = w_io = b_io = 0.0
        for kind, (b, wall, req, *_) in o.phases.items():
            io = min(max(req, 0.0), wall)
            if kind.startswith(READ_PREFIX):
                r_io += io
            elif kind.startswith(WRITE_PREFIX):
                w_io += io
            elif kind in BOTH:
                b_io += io
            nbytes[i, index[kind]] += b
            weighed = phase_calls(o.facts, kind)  # (the facts' calls are the phases' own)
            calls[i, index[kind]] += weighed
            raw[i, index[kind]] += weighed / call_weight(kind)
            cpu[i, index[kind]] += max(0.0, wall - io)
        values = dict(read_io=r_io, write_io=w_io, both_io=b_io, read_unit=r_unit, write_unit=w_unit, c=c, pack=waves * c / tasks, waves=waves,
                      task_bytes=max(o.facts.phases.values(), default=0.0) / tasks, busy=sum(v[1] for v in o.phases.values()), wall=o.wall)  # fmt: skip
        for name, v in values.items():
            cols[name][i] = v
    return Design(kinds, nbytes, calls, raw, cpu, **cols)


# --- the fit ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Coefficients:
    """One set of fitted coefficients (NaN: not identifiable from these observations)."""

    compute: dict[str, float]
    calls: dict[str, float]
    read_scale: float
    write_scale: float
    t0: float
    t1: float
    imbalance: float

    def as_dict(self) -> dict[str, float]:
        out = {"t0": self.t0, "t1": self.t1, "imbalance": self.imbalance, "read_scale": self.read_scale, "write_scale": self.write_scale}
        return out | {f"compute:{k}": v for k, v in self.compute.items()} | {f"call:{k}": v for k, v in self.calls.items()}


def _fit_once(d: Design, rows: np.ndarray, base: StorageProfile) -> Coefficients:
    """Steps 1-3 of the module docstring on the observations ``rows`` (indices, repeats allowed)."""
    compute: dict[str, float] = {}
    calls: dict[str, float] = {}
    groups: dict[str, list[int]] = {}
    for j, k in enumerate(d.kinds):
        groups.setdefault(base_kind(k), []).append(j)
    for kind, js in groups.items():  # each kind from all its operators' phases
        compute[kind], calls[kind] = per_kind(*_sums(d, rows, js))
    for j, k in enumerate(d.kinds):  # each operator signature from its own
        if k not in compute:
            b, n, t, r = _sums(d, rows, [j])
            kind_c, kind_d = _known(compute[base_kind(k)], base.compute_cost(k)), _known(calls[base_kind(k)], base.call_cost(k))
            own_c, own_d = per_signature(b, n, t, kind_d, r)
            seconds = float(t.sum())
            w = seconds / (seconds + SIGNATURE_SECONDS) if seconds > 0 else 0.0  # what its own time can tell
            compute[k] = own_c if math.isnan(own_c) else w * own_c + (1 - w) * kind_c
            calls[k] = own_d if math.isnan(own_d) else w * own_d + (1 - w) * kind_d
    for family in FAMILIES:  # fallbacks for kinds never seen, from every kind of the family
        js = [j for j, k in enumerate(d.kinds) if k.startswith(family) and not any(k.startswith(f) for f in FAMILIES if len(f) > len(family)) and k not in OWN_PRICE_ONLY]  # (a kept broadcast side is no guide to a read never measured)
        if js:  # per byte: all the family's time over all its bytes; per call: the median kind's
            compute[family], calls[family] = _family(d, rows, js, calls)
    for family in SUBFAMILIES:  # (a kind of that very name, "read:parquet" of older reports, is its own)
        js = [j for j, k in enumerate(d.kinds) if k.startswith(family)]
        if js and family not in compute:
            compute[family], calls[family] = _family(d, rows, js, calls)
    read_scale, write_scale = _fit_scales(d, rows)
    touch = d.task_bytes[rows] * base.first_touch_seconds_per_byte  # the base's, not fitted (module docstring)
    work = d.pack[rows] * d.busy[rows] / d.c[rows]  # each function's measured phase time
    left = d.wall[rows] - work - touch  # measured, not steps 1-2's fit
    t0, t1, g = _fit_overheads(left, d.waves[rows], work / d.waves[rows], d.wall[rows], base)
    return Coefficients(compute, calls, read_scale, write_scale, t0, t1, g)


def _family(d: Design, rows: np.ndarray, js: list[int], calls: Mapping[str, float]) -> tuple[float, float]:
    """A fallback over the kinds ``js``: per byte, all their time over all their bytes; per call,
    the median of their per-call costs."""
    b, _, t, _ = _sums(d, rows, js)
    known = [calls[d.kinds[j]] for j in js if not math.isnan(calls[d.kinds[j]])]
    return robust_ratio(b, t), (float(np.median(known)) if known else math.nan)


def _sums(d: Design, rows: np.ndarray, js: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bytes, weighed calls, cpu seconds and calls per observation of ``rows`` over the kinds ``js``."""
    return d.bytes[rows][:, js].sum(axis=1), d.calls[rows][:, js].sum(axis=1), d.cpu[rows][:, js].sum(axis=1), d.raw[rows][:, js].sum(axis=1)


#: Core-seconds of an operator signature's phases at which its own cost counts as much as its
#: kind's: a signature is priced between the two by how much of its time was measured, so that
#: one run of a query's 4 ms final stage (which a warm-up run's first calls make 2x slower) does
#: not price it at that, while a stage of 100 ms is priced by itself.
SIGNATURE_SECONDS = 0.02


#: Bytes per call below which a kind whose calls all move about as much is priced per call (every
#: call of it below: a few calls of megabytes among many small ones are not fixed costs).
SMALL_CALL = 64 << 10


def per_kind(nbytes: np.ndarray, calls: np.ndarray, cpu: np.ndarray, raw: np.ndarray | None = None) -> tuple[float, float]:
    """(c, d) in cpu = c * bytes + d * calls, robustly, >= 0, every observation by its % error.
    When bytes per call hardly vary the two cannot be told apart: then c alone (d NaN), or d
    alone (c NaN) for a kind that never moves bytes or moves only a few per call (below
    :data:`SMALL_CALL`: what such a call takes is its fixed cost; read per byte, a gathered
    query tail of a few hundred bytes per call came out at 1,000 ns/B). ``calls`` may be weighed
    (:func:`croupier.model.stage.phase_calls`); ``raw``, the calls themselves (default: the
    same), say what a call moves."""
    raw = calls if raw is None else raw
    keep = (calls > 0) | (nbytes > 0)
    nbytes, calls, cpu, raw = nbytes[keep], calls[keep], cpu[keep], raw[keep]
    if not len(cpu):
        return math.nan, math.nan
    if nbytes.sum() <= 0:
        return math.nan, robust_ratio(calls, cpu)
    per_call = nbytes[raw > 0] / raw[raw > 0]
    if len(per_call) < 3 or per_call.min() <= 0 or per_call.max() < 2 * per_call.min():
        if len(per_call) and per_call.max() < SMALL_CALL:
            return math.nan, robust_ratio(calls, cpu)
        return robust_ratio(nbytes, cpu), math.nan
    a = np.stack([nbytes, calls], axis=1)
    scale = 1.0 / np.maximum(cpu, 1e-4)
    colscale = np.maximum(a.max(axis=0), 1e-30)
    weights = np.ones(len(cpu))
    sol = np.zeros(2)
    for _ in range(8):
        previous, sol = sol, nnls(a * (scale * weights)[:, None] / colscale, cpu * scale * weights) / colscale
        if np.all(np.abs(sol - previous) <= CONVERGED * np.abs(sol)):
            break
        weights = np.sqrt(huber_weights((a @ sol - cpu) * scale))
    return float(sol[0]), float(sol[1])


def per_signature(nbytes: np.ndarray, calls: np.ndarray, cpu: np.ndarray, per_call: float, raw: np.ndarray | None = None) -> tuple[float, float]:
    """(c, d) of one operator signature: as :func:`per_kind`; when its bytes per call hardly vary
    (one query's stage, run again: the usual case), d is its kind's ``per_call`` and c what is
    left per byte, so the fixed cost is not counted twice (once in c, once in the kind's d)."""
    c, d = per_kind(nbytes, calls, cpu, raw)
    if math.isnan(d) and not math.isnan(c):
        c = robust_ratio(nbytes, np.maximum(0.0, cpu - per_call * calls))
    return c, d


def _known(value: float, fallback: float) -> float:
    """``value``, or ``fallback`` where the fit could not identify it (NaN)."""
    return fallback if math.isnan(value) else value


def _fit_scales(d: Design, rows: np.ndarray) -> tuple[float, float]:
    """Read and write multipliers from the stages whose phases read or write (not both: an
    exchange level's one phase does both, so its requests cannot be split); from the levels,
    one common multiplier, only when nothing else measured a direction."""
    pure = d.both_io[rows] == 0
    mixed = ~pure & (d.both_io[rows] > 0)
    read = robust_ratio(d.read_unit[rows][pure], d.read_io[rows][pure])
    write = robust_ratio(d.write_unit[rows][pure], d.write_io[rows][pure])
    if math.isnan(read) or math.isnan(write):
        common = robust_ratio(d.read_unit[rows][mixed] + d.write_unit[rows][mixed], d.both_io[rows][mixed])
        read, write = _known(read, common), _known(write, common)
    return read, write


def _fit_overheads(left: np.ndarray, waves: np.ndarray, work: np.ndarray, wall: np.ndarray, base: StorageProfile) -> tuple[float, float, float]:
    """t0, t1 and g from what the phases leave of each stage's wall time (``work``: one task's
    phase time, pack * busy / (C * waves)): relative least squares (every stage counts by its
    % error), non-negative, Huber-reweighted. A term whose regressor does not vary keeps the base
    profile's value (NaN marks it as not identified)."""
    columns = [np.ones_like(waves), waves, work]
    fixed = [base.startup_seconds, base.wave_seconds, base.imbalance]
    free = [0] + [j for j in (1, 2) if np.ptp(columns[j]) > 0]
    if len(wall) < len(free) + 2:
        return (math.nan, math.nan, math.nan)
    target = left - sum(columns[j] * fixed[j] for j in range(3) if j not in free)
    scale = 1.0 / np.maximum(wall, 1e-3)
    a = np.stack([columns[j] for j in free], axis=1) * scale[:, None]
    b = target * scale
    colscale = np.maximum(np.abs(a).max(axis=0), 1e-30)
    weights = np.ones(len(b))
    for _ in range(6):
        sol = nnls(a * weights[:, None] / colscale, b * weights) / colscale
        weights = np.sqrt(huber_weights(a @ sol - b))
    out = [math.nan, math.nan, math.nan]
    for j, v in zip(free, sol):
        out[j] = float(v)
    return out[0], out[1], out[2]


@dataclass(frozen=True)
class FitResult:
    """A fitted profile, and how well and how surely each coefficient was measured."""

    profile: StorageProfile
    estimates: dict[str, float]  # coefficient -> value (NaN: kept from the base profile)
    errors: dict[str, float]  # coefficient -> bootstrap standard error (absolute)
    mape: float  # mean absolute % error of the fitted model over the observations' wall times
    observations: int

    def describe(self) -> str:
        """Every coefficient with its standard error, and the fit's error."""
        units = {"t0": ("ms", 1e3), "t1": ("ms", 1e3), "imbalance": ("% of a task's work", 1e2), "read_scale": ("x", 1.0), "write_scale": ("x", 1.0)}
        units |= {k: ("ms per call", 1e3) for k in self.estimates if k.startswith("call:")}
        lines = [f"fit over {self.observations} stages: mean abs error {self.mape:.1f}%, residual spread {100 * self.profile.residual:.1f}% (1 sd)"]
        for name, value in sorted(self.estimates.items(), key=lambda kv: (kv[0].startswith("compute:"), kv[0])):
            unit, factor = units.get(name, ("ns/B", 1e9))
            if math.isnan(value):
                lines.append(f"  {name:<52} not identifiable from these stages: kept from the base profile")
                continue
            lines.append(f"  {name:<52} {format_estimate(value, self.errors.get(name, math.nan), factor, unit)}")
        return "\n".join(lines)


def format_estimate(value: float, error: float, factor: float, unit: str) -> str:
    """A coefficient with its standard error, or what it is instead: a term fitted to exactly 0
    was not identified (nothing told it from 0; "0 +- 0" would claim a certain zero), and an error
    of (numerically) 0 means one stage's data alone fixed it, which measures no uncertainty."""
    if value == 0:
        return "not identified: fitted to 0 (the stages cannot tell it from 0)"
    if math.isnan(error):
        return f"{value * factor:10.4g} {unit} (uncertainty unknown)"
    if error <= 1e-9 * abs(value):
        return f"{value * factor:10.4g} {unit} (from one stage's data alone: uncertainty not measured)"
    flag = "" if value > 2 * error else "  (within 2 standard errors of 0)"
    return f"{value * factor:10.4g} +- {error * factor:.2g} {unit}{flag}"


def fit(observations: Sequence[Observation], base: StorageProfile, bootstrap: int = BOOTSTRAP, seed: int = 0) -> FitResult:
    """Fit the profile's compute, storage-multiplier, start-up, wave and imbalance coefficients to
    ``observations``; curves, bandwidths and first touch stay the base profile's (the grid measures
    the first two; warm functions never pay the third, see the module docstring)."""
    if not observations:
        return FitResult(base, {}, {}, math.nan, 0)
    d = design(observations, base)
    n = len(observations)
    point = _fit_once(d, np.arange(n), base)
    rng = np.random.default_rng(seed)
    samples = [_fit_once(d, rng.integers(0, n, n), base).as_dict() for _ in range(bootstrap)]
    estimates = point.as_dict()
    errors = {}
    for name in estimates:
        values = np.array([s.get(name, math.nan) for s in samples], dtype=float)
        values = values[~np.isnan(values)]
        errors[name] = float(values.std(ddof=1)) if len(values) > 2 else math.nan
    profile = apply(base, point, errors)
    profile = replace(profile, stored=dict(base.stored) | stored_ratios(observations))
    residuals = np.array([predict_stage(o.facts, profile, o.concurrency).seconds / o.wall - 1 for o in observations if o.wall > 0])
    spread = 1.4826 * float(np.median(np.abs(residuals))) if len(residuals) else base.residual
    mape = 100 * float(np.mean(np.abs(residuals))) if len(residuals) else math.nan
    profile = replace(profile, residual=max(spread, 0.02), fit=dict(profile.fit, stage_fit_mape_percent=round(mape, 2), stages=n, cold_stages=sum(cold(o) for o in observations)))
    return FitResult(profile, estimates, errors, mape, n)


def stored_ratios(observations: Sequence[Observation]) -> dict[str, float]:
    """Per exchange write kind, bytes stored per byte of data (robustly, over the stages that
    write one: their only writes are its objects), so that a plan's exchange is priced at the
    bytes its codec really moves (zstd stores TeraSort records at about a third)."""
    pairs: dict[str, tuple[list[float], list[float]]] = {}
    for o in observations:
        kinds = [k for k in o.phases if k.startswith("write:exchange")]
        if len(kinds) == 1 and o.facts.write_bytes > 0 and o.phases[kinds[0]][0] > 0:
            data, stored = pairs.setdefault(kinds[0], ([], []))
            data.append(float(o.phases[kinds[0]][0]))
            stored.append(float(o.facts.write_bytes))
    ratios = {k: robust_ratio(np.array(x), np.array(y)) for k, (x, y) in pairs.items()}
    return {k: v for k, v in ratios.items() if not math.isnan(v) and v > 0}


def apply(base: StorageProfile, c: Coefficients, errors: Mapping[str, float]) -> StorageProfile:
    """``base`` with the identified coefficients of ``c`` and their relative errors."""

    def current(table: Mapping[str, float]) -> dict[str, float]:
        # an operator signature no observation has any more (it left the history) is dropped,
        # so that a profile learning from ad-hoc queries does not grow without bound
        return {k: v for k, v in table.items() if SIGNATURE not in k or k in c.compute or k.split(":", 1)[-1] in c.compute}

    compute = current(base.compute) | {k: v for k, v in c.compute.items() if not math.isnan(v)}
    calls = current(base.call_seconds) | {k: v for k, v in c.calls.items() if not math.isnan(v)}
    uncertainty = current(base.uncertainty)
    for name, v in c.as_dict().items():
        e = errors.get(name, math.nan)
        if not math.isnan(v) and not math.isnan(e):
            uncertainty[name] = min(10.0, e / v) if v > 0 else 10.0
    return replace(
        base,
        compute=compute,
        call_seconds=calls,
        read_scale=_known(c.read_scale, base.read_scale),
        write_scale=_known(c.write_scale, base.write_scale),
        startup_seconds=_known(c.t0, base.startup_seconds),
        wave_seconds=_known(c.t1, base.wave_seconds),
        imbalance=_known(c.imbalance, base.imbalance),
        uncertainty=uncertainty,
    )
