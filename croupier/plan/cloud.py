"""``croupier plan``: what a sort or a query would take and cost on a cloud platform, before running it.

The plan comes from the same selector and stage models the runner uses
(:func:`croupier.model.selector.choose`, :mod:`croupier.model.stage`), fed with a shipped storage
profile (``aws-s3``, ``ibm-cos``, ...) priced by its platform (:mod:`croupier.sim.platform`:
today's prices with their source and date, the platform's concurrency). A sort is one exchange of
``--size`` bytes. A query is compiled dry into its stages (:mod:`croupier.plan.compile`) and every
partitioned exchange is planned for an estimate of its bytes: an exchange whose producers scan a
table gets that table's size, later ones the sum of what flows into their producers (an upper
bound: filters and aggregates only shrink data).

With a fast tier (``s3-express``, ``elasticache``) the exchange runs on that tier's profile; a
tier with a bandwidth cap per node (ElastiCache) caps the profile's request ceilings at
cap / object size, so the selector sees the cap. Cost is broken down the way the platform bills:
function GB-seconds (each stage's running functions for that stage's time), invocations,
requests by kind and store, the intermediate data's storage, and the fast tier's capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from croupier.errors import ConfigError
from croupier.exchange.plan import ExchangePlan
from croupier.model.perf import Prediction, stage_facts, stored_ratio
from croupier.model.perf import cost as selector_cost
from croupier.model.profile import Prices, StorageProfile
from croupier.model.selector import MEMORY_SHARE, Choice, choose, robust
from croupier.model.stage import StagePrediction, Term, io_term
from croupier.sim.platform import PLATFORM_OF_PROFILE, FastTier, Platform, capped, networked, platform_for, priced
from croupier.units import format_bytes

#: How many runner-up plans the text and JSON show.
RUNNERS_UP = 4


@dataclass(frozen=True)
class PlanOptions:
    """What the user fixed: function memory, P, algorithm family, fast tier, objective, budget."""

    profile: str = "aws-s3"
    memory: int | None = None
    workers: int | None = None
    algorithm: str | None = None
    fast_tier: str | None = None
    objective: str = "time"
    budget: float | None = None
    max_levels: int = 3
    exchange_only: bool = False  # an exchange in isolation (Lambada Table 3): no input read, no sort, no output write
    prefixes: int | None = None  # partitioned prefixes of the object store (None: as the store scales up over the run)
    network: bool = True  # per-worker bandwidths from the platform's function network (False: the profile's own)
    accounting: str = "croupier"  # "locus": time and bill the chosen plan as Locus' projection does (see locus_accounting)

    def phases(self) -> dict[str, tuple[str, ...]] | None:
        """Phase kinds of the stages for the models (None: TeraSort's)."""
        return EXCHANGE_PHASES if self.exchange_only else None


#: Phase kinds of an exchange in isolation: producers partition and write, consumers only read.
EXCHANGE_PHASES = {"map": ("write:exchange-records",), "level": ("regroup",), "reduce": ("read:exchange-records",)}


@dataclass(frozen=True)
class Cost:
    """USD of a plan, by what the platform bills."""

    function_gb_seconds: float = 0.0
    functions: float = 0.0
    invocations: int = 0
    invocation: float = 0.0
    requests: dict[str, int] = field(default_factory=dict)
    request_cost: dict[str, float] = field(default_factory=dict)
    storage: float = 0.0
    fast_tier: float = 0.0
    fast_tier_nodes: int = 0

    @property
    def total(self) -> float:
        return self.functions + self.invocation + sum(self.request_cost.values()) + self.storage + self.fast_tier

    def __add__(self, other: Cost) -> Cost:
        requests = dict(self.requests)
        for k, v in other.requests.items():
            requests[k] = requests.get(k, 0) + v
        money = dict(self.request_cost)
        for k, v in other.request_cost.items():
            money[k] = money.get(k, 0.0) + v
        return Cost(
            self.function_gb_seconds + other.function_gb_seconds, self.functions + other.functions, self.invocations + other.invocations,
            self.invocation + other.invocation, requests, money, self.storage + other.storage, self.fast_tier + other.fast_tier,
            max(self.fast_tier_nodes, other.fast_tier_nodes),
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": round(self.total, 6),
            "functions": round(self.functions, 6),
            "function_gb_seconds": round(self.function_gb_seconds, 3),
            "invocations": self.invocations,
            "invocation": round(self.invocation, 6),
            "requests": dict(sorted(self.requests.items())),
            "request_cost": {k: round(v, 6) for k, v in sorted(self.request_cost.items())},
            "storage": round(self.storage, 6),
            "fast_tier": round(self.fast_tier, 6),
            "fast_tier_nodes": self.fast_tier_nodes,
        }


@dataclass(frozen=True)
class PlannedExchange:
    """One exchange of the plan: its name, estimated bytes, how they were known, the selector's choice."""

    name: str
    data_bytes: int
    how: str
    choice: Choice
    cost: Cost
    stage_names: tuple[str, ...] = ()  # physical stage names of the prediction's stages (map, levels, reduce)


@dataclass(frozen=True)
class CloudPlan:
    """A planned job: per exchange the chosen plan, predicted time, cost and runners-up."""

    what: str
    platform: Platform
    profile: StorageProfile
    options: PlanOptions
    exchanges: tuple[PlannedExchange, ...]
    notes: tuple[str, ...] = ()
    simulation: Any = None  # croupier.sim.engine.SimSummary when --simulate

    def stage_times(self) -> dict[str, StagePrediction]:
        """Predicted time per physical stage (a stage two exchanges share: the larger prediction)."""
        out: dict[str, StagePrediction] = {}
        for ex in self.exchanges:
            for name, stage in zip(ex.stage_names, ex.choice.best.stages):
                if name not in out or stage.seconds > out[name].seconds:
                    out[name] = stage
        return out

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stage_times().values())

    @property
    def cost(self) -> Cost:
        total = Cost()
        for ex in self.exchanges:
            total = total + ex.cost
        return total

    def render(self) -> str:
        """The plan as text: header, per exchange the choice and runners-up, stages, cost."""
        o = self.options
        tier = f", fast tier {o.fast_tier}" if o.fast_tier else ""
        lines = [
            f"plan: {self.what} on {self.platform.name} ({self.profile.label}{tier}), functions of {format_bytes(self.profile.function_memory)}, "
            f"up to {self.profile.concurrency} at once, objective {o.objective}" + (f" within ${o.budget:g}" if o.budget is not None else ""),
            f"prices: {self.platform.prices.source}",
        ]
        for ex in self.exchanges:
            best = ex.choice.best
            lines.append(f"exchange {ex.name}: D = {ex.data_bytes / 1e9:,.3f} GB ({ex.how})")
            lines.append(f"  chosen: {best.plan.describe()}: {best.seconds:,.1f} s (90% {best.low:,.1f}-{best.high:,.1f}), ${ex.cost.total:,.4f}")
            for name, stage in zip(ex.stage_names, best.stages):
                d = stage.dominant()
                lines.append(f"    {name:<22} {stage.seconds:>10,.1f} s  dominant {d.name}: {d.why}")
            for c in runners_up(ex.choice):
                lines.append(f"  runner-up: {c.plan.name:<20} P={c.workers:<7} {c.seconds:>10,.1f} s  selector cost ${c.cost:,.4f}")
        lines.append("stages: " + ", ".join(f"{k} {v.seconds:,.1f} s" for k, v in self.stage_times().items()))
        lines.append(f"predicted time: {self.seconds:,.1f} s")
        c = self.cost
        lines.append(f"cost: ${c.total:,.4f}")
        lines.append(f"  functions    ${c.functions:,.4f}  ({c.function_gb_seconds:,.0f} GB-s)")
        lines.append(f"  invocations  ${c.invocation:,.4f}  ({c.invocations:,})")
        for kind in sorted(c.requests):
            lines.append(f"  {kind:<12} ${c.request_cost.get(kind, 0.0):,.4f}  ({c.requests[kind]:,} requests)")
        lines.append(f"  storage      ${c.storage:,.4f}  (intermediate data in the object store)")
        if o.fast_tier:
            nodes = f"{c.fast_tier_nodes} node(s)" if c.fast_tier_nodes else "capacity and transfer"
            lines.append(f"  fast tier    ${c.fast_tier:,.4f}  ({o.fast_tier}: {nodes})")
        lines += [f"note: {n}" for n in self.notes]
        if self.simulation is not None:
            lines += self.simulation.render()
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The plan as one JSON-able object (``seconds``, ``cost`` with its total and parts, ...)."""
        out: dict[str, Any] = {
            "what": self.what,
            "platform": self.platform.name,
            "profile": self.profile.label,
            "memory": self.profile.function_memory,
            "fast_tier": self.options.fast_tier,
            "objective": self.options.objective,
            "seconds": round(self.seconds, 3),
            "cost": self.cost.to_dict(),
            "prices_source": self.platform.prices.source,
            "stages": {k: v.to_dict() for k, v in self.stage_times().items()},
            "exchanges": [
                {
                    "name": ex.name,
                    "bytes": ex.data_bytes,
                    "how": ex.how,
                    "plan": ex.choice.best.plan.describe(),
                    "algorithm": ex.choice.best.plan.family,
                    "workers": ex.choice.best.workers,
                    "seconds": round(ex.choice.best.seconds, 3),
                    "range": [round(ex.choice.best.low, 3), round(ex.choice.best.high, 3)],
                    "cost": ex.cost.to_dict(),
                    "runners_up": [{"plan": c.plan.name, "workers": c.workers, "seconds": round(c.seconds, 3), "selector_cost": round(c.cost, 6)} for c in runners_up(ex.choice)],
                }
                for ex in self.exchanges
            ],
            "notes": list(self.notes),
        }
        if self.simulation is not None:
            out["simulation"] = self.simulation.to_dict()
        return out


def runners_up(choice: Choice, count: int = RUNNERS_UP) -> list[Prediction]:
    """The next best candidates by the choice's objective, one per algorithm family and P."""
    key = (lambda p: (p.cost, p.seconds)) if choice.objective == "cost" else (lambda p: (p.seconds, p.cost))
    seen = {(choice.best.plan.family, choice.best.workers)}
    out = []
    for c in sorted(choice.candidates, key=key):
        if (c.plan.family, c.workers) in seen:
            continue
        seen.add((c.plan.family, c.workers))
        out.append(c)
        if len(out) == count:
            break
    return out


def exchange_profile(options: PlanOptions, data_bytes: int) -> tuple[Platform, StorageProfile, FastTier | None]:
    """The platform, the profile the selector uses for an exchange of ``data_bytes`` (priced by
    the platform; on the fast tier with its request prices and bandwidth cap), and the tier."""
    base = StorageProfile.load(options.profile)
    platform = platform_for(base)
    profile = priced(base, platform, options.memory)
    platform = platform.at_memory(profile.function_memory)  # a network that depends on function memory (Lambda 2018)
    if not options.fast_tier:
        return platform, profile, None
    tier = platform.tier(options.fast_tier)
    fast = priced(StorageProfile.load(tier.profile), platform, options.memory)
    prices = replace(platform.prices, read_request=tier.read_request, write_request=tier.write_request)
    fast = capped(replace(fast, prices=prices), tier.aggregate_bandwidth(stored_bytes(data_bytes, 1)))
    return platform, fast, tier


def stored_bytes(data_bytes: int, levels: int) -> float:
    """Intermediate bytes held at once: one level's objects, two while a level is regrouped."""
    return float(data_bytes) * min(levels, 2)


def exchange_cost(prediction: Prediction, profile: StorageProfile, prices: Prices, tier: FastTier | None, output_writes: bool = True, function_seconds: float | None = None) -> Cost:
    """What the platform bills for ``prediction``: every stage's running functions (at most the
    concurrency) for that stage's time, one invocation per task, requests (exchange requests at
    the tier's prices if any, input reads and output writes at the object store's), and the
    intermediate data: object-store storage, or the fast tier's capacity and transfer.
    ``function_seconds``: bill that many function-seconds instead (another accounting's)."""
    plan = prediction.plan
    gb = profile.function_memory / 2**30
    tasks = [stage.tasks for stage in plan.stages()]
    if function_seconds is None:
        gb_s = sum(s.function_seconds(min(t, profile.concurrency)) * gb for t, s in zip(tasks, prediction.stages[-len(tasks):]))
    else:
        gb_s = function_seconds * gb
    exchange = plan.predicted_requests()
    reads_price = tier.read_request if tier else prices.read_request
    writes_price = tier.write_request if tier else prices.write_request
    requests = {
        "exchange GET": exchange["GET"],
        "exchange GET_RANGE": exchange["GET_RANGE"],
        "exchange PUT": exchange["PUT"],
        "input GET": plan.producers if output_writes else 0,
        "output PUT": plan.workers if output_writes else 0,
    }
    money = {
        "exchange GET": exchange["GET"] * reads_price,
        "exchange GET_RANGE": exchange["GET_RANGE"] * reads_price,
        "exchange PUT": exchange["PUT"] * writes_price,
        "input GET": plan.producers * prices.read_request,
        "output PUT": requests["output PUT"] * prices.write_request,
    }
    requests = {k: v for k, v in requests.items() if v}
    money = {k: v for k, v in money.items() if k in requests}
    d, seconds = float(prediction.data_bytes), prediction.seconds
    stored = plan.stored_levels
    held = stored_bytes(prediction.data_bytes, stored)
    storage = fast = 0.0
    nodes = 0
    if tier is None:
        storage = prices.storage_gb_second * held / 1e9 * seconds
    else:
        nodes = tier.nodes(held)
        fast = tier.capacity_gb_second * held / 1e9 * seconds + tier.transfer_gb * d * stored / 1e9 + tier.node_second * nodes * seconds
    invocations = sum(tasks)
    return Cost(gb_s, gb_s * prices.function_gb_second, invocations, invocations * prices.invocation, requests, money, storage, fast, nodes)


def smooth_sizes(low: int, count: int = 12, spread: float = 1.25) -> list[int]:
    """Up to ``count`` P in [low, spread * low] with only the prime factors 2, 3, 5, 7, smallest
    first (and ``low`` itself): the selector compares one P when P is forced up by memory, and a
    P with a large prime factor (186,265 = 5 x 37,253) has no balanced multi-level topology."""
    high = max(low, int(low * spread))
    found = {low}
    for a in _powers(2, high):
        for b in _powers(3, high // a):
            for c in _powers(5, high // (a * b)):
                for d in _powers(7, high // (a * b * c)):
                    n = a * b * c * d
                    if low <= n <= high:
                        found.add(n)
    return sorted(found)[:count]


def _powers(base: int, limit: int) -> list[int]:
    out, v = [], 1
    while v <= max(1, limit):
        out.append(v)
        v *= base
    return out


def scaled_prefixes(profile: StorageProfile, partitions: int) -> StorageProfile:
    """``profile`` whose request ceilings are those of ``partitions`` partitioned prefixes (S3
    splits a prefix under sustained load; each partition serves the published per-prefix rate)."""
    if partitions <= 1:
        return profile
    from croupier.model.profile import Curve

    def scale(curve: Curve) -> Curve:
        return Curve(curve.sizes, curve.per_worker, tuple(c * partitions for c in curve.ceiling))

    return replace(profile, read=scale(profile.read), write=scale(profile.write))


def store_capped(profile: StorageProfile, platform: Platform, tier: FastTier | None) -> StorageProfile:
    """``profile`` under the object store's aggregate bandwidth, if the platform has one (IBM COS
    as SEER measured it): the request ceilings at size s are at most that bandwidth / s, so every
    read or write term of a stage is at least its bytes / the aggregate bandwidth. Not for a fast tier."""
    cap = platform.storage.aggregate_bandwidth
    return capped(profile, cap) if tier is None and cap > 0 else profile


def steady_partitions(platform: Platform, seconds: float) -> int:
    """Partitions a prefix has after ``seconds`` of sustained throttling: the store doubles them
    every ``scale_after_seconds``, up to ``max_partitions``; half the run at the reached level
    counts (a conservative average over the ramp)."""
    limits = platform.storage
    doublings = int(seconds / 2 / limits.scale_after_seconds) if limits.scale_after_seconds > 0 else 0
    return max(limits.initial_partitions, min(limits.max_partitions, limits.initial_partitions * 2 ** min(doublings, 30)))


def _choose(size: int, profile: StorageProfile, options: PlanOptions) -> Choice:
    """The selector over the P it would compare, plus smooth P when memory forces P above the
    concurrency (see :func:`smooth_sizes`); one :class:`Choice` over all candidates."""
    args = dict(concurrency=profile.concurrency, max_levels=options.max_levels, algorithm=options.algorithm, phases=options.phases(), memory_levels=memory_levels(profile, options))
    if options.workers:
        return choose(size, profile, options.objective, options.budget, workers=options.workers, **args)  # type: ignore[arg-type]
    low = math.ceil(size / (profile.function_memory * MEMORY_SHARE))
    if low <= profile.concurrency:
        return choose(size, profile, options.objective, options.budget, **args)  # type: ignore[arg-type]
    choices = [choose(size, profile, options.objective, None, workers=p, **args) for p in smooth_sizes(low)]  # type: ignore[arg-type]
    candidates = tuple(c for ch in choices for c in ch.candidates)
    pool = [c for c in candidates if options.budget is None or c.cost <= options.budget]
    if not pool:
        cheapest = min(candidates, key=lambda c: c.cost)
        raise ConfigError(f"no configuration fits the budget ${options.budget}; the cheapest costs ${cheapest.cost:.2f} ({cheapest.plan.name}, P={cheapest.workers})")
    key = (lambda p: (p.cost, p.seconds)) if options.objective == "cost" else (lambda p: (p.seconds, p.cost))
    point = min(pool, key=key)
    best = robust(point, pool) if options.objective == "time" else point
    return Choice(best, candidates, options.objective, size, options.budget, point if best is not point else None)


def plan_sort(size: int, options: PlanOptions) -> CloudPlan:
    """Plan a TeraSort of ``size`` bytes (one exchange, M = P: the runner's TeraSort plan). On an
    object store the request ceilings grow with the prefix partitions the store reaches over the
    predicted time (:func:`steady_partitions`), found by predicting twice."""
    if size <= 0:
        raise ConfigError("--size must be positive, e.g. --size 100TB")
    platform, profile, tier = exchange_profile(options, size)
    profile = store_capped(profile, platform, tier)
    choice = _choose(size, profile, options)
    if options.network and profile.name in PLATFORM_OF_PROFILE:  # a cloud platform's functions: bandwidth of the chosen P's tasks through the function's token bucket, then choose again
        for _ in range(2):
            profile = networked(profile, platform, size / choice.best.workers)
            choice = _choose(size, profile, options)
    partitions = 1
    if options.prefixes is not None:
        partitions = max(1, options.prefixes)
        platform = replace(platform, storage=replace(platform.storage, initial_partitions=partitions, max_partitions=partitions))
        if partitions > 1 and tier is None:
            profile = store_capped(scaled_prefixes(profile, partitions), platform, tier)
            choice = _choose(size, profile, options)
    elif tier is None:
        partitions = steady_partitions(platform, choice.best.seconds)
        if partitions > 1:
            profile = store_capped(scaled_prefixes(profile, partitions), platform, tier)
            choice = _choose(size, profile, options)
    billed = None
    if options.accounting == "locus":
        best, billed = locus_accounting(choice.best, profile, options.phases())
        choice = replace(choice, best=best, point=None)
    elif options.accounting != "croupier":
        raise ConfigError(f"accounting must be 'croupier' or 'locus', got {options.accounting!r}")
    best = choice.best
    names = stage_names(best.plan)
    cost = exchange_cost(best, profile, platform.prices, tier, output_writes=not options.exchange_only, function_seconds=billed)
    notes = _notes(profile, tier, options, size)
    if billed is not None:
        notes.append(LOCUS_ACCOUNTING)
    if partitions > 1 and options.prefixes is not None:
        notes.append(f"{partitions} partitioned prefixes from the start (request ceilings {partitions}x one prefix's)")
    elif partitions > 1:
        notes.append(f"the object store reaches about {partitions} partitioned prefixes over the run (doubling every {platform.storage.scale_after_seconds:g} s of throttling), so request ceilings are {partitions}x one prefix's")
    exchange = PlannedExchange("sort", size, "given", choice, cost, names)
    what = "exchange" if options.exchange_only else "sort"
    return CloudPlan(f"{what} of {size / 1e12:g} TB" if size >= 1e12 else f"{what} of {size / 1e9:g} GB", platform, profile, options, (exchange,), tuple(notes))


def stage_names(plan: ExchangePlan) -> tuple[str, ...]:
    """The physical stages of a sort through ``plan``: map, "level i" per level stage (a memory
    level's: "level 3 (level 2 in memory)"), reduce."""
    names = []
    for stage in plan.stages():
        if stage.reads is None or stage.writes is None:
            names.append("map" if stage.reads is None else "reduce")
        else:
            names.append(f"level {stage.writes + 1}" + (f" (level {stage.memory + 1} in memory)" if stage.memory is not None else ""))
    return tuple(names)


#: What :func:`locus_accounting` assumes, as plans and bench/papers.py print it.
LOCUS_ACCOUNTING = (
    "Locus' accounting (Locus §3.3, inferred where Table 4 needs it): all of a stage's functions run at once; a stage reads and writes "
    "at once (input reads pipelined with exchange writes, exchange reads with output writes), so it takes the longer of its read and "
    "write terms; no start-up or compute; functions are billed for their transfers at their bandwidth only, never while throttled"
)


def locus_accounting(prediction: Prediction, profile: StorageProfile, phases: dict[str, tuple[str, ...]] | None = None) -> tuple[Prediction, float]:
    """``prediction``'s plan timed and billed as Locus' projection (Table 4) does, from Croupier's
    own model terms (:func:`croupier.model.stage.io_term` on the plan's stage facts): each stage
    runs all its tasks at once and takes max(read term, write term) (each the larger of its
    bandwidth and request-throughput parts, at the profile's multipliers); the functions are billed
    for the bandwidth parts only (every byte moved at the per-worker bandwidth, no wait on
    throttled requests). Returns the re-timed prediction and the function-seconds to bill."""
    stages, billed = [], 0.0
    for facts in stage_facts(prediction.plan, prediction.data_bytes, phases=phases, stored=stored_ratio(profile, phases)):
        c = max(1, facts.tasks)
        read = io_term("read", facts.read_bytes, facts.reads, profile, c)
        write = io_term("write", facts.write_bytes, facts.writes, profile, c)
        read = replace(read, seconds=read.seconds * profile.read_scale)
        write = replace(write, seconds=write.seconds * profile.write_scale)
        main = max(read, write, key=lambda t: t.seconds)
        other = write if main is read else read
        why = f"{main.why}; pipelined with the {other.name} ({other.seconds:,.1f} s)"
        stages.append(StagePrediction(facts.name, (Term(main.name, main.seconds, why, main.sources),)))
        billed += io_term("read", facts.read_bytes, 0, profile, 1).seconds * profile.read_scale
        billed += io_term("write", facts.write_bytes, 0, profile, 1).seconds * profile.write_scale
    timed = Prediction(prediction.plan, prediction.data_bytes, tuple(stages), prediction.requests)
    return replace(timed, cost=selector_cost(timed, profile, concurrency=max(prediction.plan.workers, prediction.plan.producers))), billed


def _notes(profile: StorageProfile, tier: FastTier | None, options: PlanOptions, size: int) -> list[str]:
    left_out = not memory_levels(profile, options) and (options.algorithm is None or options.algorithm.endswith("+mem"))
    notes = [NO_MEMORY_LEVELS] if left_out else []
    lowest = math.ceil(size / (profile.function_memory * 0.25))
    if lowest > profile.concurrency:
        notes.append(f"P >= {lowest:,} (a quarter of each function's memory holds its data), so stages run in {math.ceil(lowest / profile.concurrency):,} waves of {profile.concurrency}")
    if tier is not None:
        notes.append(f"the whole exchange (input reads and output writes too) is timed on the {tier.name} profile; input and output requests are priced at the object store's")
        if tier.bandwidth_cap:
            notes.append(f"{tier.name}: {tier.nodes(stored_bytes(size, 1)):,} node(s) to hold the data, {tier.aggregate_bandwidth(stored_bytes(size, 1)) / 1e9:,.1f} GB/s together")
    return notes


def _choose_query(size: int, profile: StorageProfile, options: PlanOptions, senders: int | None, phases: dict[str, tuple[str, ...]]) -> Choice:
    """The selector for one exchange of a query (M = ``senders`` scan tasks, or P)."""
    return choose(
        size, profile, options.objective, options.budget, workers=options.workers, concurrency=profile.concurrency,
        max_levels=options.max_levels, algorithm=options.algorithm, senders=senders, phases=phases,
        memory_levels=memory_levels(profile, options),
    )  # fmt: skip


#: Why the cloud planner leaves memory-level plans out on a function network (see :func:`memory_levels`).
NO_MEMORY_LEVELS = (
    "memory-level plans are left out: the function network model gives every task the bandwidth of a task moving D/P bytes, "
    "and a memory level's tasks move g*D/P (their token bucket runs dry sooner), so the model would favour them wrongly"
)


def memory_levels(profile: StorageProfile, options: PlanOptions) -> bool:
    """Whether the planner weighs memory-level plans: not on a cloud platform's function network,
    whose per-task bandwidth (:func:`croupier.sim.platform.networked`) is fitted to tasks of D/P."""
    return not (options.network and profile.name in PLATFORM_OF_PROFILE)


def plan_query(query: str, tables: dict[str, str], options: PlanOptions) -> CloudPlan:
    """Plan ``query`` over tables of given sizes or real files (see :mod:`croupier.plan.cloud_query`)."""
    from croupier.plan.cloud_query import plan_query as plan

    return plan(query, tables, options)  # type: ignore[no-any-return]
