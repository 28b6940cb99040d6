"""The selector (SEER Alg. 2, extended): choose P and the exchange plan for D bytes.

Searches P from ceil(D / usable function memory) up to the largest useful P, over every topology
candidate of each P with and without write combining, predicting each with the model (with
hundreds of P to try, coarse to fine: :func:`search`); picks the
minimum of the objective: "time" (default), "cost", or "time" within a cost ``budget``. With P
given, only the plans of that P are compared (constant time in P).

Robust choice: every prediction has a 90% range (from the profile's coefficient errors and
residual spread). When the time objective's best point estimate and other candidates have
overlapping ranges, the model cannot tell them apart; then the selector takes, among those, the
one whose expected and worst-case times together are least (seconds + the top of its range): a
better worst case wins when it gains more than it costs in expected time. That avoids plans that
are fast only if an uncertain or extrapolated term is as small as its point estimate, without
giving up expected time for a worst case that is hardly better: taking the lowest worst case
alone chose, on a 400 MB sort, a plan whose range ended 1% lower and which ran 16% slower
(``bench/model_accuracy.py``, issue 15).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from croupier.errors import ConfigError
from croupier.exchange.levels import LevelsPlan
from croupier.exchange.plan import ExchangePlan, all_plans
from croupier.exchange.topology import Topology
from croupier.model.perf import Prediction, predict
from croupier.model.profile import StorageProfile
from croupier.model.stage import StagePrediction
from croupier.model.tier import TierOptions, tier_candidates
from croupier.units import format_bytes

#: Share of a function's memory its data may take: input, grouped copy and sort buffers coexist.
MEMORY_SHARE = 0.25
#: Memory a function uses before it holds any data: Python with NumPy, Polars and PyArrow imported
#: (a local worker measured 107 MiB). Only the rest is shared among a task's data.
FUNCTION_BASELINE = 128 << 20
OBJECTIVES = ("time", "cost")


@dataclass(frozen=True)
class Choice:
    """The selected prediction, and every candidate it was compared with."""

    best: Prediction
    candidates: tuple[Prediction, ...]
    objective: str
    data_bytes: int
    budget: float | None = None
    point: Prediction | None = None  # the best point estimate, when the robust choice differs

    def note(self) -> str:
        """Why the choice is not the best point estimate (empty when it is)."""
        p, b = self.point, self.best
        if p is None or p is b:
            return ""
        return (
            f"; ranges overlap, so the better worst case: {b.plan.name} P={b.workers} (at most {b.high:.3f} s) over "
            f"{p.plan.name} P={p.workers} ({p.seconds:.3f} s, up to {p.high:.3f} s)"
        )

    def ranked(self, rows: int) -> list[Prediction]:
        """The ``rows`` best candidates by the objective's point estimate, plus the chosen one when
        the robust choice ranks lower (so every table shows what runs)."""
        shown = sorted(self.candidates, key=_key(self.objective))[:rows]
        return shown if any(c is self.best for c in shown) else [*shown, self.best]

    def explain(self, rows: int = 15) -> str:
        """The candidates table (best first; the choice marked ``*``, listed last when the robust
        choice is not among the best point estimates) and the choice with its dominant term."""
        shown = self.ranked(rows)
        lines = [
            f"selector: D={self.data_bytes:,} B, objective {self.objective}"
            + (f" within ${self.budget}" if self.budget is not None else "")
            + f", {len(self.candidates)} candidates (best {len(shown)} shown)",
            f"  {'algorithm':<22} {'topology':<9} {'P':>5} {'time s':>9} {'90% range s':>15} {'requests':>9} {'cost $':>11}  dominant term",
        ]
        for c in shown:
            d = c.dominant()
            mark = "*" if c is self.best else " "
            span = f"{c.low:.3f}-{c.high:.3f}"
            name = c.plan.name + (" @fast" if c.tier == "fast" else "")
            lines.append(
                f"{mark} {name:<22} {str(c.plan.topology):<9} {c.workers:>5} {c.seconds:>9.3f} {span:>15} {sum(c.requests.values()):>9,} {c.cost:>11.6f}  {d.name} ({d.seconds:.3f} s)"
            )
        d = self.best.dominant()
        lines.append(
            f"choice: {self.best.plan.name} with P={self.best.workers}: {self.best.seconds:.3f} s predicted ({self.best.low:.3f}-{self.best.high:.3f}); "
            f"dominated by {d.name}: {d.why}{self.note()}"
        )
        return "\n".join(lines)


def _key(objective: str):  # type: ignore[no-untyped-def]
    return (lambda p: (p.cost, p.seconds)) if objective == "cost" else (lambda p: (p.seconds, p.cost))


def usable_memory(function_memory: int) -> float:
    """Bytes of data one task may hold in a function of ``function_memory`` bytes."""
    return max(1, function_memory - FUNCTION_BASELINE) * MEMORY_SHARE


def memory_fits(plan: ExchangePlan, data_bytes: int, profile: StorageProfile) -> bool:
    """Whether one task of each memory level of ``plan`` (a group of its workers, MinFlow) can hold
    its group's data in a function; plans without memory levels always fit."""
    return not isinstance(plan, LevelsPlan) or plan.group_bytes(data_bytes) <= usable_memory(profile.function_memory)


def search_range(data_bytes: int, profile: StorageProfile, max_workers: int | None = None) -> range:
    """P from ceil(D / usable memory) to the largest P worth trying."""
    low = max(1, math.ceil(data_bytes / usable_memory(profile.function_memory)))
    high = max_workers or (profile.concurrency if profile.concurrency >= 100 else 8 * profile.concurrency)
    return range(low, max(low, high) + 1)


#: How much more than an even share (D / P) the largest partition of a late-bound exchange may
#: hold: its partitions are runs of whole fine buckets, ceil(B / P) at most.
BALANCE = 1.125


def balanced(workers: int, buckets: int) -> bool:
    """Whether ``buckets`` fine buckets split into ``workers`` runs of whole buckets evenly enough
    (:data:`BALANCE`): always where B >= 8 P, and where P nearly divides B (B = 32: P = 12 takes
    runs of 3 and 2, the largest 1.125 of an even share; P = 13 would take 1.22)."""
    return math.ceil(buckets / workers) * workers <= BALANCE * buckets


def even_workers(workers: int, buckets: int) -> int:
    """The smallest P >= ``workers`` (and <= ``buckets``) that is :func:`balanced` over ``buckets``:
    for a P bound outside the selector's search (a hybrid exchange's, from the tier search or
    an estimate); rounded up, not down, so that no task holds more than the P chosen allowed."""
    return next(p for p in range(min(workers, buckets), buckets + 1) if balanced(p, buckets))


def _fitting_sizes(data_bytes: int, profile: StorageProfile, max_workers: int | None, buckets: int | None) -> list[int]:
    """The P the selector may pick: every one whose tasks fit in a function's memory, at most
    ``max_workers``, and at most ``buckets`` and :func:`balanced` over them (unless none is,
    where memory needs a P near B: then all that fit); a clear error (before any work) when
    there is none."""
    span = search_range(data_bytes, profile, max_workers)
    limits = [(max_workers, "--max-workers / max_workers")] if max_workers else []
    if buckets is not None:
        limits.append((buckets, f"the {buckets} buckets the producers wrote"))
    sizes = [p for p in span if all(p <= limit for limit, _ in limits)]
    even = [p for p in sizes if buckets is None or balanced(p, buckets)]
    sizes = even or sizes  # none even (a P near B that memory needs): every one that fits
    if not sizes:
        limit, why = min(limits)
        raise ConfigError(
            f"no P fits {format_bytes(data_bytes)} in functions of {format_bytes(profile.function_memory)} function memory: "
            f"a task may hold {MEMORY_SHARE:.0%} of what is left after the {format_bytes(FUNCTION_BASELINE)} a function needs to start, so P must be at least {span.start}, but P is at most {limit} ({why}); "
            "give more --function-memory (function_memory) or a larger --max-workers"
        )
    return sizes


def choose(
    data_bytes: int,
    profile: StorageProfile,
    objective: str = "time",
    budget: float | None = None,
    workers: int | None = None,
    concurrency: int | None = None,
    max_workers: int | None = None,
    max_levels: int = 3,
    algorithm: str | None = None,
    senders: int | None = None,
    buckets: int | None = None,
    topology: Topology | None = None,
    producers_done: bool = False,
    phases: dict[str, tuple[str, ...]] | None = None,
    tiers: TierOptions | None = None,
    memory_levels: bool = True,
    stored: float | None = None,
) -> Choice:
    """Select P and the plan for ``data_bytes`` (P fixed when ``workers`` is given; only plans of
    the family ``algorithm``, e.g. "direct+wc" or "2-level", when it is given; exactly
    ``topology`` when given).

    ``senders`` is M, the producers (default P). ``buckets`` is B when the producers have already
    cut their data into B buckets (late binding): then P <= B and level 1 is write-combined, the
    only form a producer can write before P is known. ``producers_done``: leave the producers'
    stage out of the comparison (it ran already). ``phases``: the phase kinds of the stages (see
    :func:`croupier.model.perf.predict`). ``tiers``: a fast tier beside the slow store — every
    plan is also predicted with its objects there (if they fit), and per P the hybrid multi-round
    exchange, so the choice is over tier x algorithm x P (:func:`croupier.model.tier.tier_candidates`).
    ``stored``: the bytes the exchange's objects hold per byte of ``data_bytes``, when the producers
    measured it (they compress, or send rows condensed: the consumers work through ``data_bytes``,
    the storage terms move ``stored`` times as much).
    """
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    combine = (True,) if buckets is not None else (False, True)
    if topology is not None:
        sizes = [topology.workers]
        plans = [ExchangePlan(topology, c, senders, buckets) for c in combine]
        if memory_levels and algorithm is not None and algorithm.endswith("+mem"):  # that topology with its middle levels in memory
            plans = [v for v in (LevelsPlan.alternate(p) for p in plans) if v is not None]
    else:
        sizes = [workers] if workers else _fitting_sizes(data_bytes, profile, max_workers, buckets)
        plans = [plan for p in sizes for plan in all_plans(p, max_levels, senders, buckets, combine, memory_levels)]
    plans = [plan for plan in plans if (algorithm is None or plan.family == algorithm) and memory_fits(plan, data_bytes, profile)]
    if not plans:
        late = " (late binding: the producers wrote before P was known, so only write-combined plans, P <= B)" if buckets is not None else ""
        memory = "and k-level (k >= 3) with +mem, whose group of workers must fit one function's memory" if memory_levels else "(memory levels are left out here)"
        raise ConfigError(f"no {algorithm!r} exchange for P in {sizes[0]}..{sizes[-1]}{late}; algorithms are direct, k-level (k <= {max_levels}), each with +wc, {memory}")
    shared: dict[Any, StagePrediction] = {}  # the candidates' stages in common, predicted once

    def predicted(some: list[ExchangePlan]) -> list[Prediction]:
        """Every candidate of ``some`` plans: on the slow tier, and on the fast one or hybrid."""
        out = [predict(plan, data_bytes, profile, concurrency, producers_done, phases, shared, stored) for plan in some]
        if tiers is not None:
            if "slow" not in tiers.allowed:
                out = []
            out += tier_candidates(some, data_bytes, profile, tiers, concurrency, producers_done, phases, senders, buckets, stored)
            out = out or [predict(plan, data_bytes, profile, concurrency, producers_done, phases, stored=stored) for plan in some]
        return out

    within = lambda c: budget is None or c.cost <= budget  # noqa: E731
    candidates = search(plans, predicted, lambda cs: sorted(filter(within, cs), key=_key(objective)))
    pool = [c for c in candidates if within(c)]
    if not pool:
        cheapest = min(candidates, key=lambda c: c.cost)
        raise ConfigError(f"no configuration fits the budget ${budget}; the cheapest costs ${cheapest.cost:.6f} ({cheapest.plan.name}, P={cheapest.workers})")
    point = min(pool, key=_key(objective))
    best = robust(point, pool) if objective == "time" else point
    return Choice(best, tuple(candidates), objective, data_bytes, budget, point if best is not point else None)


#: With more P than this to choose from (a cloud platform's thousand functions), the selector
#: searches coarse to fine (:func:`search`) instead of predicting every plan of every P.
EVERY_P = 96
#: The coarse pass's P beyond :data:`EVERY_P`: each about this much larger than the one before.
COARSE_STEP = 1.06
#: The coarse pass's best P (by the objective, distinct) whose neighbourhoods are searched.
REFINED = 3
#: P a refinement pass tries in each neighbourhood, evenly spread, before the last, exhaustive one.
PROBES = 12


def search(plans: list[ExchangePlan], predicted: Callable[[list[ExchangePlan]], list[Prediction]], ranked: Callable[[list[Prediction]], list[Prediction]]) -> list[Prediction]:
    """The candidates of ``plans`` the selector compares: all of them when they span at most
    :data:`EVERY_P` values of P; else coarse to fine. First the :data:`EVERY_P` smallest P and
    then P growing by :data:`COARSE_STEP` (:func:`_coarse`); around each of the :data:`REFINED` best P found
    (``ranked`` orders candidates best first, leaving out those over budget), every P between
    its coarse neighbours, first :data:`PROBES` of them spread evenly, then every P next to the
    best probe. A prediction changes smoothly with P, but for the step of a wave and the shapes
    of a multi-level topology (P = 625 is 25 x 25, P = 624 is 26 x 24), which the last pass
    tries one by one. Planning a TPC-H query for a thousand functions predicted 19,000
    candidates, 9 s; ``bench/selector_search.py`` measures how close the search gets (the same
    plan as trying every P in 71 of 72 cases, from a fifth of the candidates)."""
    by_p: dict[int, list[ExchangePlan]] = {}
    for plan in plans:
        by_p.setdefault(plan.workers, []).append(plan)
    sizes = sorted(by_p)
    if len(sizes) <= EVERY_P:
        return predicted(plans)
    done: dict[int, list[Prediction]] = {}

    def visit(ps: Iterable[int]) -> None:
        todo = [p for p in dict.fromkeys(ps) if p not in done]
        out = predicted([plan for p in todo for plan in by_p[p]])
        for p in todo:
            done[p] = []
        for c in out:
            done.setdefault(c.workers, []).append(c)

    def best(ps: Iterable[int], n: int) -> list[int]:
        seen: list[int] = []
        for c in ranked([c for p in ps for c in done[p]]):
            if c.workers not in seen:
                seen.append(c.workers)
            if len(seen) == n:
                break
        return seen

    coarse = _coarse(sizes)
    visit(coarse)
    for around in best(coarse, REFINED):
        i = coarse.index(around)
        window = sizes[sizes.index(coarse[max(0, i - 1)]) : sizes.index(coarse[min(len(coarse) - 1, i + 1)]) + 1]
        stride = max(1, len(window) // PROBES)
        visit(window[::stride])
        for probe in best([p for p in window if p in done], 1):  # none: all of them over budget
            top = sizes.index(probe)
            visit(sizes[max(0, top - stride) : top + stride + 1])
    return [c for p in sizes if p in done for c in done[p]]


def _coarse(sizes: list[int]) -> list[int]:
    """The first :data:`EVERY_P` of ``sizes`` (the smallest P), then each next one at least
    :data:`COARSE_STEP` times the last taken, the largest, and every P of ``sizes`` that is a
    near square or near cube (n x n, n x (n+1), n^3, n^2 (n+1), n (n+1)^2): the P whose
    multi-level topologies are balanced, which a geometric step alone may miss (P = 509 is prime,
    and has no 2-level topology; P = 506 = 23 x 22 was the best plan of a 100 GB sort)."""
    out: list[int] = []
    for p in sizes:
        if len(out) < EVERY_P or p >= out[-1] * COARSE_STEP:
            out.append(p)
    out.append(sizes[-1])
    shapes = {m for n in range(2, math.isqrt(sizes[-1]) + 2) for m in (n * n, n * (n + 1), n**3, n * n * (n + 1), n * (n + 1) ** 2)}
    have = set(sizes)
    return sorted(set(out) | (shapes & have))


def robust(point: Prediction, pool: list[Prediction]) -> Prediction:
    """Among the candidates whose 90% range overlaps that of ``point`` (the best point estimate),
    the one with the least expected plus worst-case time (``seconds + high``: a rival's lower top
    of range must make up for its slower estimate); ties go to the faster estimate, then to fewer
    stages."""
    high = point.high
    rivals = [c for c in pool if c.low <= high]
    return min(rivals, key=lambda c: (round(c.seconds + c.high, 9), c.seconds, len(c.stages)))
