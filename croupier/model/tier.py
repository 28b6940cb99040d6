"""The fast tier's model (Locus §3.3, Table 3) and the tier choice of one exchange.

A fast tier (Redis, ElastiCache, S3 Express One Zone beside S3 Standard) is described by a
:class:`FastTierProfile`: its request throughput q_f (all functions together), the bandwidth one
function gets to it (b) and the server-side cap (b_f), its capacity, and its prices (memory per
GB-hour, requests or transferred units). An exchange of S bytes in R requests over P functions
takes, per Table 3 of Locus,

* fast tier:  T = 2 · max(R / q_f, S / b_eff),   b_eff = min(b · P, b_f)
* slow tier:  T = 2 · max(R / q_s, S / (b_s · P))  (q_s and b_s from the slow store's profile)

(the factor 2: every byte is written once and read once), and for the hybrid multi-round exchange
(Locus §3.4, Table 3's third row; :class:`croupier.exchange.hybrid.HybridPlan`) of R = S / r rounds
of r bytes, with the request counts of the plan instead of Locus' (S/w)² form:

* T_fb = r / b_eff,  T_sb = r / (b_s · P),  T_sq = R_s,round / q_s,  T_fq = R_f,round / q_f
* T_rnd = 2 · max(T_fb, T_sb, T_sq, T_fq)   (a round: written to and read from the fast tier, its
  runs written to the slow tier; T_fq is not in Locus, whose fast tier is never request-bound)
* T_mrg = max(R_s,merge / q_s, S / (b_s · P))  (the final read of the R runs per consumer; Locus'
  merge also writes the merged data back, its factor 2 — here the consumers read the runs directly)
* T = R · T_rnd + T_mrg, with r the fast capacity the round may use (its free memory over the
  per-object overhead), rounded down to whole producers.

Cost: functions' GB-seconds for T, the
fast tier's memory for T (provisioned capacity) and its request or transfer charges; the slow
tier's request charges. :func:`choose_tier` compares both for one exchange under the run's
objective ("time": fastest within the budget, "cost": cheapest) and refuses the fast tier when
the exchange does not fit its capacity (with headroom for Redis' per-object overhead).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from croupier.config import Config
from croupier import shipped
from croupier.exchange.hybrid import HybridPlan, compact_bytes, hybrid_name, per_round_for
from croupier.exchange.plan import requests_by_tier
from croupier.model.profile import StorageProfile, profile_for

#: Bytes of fast-tier memory one stored byte takes (allocator rounding, keys, index) when the
#: profile has no measured figure (:attr:`FastTierProfile.memory_overhead`): a cautious guess.
#: Redis with glibc malloc measured 1.00 for objects of 1-64 MB on the build machine; jemalloc's
#: size classes round a large allocation up by as much as a quarter.
MEMORY_OVERHEAD = 1.3
GB = 1 << 30
#: Input bytes per exchange byte the compressed exchange encodings achieve, for estimating an
#: exchange's size before it is written: a guess (gensort records in arrow-zstd measured 3.2 on the
#: build machine; query rows vary). A wrong guess costs little: a sender that does not fit the fast
#: tier spills to the slow one (see croupier.dag.task.write).
COMPRESSION_GUESS = {"arrow-zstd": 2.0, "arrow-lz4": 1.5}


@dataclass(frozen=True)
class FastTierProfile:
    """Figures of one fast tier (see the module docstring); ``source`` and ``date`` say where
    every figure comes from (a price page, a calibration run)."""

    name: str
    source: str
    date: str
    request_rate: float  # q_f: requests/s all functions together get
    function_bandwidth: float  # b: bytes/s one function moves to or from the fast tier
    server_bandwidth: float  # b_f: bytes/s the fast tier moves at most (its NICs / one server's CPU)
    capacity: int  # bytes of memory for objects
    usd_per_gb_hour: float = 0.0  # memory, per GB-hour (provisioned or stored)
    usd_per_million_requests: float = 0.0  # request charges (S3 Express: writes and reads averaged)
    usd_per_gb_transferred: float = 0.0  # transfer charges (ElastiCache Serverless ECPUs, S3 Express beyond 512 KB)
    notes: dict[str, str] = field(default_factory=dict)
    #: bytes of memory one stored byte takes once written (measured by ``croupier calibrate``:
    #: the memory its objects free on deletion, over their bytes); writes in flight are apart
    #: (:func:`in_flight`)
    memory_overhead: float = MEMORY_OVERHEAD

    def __post_init__(self) -> None:
        if not self.memory_overhead >= 1.0:
            raise ValueError(f"fast-tier profile {self.name!r}: memory_overhead must be at least 1 (bytes of memory per stored byte), got {self.memory_overhead}")

    def effective_bandwidth(self, workers: int) -> float:
        """b_eff = min(b · P, b_f)."""
        return min(self.function_bandwidth * max(1, workers), self.server_bandwidth)

    def exchange_seconds(self, nbytes: float, requests: float, workers: int) -> float:
        """Locus Table 3, fast row: 2 · max(R / q_f, S / b_eff)."""
        return 2 * max(requests / self.request_rate, nbytes / self.effective_bandwidth(workers))

    def exchange_cost(self, nbytes: float, requests: float, seconds: float, held: float | None = None) -> float:
        """USD of the fast tier for one exchange: ``held`` bytes of memory (default: its capacity)
        for ``seconds``, requests, transfer."""
        memory = (self.capacity if held is None else held) / GB * self.usd_per_gb_hour * seconds / 3600
        return memory + requests * self.usd_per_million_requests / 1e6 + 2 * nbytes / GB * self.usd_per_gb_transferred

    def fits(self, nbytes: float, free: float | None = None) -> bool:
        """Whether an exchange of ``nbytes`` fits (``free``: bytes the server has free now)."""
        return nbytes <= self.usable(free)

    def usable(self, free: float | None = None) -> float:
        """Exchange bytes the fast tier can hold now: its capacity (or ``free``, if less) over the
        per-object overhead — the largest round r of a hybrid exchange."""
        return self.room(free) / self.memory_overhead

    def room(self, free: float | None = None) -> float:
        """Bytes of memory an exchange may take now: the capacity, or ``free`` if less."""
        return self.capacity if free is None else min(self.capacity, free)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FastTierProfile:
        return cls(**data)

    @classmethod
    def load(cls, path_or_name: str | Path) -> FastTierProfile:
        """A fast-tier profile file, or a shipped one by name (see :func:`shipped_tiers`)."""
        return shipped.load_shipped(path_or_name, "croupier.model", "tiers", "fast-tier profile", cls.from_dict)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")


def shipped_tiers() -> list[str]:
    """Names of the shipped fast-tier profiles."""
    return shipped.shipped_names("croupier.model", "tiers")


def slow_exchange_seconds(profile: StorageProfile, nbytes: float, requests: float, workers: int) -> float:
    """Locus Table 3, slow row: 2 · max(R / q_s, S / (b_s · P)), q_s at the exchange's object size."""
    size = nbytes / max(1.0, requests)
    q = min(profile.write.q(size, workers), profile.read.q(size, workers))
    bandwidth = min(profile.read_bandwidth, profile.write_bandwidth) * max(1, workers)
    return 2 * max(requests / q, nbytes / bandwidth)


@dataclass(frozen=True)
class TierCandidate:
    """One tier's prediction for one exchange (``round_bytes``, ``per_round``: the hybrid's r and
    producers per round; ``dominant``: the term that sets the time)."""

    tier: str
    seconds: float
    cost: float
    fits: bool = True
    round_bytes: int = 0
    per_round: int = 0
    dominant: str = ""

    @property
    def label(self) -> str:
        """"slow", "fast" or "hybrid r=256MiB"."""
        return f"hybrid r={compact_bytes(self.round_bytes)}" if self.tier == "hybrid" and self.round_bytes else self.tier

    def describe(self) -> str:
        fit = "" if self.fits else ", does not fit"
        term = f", {self.dominant}" if self.dominant else ""
        return f"{self.label}: {self.seconds:.3f} s, ${self.cost:.6f}{term}{fit}"



@dataclass(frozen=True)
class HybridTerms:
    """Locus §3.4's terms of one hybrid exchange (seconds), and the time they give."""

    rounds: int
    round_bytes: float
    fast_bandwidth: float  # T_fb
    slow_bandwidth: float  # T_sb
    slow_requests: float  # T_sq
    fast_requests: float  # T_fq
    merge_requests: float  # T_mq
    merge_bandwidth: float  # T_mb

    @property
    def round_seconds(self) -> float:
        """T_rnd = 2 · max(T_fb, T_sb, T_sq, T_fq)."""
        return 2 * max(self.fast_bandwidth, self.slow_bandwidth, self.slow_requests, self.fast_requests)

    @property
    def merge_seconds(self) -> float:
        """T_mrg = max(T_mq, T_mb)."""
        return max(self.merge_requests, self.merge_bandwidth)

    @property
    def seconds(self) -> float:
        """R · T_rnd + T_mrg."""
        return self.rounds * self.round_seconds + self.merge_seconds

    def dominant(self) -> str:
        """The term that sets the time, by name."""
        terms = {
            "fast-tier bandwidth (T_fb)": self.rounds * 2 * self.fast_bandwidth,
            "slow-tier bandwidth (T_sb)": self.rounds * 2 * self.slow_bandwidth + self.merge_bandwidth,
            "slow-tier requests (T_sq, T_mq)": self.rounds * 2 * self.slow_requests + self.merge_requests,
            "fast-tier requests (T_fq)": self.rounds * 2 * self.fast_requests,
        }
        return max(terms, key=lambda k: terms[k])


def hybrid_terms(plan: HybridPlan, nbytes: float, slow: StorageProfile, fast: FastTierProfile) -> HybridTerms:
    """The terms of ``plan`` moving ``nbytes`` (see the module docstring), counts from the plan."""
    p, rounds = plan.workers, plan.rounds
    r = nbytes * plan.per_round / plan.producers
    by_tier = plan.requests_by_tier()
    fast_round = sum(by_tier["fast"].values()) / rounds
    slow_puts = by_tier["slow"]["PUT"] / rounds  # P runs per round
    merge_gets = by_tier["slow"]["GET"] + by_tier["slow"]["GET_RANGE"]  # R · P
    run = max(1.0, nbytes / max(1, rounds * p))
    q_write, q_read = slow.write.q(run, p), slow.read.q(run, p)
    b_s = min(profile_bandwidth(slow)) * p
    return HybridTerms(
        rounds=rounds,
        round_bytes=r,
        fast_bandwidth=r / fast.effective_bandwidth(p),
        slow_bandwidth=r / b_s,
        slow_requests=slow_puts / q_write,
        fast_requests=fast_round / fast.request_rate,
        merge_requests=merge_gets / q_read,
        merge_bandwidth=nbytes / b_s,
    )


def profile_bandwidth(profile: StorageProfile) -> tuple[float, float]:
    """(read, write) bytes/s of one function to the slow store."""
    return profile.read_bandwidth, profile.write_bandwidth


def hybrid_candidate(nbytes: float, workers: int, senders: int, slow: StorageProfile, fast: FastTierProfile, free: float | None = None, writers: int = 0) -> tuple[TierCandidate, HybridPlan | None]:
    """The hybrid exchange of ``nbytes`` from ``senders`` producers to ``workers`` consumers, with
    r the largest whole number of producers' shares that fits the fast tier now (Locus: "the size
    of each round is fixed at r, the amount of space available on fast storage"), less one share
    per concurrent writer (``writers``: their writes in flight); does not fit when not even one
    producer's share does."""
    p, m_all = max(1, workers), max(1, senders)
    m = per_round_for(fast.usable(free), nbytes, m_all, writers)
    if m == 0:
        return TierCandidate("hybrid", math.inf, math.inf, False, int(fast.usable(free)), 0, "one producer's share exceeds the fast tier"), None
    r = int(nbytes * m / m_all)
    plan = HybridPlan.build(p, m_all, m, round_bytes=r)
    terms = hybrid_terms(plan, nbytes, slow, fast)
    seconds = terms.seconds
    function_usd = slow.prices.function_gb_second * slow.function_memory / GB * p
    by_tier = plan.requests_by_tier()
    slow_requests = by_tier["slow"]["PUT"] * slow.prices.write_request + (by_tier["slow"]["GET"] + by_tier["slow"]["GET_RANGE"]) * slow.prices.read_request
    fast_requests = sum(by_tier["fast"].values())
    cost = function_usd * seconds + slow_requests + fast.exchange_cost(nbytes, fast_requests, seconds, held=r * fast.memory_overhead)
    return TierCandidate("hybrid", seconds, cost, True, r, m, terms.dominant()), plan


def compare(nbytes: float, workers: int, slow: StorageProfile, fast: FastTierProfile, free: float | None = None, senders: int | None = None, writers: int = 0) -> list[TierCandidate]:
    """The three tiers' predictions for an exchange of ``nbytes`` over ``workers`` functions: slow
    and fast as one direct exchange (see :func:`_two_tiers`), hybrid as :func:`hybrid_candidate`
    from ``senders`` producers (default P)."""
    hybrid, _ = hybrid_candidate(nbytes, workers, senders or workers, slow, fast, free, writers)
    return _two_tiers(nbytes, workers, slow, fast, free, senders) + [hybrid]


def _two_tiers(nbytes: float, workers: int, slow: StorageProfile, fast: FastTierProfile, free: float | None, senders: int | None) -> list[TierCandidate]:
    """Slow and fast rows: R = 2 · P² (M = P, plain direct), or with ``senders`` M the late-bound
    write-combined exchange's M PUTs and M · P ranged GETs."""
    p = max(1, workers)
    requests = 2.0 * p * p if senders is None else float(senders * (p + 1))
    function_usd = slow.prices.function_gb_second * slow.function_memory / GB * p
    slow_s = slow_exchange_seconds(slow, nbytes, requests, p)
    slow_usd = function_usd * slow_s + requests / 2 * (slow.prices.write_request + slow.prices.read_request)
    fast_s = fast.exchange_seconds(nbytes, requests, p)
    fast_usd = function_usd * fast_s + fast.exchange_cost(nbytes, requests, fast_s)
    slow_term = "slow-tier requests" if 2 * _request_bound(slow, nbytes, requests, p) >= slow_s else "slow-tier bandwidth"
    fast_term = "fast-tier requests" if requests / fast.request_rate >= nbytes / fast.effective_bandwidth(p) else "fast-tier bandwidth"
    return [TierCandidate("slow", slow_s, slow_usd, dominant=slow_term), TierCandidate("fast", fast_s, fast_usd, fast.fits(nbytes, free), dominant=fast_term)]


def _request_bound(profile: StorageProfile, nbytes: float, requests: float, workers: int) -> float:
    """R / q_s of the slow row (its request term)."""
    size = nbytes / max(1.0, requests)
    return requests / min(profile.write.q(size, workers), profile.read.q(size, workers))


def best(candidates: list[TierCandidate], objective: str, budget: float | None) -> TierCandidate:
    """The winner: fastest (within ``budget`` if one fits it) or cheapest, among those that fit."""
    usable = [c for c in candidates if c.fits] or [c for c in candidates if c.tier == "slow"]
    if objective == "cost":
        return min(usable, key=lambda c: (c.cost, c.seconds))
    affordable = [c for c in usable if budget is None or c.cost <= budget] or usable
    return min(affordable, key=lambda c: (c.seconds, c.cost))


def fast_profile_for(config: Config) -> FastTierProfile:
    """The fast tier's profile: ``config.fast_profile`` (a file from ``croupier calibrate --store
    redis://...`` or a shipped name), else the shipped one for its kind (Redis on loopback:
    calibrated on the build machine; else AWS ElastiCache)."""
    if config.fast_profile is not None:
        return FastTierProfile.load(config.fast_profile)
    assert config.fast_tier is not None
    local = "127.0.0.1" in config.fast_tier or "localhost" in config.fast_tier
    return FastTierProfile.load("redis-loopback" if local else "aws-elasticache")


@dataclass(frozen=True)
class TierChoice:
    """The tier chosen for one exchange: ``tier`` ("slow", "fast", "hybrid"), why, and for the
    hybrid its round: ``per_round`` producers of about ``round_bytes`` exchange bytes."""

    tier: str
    why: str
    round_bytes: int = 0
    per_round: int = 0
    candidates: tuple[TierCandidate, ...] = ()
    workers: int = 0  # the hybrid's P, when the selector chose it (0: bind P as usual)
    pipelined: bool = False  # the hybrid's rounds: combiners beside the producers (HybridPlan.pipelined)
    fast_share: float = 1.0  # fast: the share of its producers expected to fit (< 1: the others spill, and levels 2..k go to the slow tier)

    @property
    def label(self) -> str:
        return hybrid_name(self.round_bytes, self.per_round, self.pipelined) if self.tier == "hybrid" else self.tier


def hybrid_variant(nbytes: float, senders: int, per_round: int, config: Config, slow_url: str | None = None, phases: dict[str, tuple[str, ...]] | None = None) -> tuple[bool, str]:
    """Whether a hybrid whose variant no search chose (forced by ``--tier hybrid``, or Locus'
    Table 3 comparison) pipelines its rounds, and why: the stage model's better of the two at
    the P it assumes (:func:`default_workers`) under ``config.objective``, with the exchange's
    phase kinds (``phases``; TeraSort's when not given). Pipelined rounds are
    shorter (the combiners fill the producers' tail and share their start-up); unpipelined ones
    send M fast-tier requests instead of M * P, which a fast tier that charges per request (S3
    Express) may make the cheaper one. ``config.pipelined``, when set, decides instead."""
    if config.pipelined is not None:
        return config.pipelined, f"{'pipelined' if config.pipelined else 'not pipelined'} (forced)"
    fast = fast_profile_for(config)
    slow = profile_for(config, slow_url or config.tmp_url or "file:///tmp")
    p = default_workers(int(nbytes), config)
    m = max(1, min(per_round, senders))
    both = {piped: predict_on_tier(HybridPlan.build(p, senders, m, round_bytes=int(nbytes * m / max(1, senders)), pipelined=piped), int(max(1.0, nbytes)), slow, fast, "hybrid", config.concurrency, phases=phases) for piped in (True, False)}
    value = (lambda x: x.seconds) if config.objective == "time" else (lambda x: x.cost)
    pipelined = value(both[True]) <= value(both[False])
    unit = "s" if config.objective == "time" else "USD"
    how = "pipelined" if pipelined else "not pipelined"
    return pipelined, f"{how} ({config.objective}: {value(both[True]):.4g} {unit} pipelined, {value(both[False]):.4g} {unit} not, at P={p})"


def exchange_estimate(estimate: int, config: Config, slow_url: str | None = None) -> int:
    """Exchange bytes of a stage reading ``estimate`` input bytes (the encodings compress)."""
    encoding = config.shuffle_encoding(slow_url or config.tmp_url or "file:///tmp")
    return int(estimate / COMPRESSION_GUESS.get(encoding, 1.0))


def choose(estimate: int | None, config: Config, slow_url: str | None = None, free: float | None = None, senders: int | None = None, allowed: tuple[str, ...] = ("slow", "fast", "hybrid")) -> TierChoice:
    """The tier for one exchange of ``estimate`` input bytes from ``senders`` producers under
    ``config`` ("auto"), among ``allowed`` (the hybrid needs a partitioned exchange)."""
    if estimate is None:
        return TierChoice("slow", "size unknown")
    estimate = exchange_estimate(estimate, config, slow_url)
    fast = fast_profile_for(config)
    slow = profile_for(config, slow_url or config.tmp_url or "file:///tmp")
    workers = default_workers(estimate, config)
    candidates = [c for c in compare(estimate, workers, slow, fast, free, senders, config.concurrency) if c.tier in allowed]
    winner = best(candidates, config.objective, config.budget)
    why = f"auto, {config.objective}, ~{estimate / (1 << 20):,.0f} MiB to move, P~{workers}: " + "; ".join(c.describe() for c in candidates)
    pipelined = winner.tier == "hybrid" and hybrid_variant(estimate, senders or workers, winner.per_round, config, slow_url)[0]
    return TierChoice(winner.tier, why, winner.round_bytes, winner.per_round, tuple(candidates), pipelined=pipelined)


def default_workers(estimate: int, config: Config) -> int:
    """P the tier model assumes before the selector binds it: the forced one, else ~sqrt(MiB)."""
    return config.workers or max(1, min(config.concurrency * 2, int(math.sqrt(max(1, estimate) / (1 << 20))) or 1))


def forced_hybrid(estimate: int | None, config: Config, senders: int, slow_url: str | None = None, free: float | None = None, phases: dict[str, tuple[str, ...]] | None = None) -> TierChoice:
    """The round of a hybrid exchange forced by ``--tier hybrid``: r = the fast tier's usable
    memory (at least one producer per round, at most half of them, so there are rounds)."""
    fast = fast_profile_for(config)
    nbytes = exchange_estimate(estimate, config, slow_url) if estimate is not None else 0
    half = max(1, (senders + 1) // 2)
    m = per_round_for(fast.usable(free), nbytes, senders, config.concurrency) if nbytes else half
    m = max(1, min(m, half))
    pipelined, how = hybrid_variant(nbytes, senders, m, config, slow_url, phases)
    return TierChoice("hybrid", f"tier forced: hybrid, {m} of {senders} producers per round, {how}", int(nbytes * m / max(1, senders)), m, pipelined=pipelined)


def choose_tier(estimate: int | None, config: Config, slow_url: str | None = None, free: float | None = None) -> tuple[str, str]:
    """("slow" | "fast", why) for one exchange of ``estimate`` bytes under ``config`` ("auto")."""
    choice = choose(estimate, config, slow_url, free, allowed=("slow", "fast"))
    return choice.tier, choice.why


# --- the tier in the per-stage model (the selector's tier x algorithm x P search) -----------------


def fast_storage_profile(slow: StorageProfile, fast: FastTierProfile, flight: float) -> StorageProfile:
    """The fast tier as a storage profile for the stage model, for ``flight`` requests in flight:
    q_f requests/s at any size, b per stream capped by the server's b_f shared by the streams
    (b_eff = min(b · C, b_f)); no read/write scale (they are fitted to the slow store)."""
    from dataclasses import replace

    from croupier.model.profile import Curve

    per_stream = min(fast.function_bandwidth, fast.server_bandwidth / max(1.0, flight))
    curve = Curve((1.0, 1e12), (fast.request_rate, fast.request_rate), (fast.request_rate, fast.request_rate))
    return replace(slow, name=fast.name, read=curve, write=curve, read_bandwidth=per_stream, write_bandwidth=per_stream, read_scale=1.0, write_scale=1.0, max_streams=0)


def level_tier(plan: Any, level: int, tier: str) -> str:
    """The tier of the objects ``plan`` writes at ``level`` when its exchange runs on ``tier``."""
    if tier == "hybrid":
        return str(plan.tier(level))
    return tier


def predict_on_tier(plan: Any, data_bytes: int, slow: StorageProfile, fast: FastTierProfile | None, tier: str, concurrency: int | None = None, producers_done: bool = False, phases: dict[str, tuple[str, ...]] | None = None, fast_share: float = 1.0, stored: float | None = None) -> Any:
    """The selector's prediction of ``plan`` with its exchange objects on ``tier``: the stages of
    :func:`croupier.model.perf.stage_facts`, their exchange reads and writes on the fast tier
    priced by :func:`fast_storage_profile` as their own terms ("fast-tier read ...", "fast-tier
    write ..."), the rest (input, output, compute, start-up) as on the slow tier; a hybrid pays
    one more start-up per round for its producers and its combiners. Cost adds the fast tier's
    memory held (its capacity, or r for the hybrid) and its request charges.

    ``fast_share`` < 1 (tier "fast" only): the exchange does not fit the fast tier whole; that
    share of its producers' objects goes there and the rest spills to the slow tier (see
    croupier.dag.task.write), so that share of its level-1 requests and bytes is priced on the
    fast tier and the rest, with every later level (which the runner then keeps on the slow tier),
    on the slow one. A spilling producer's refused first write is left out (the fast tier refuses
    it at once once full)."""
    from dataclasses import replace

    from croupier.model.perf import Prediction, cost as slow_cost, job_requests, predict, stage_facts, stored_ratio
    from croupier.model.stage import StagePrediction, Term, predict_stage

    if not 0.0 < fast_share <= 1.0 or (fast_share < 1.0 and tier != "fast"):
        raise ValueError(f"fast_share must be in (0, 1], and below 1 only on the fast tier; got {fast_share} on {tier!r}")
    if tier == "slow" or fast is None:
        return predict(plan, data_bytes, slow, concurrency, producers_done, phases, stored=stored)
    def fast_level(level: int) -> bool:  # a spilled exchange's levels 2..k go to the slow tier (croupier.dag.exchanges)
        return level_tier(plan, level, tier) == "fast" and (fast_share == 1.0 or level == 0)

    facts = stage_facts(plan, data_bytes, producers_done, phases, stored_ratio(slow, phases) if stored is None else stored)
    stages = []
    for f, stage in zip(facts, plan.stages()[1 if producers_done else 0 :]):
        writes_fast = stage.writes is not None and fast_level(stage.writes)
        fetches_fast = stage.reads is not None and fast_level(stage.reads)
        fetched = fast_share if fetches_fast else 0.0  # the share of the stage's exchange reads and writes on the fast tier
        written = fast_share if writes_fast else 0.0
        slow_part = replace(
            f,
            reads=f.reads - f.exchange_reads * fetched,
            read_bytes=f.read_bytes - f.exchange_read_bytes * fetched,
            exchange_reads=f.exchange_reads * (1.0 - fetched),
            exchange_read_bytes=f.exchange_read_bytes * (1.0 - fetched),
            writes=f.writes * (1.0 - written),
            write_bytes=f.write_bytes * (1.0 - written),
        )
        fast_part = replace(
            f,
            phases={},
            calls={},
            reads=f.exchange_reads * fetched,
            read_bytes=f.exchange_read_bytes * fetched,
            exchange_reads=f.exchange_reads * fetched,
            exchange_read_bytes=f.exchange_read_bytes * fetched,
            writes=f.writes * written,
            write_bytes=f.write_bytes * written,
        )
        slots = _round_slots(plan, tier, stage.reads, concurrency or slow.concurrency)
        full = predict_stage(slow_part, slow, concurrency, slots)
        moved = ("read",) * fetches_fast + ("write",) * writes_fast  # their slow terms are 0 when all moved: leave them out
        base = replace(full, terms=tuple(t for t in full.terms if not (t.name.startswith(moved) and not t.seconds)) if moved else full.terms)
        c = max(1, min(max(1, f.tasks), concurrency or slow.concurrency, slots or f.tasks))
        on_fast = predict_stage(fast_part, fast_storage_profile(slow, fast, c), concurrency, slots)
        # its requests, and the imbalance of unequal tasks on them (the slow part's covers the rest)
        extra = tuple(Term(f"fast-tier {t.name}", t.seconds, t.why, tuple((f"fast:{k}", v) for k, v in t.sources)) for t in on_fast.terms if t.name.startswith(("read", "write", "imbalance")) and t.seconds)
        terms = base.terms + extra
        if tier == "hybrid" and stage.reads in (None, 0) and plan.rounds > 1:  # the rounds: each its own executor call
            extra = _rounds_startup(plan, stage.reads, slow, c)
            terms += (Term("rounds start-up", extra, f"{plan.rounds} rounds of producers and of combiners", ()),)
            tails = (plan.rounds - 1) * sum(t.seconds for t in terms if t.name in ("imbalance", "fast-tier imbalance"))
            if tails:  # the imbalance is one last task's tail; each round waits out its own
                terms += (Term("rounds imbalance", tails, f"each of {plan.rounds} rounds ends with its own last task", (("imbalance", tails),)),)
        if tier == "hybrid" and plan.pipelined and stage.reads in (None, 0):  # not the consumers: they run after every round
            terms = _pipelined(terms, stage.reads)
        spread = dict(base.spread)
        total = sum(t.seconds for t in terms)
        stages.append(StagePrediction(base.name, terms, spread, slow.residual * total))
    requests = job_requests(plan)
    on_fast = {kind: n * fast_share for kind, n in requests_by_tier(plan.counts(data_bytes), lambda level: "fast" if fast_level(level) else "slow")["fast"].items()}
    on_slow = {kind: n - on_fast[kind] for kind, n in requests.items()}
    fast_requests = sum(on_fast.values())
    draft = Prediction(plan, data_bytes, tuple(stages), on_slow, tier=tier)
    held = plan.round_bytes * fast.memory_overhead if tier == "hybrid" and getattr(plan, "round_bytes", 0) else None
    usd = slow_cost(draft, slow, concurrency) + fast.exchange_cost(data_bytes * fast_share, fast_requests, draft.seconds, held)
    if tier == "hybrid" and plan.pipelined and not producers_done and stages:
        usd += _waiting_combiners(plan, stages[0].seconds, slow, concurrency)
    return Prediction(plan, data_bytes, tuple(stages), requests, usd, tier, fast_share)


def _rounds_startup(plan: HybridPlan, reads: int | None, slow: StorageProfile, c: int) -> float:
    """Start-up a hybrid's producers (``reads`` None) or combiners (0) pay beyond the stage's own
    (one call, t0, and t1 per wave of all its tasks on ``c`` functions): a call per round more,
    and the waves each round's tasks (its m producers, or P combiners) take on their own."""
    per_round = [len(plan.round_producers(j)) if reads is None else plan.workers for j in range(plan.rounds)]
    waves = sum(math.ceil(n / c) for n in per_round) - math.ceil(sum(per_round) / c)
    return slow.startup_seconds * (plan.rounds - 1) + slow.wave_seconds * waves


def _round_slots(plan: Any, tier: str, reads: int | None, concurrency: int) -> int | None:
    """The functions a hybrid's producer stage (``reads`` None) can use at once when a round has
    fewer producers than there are functions (m < c: the other functions wait for the next round,
    so rounds of one producer on 2 cores use one); else None (no limit)."""
    if tier != "hybrid" or reads is not None or not isinstance(plan, HybridPlan) or plan.per_round >= concurrency:
        return None
    return plan.per_round


def _waiting_combiners(plan: HybridPlan, producers_seconds: float, slow: StorageProfile, concurrency: int | None) -> float:
    """USD of a pipelined hybrid's combiners waiting for their round's last producers: they start
    in the producers' last wave and poll, billed, for at most one producer's time (the round's
    producer time over its waves), as many of them as there are functions."""
    c = max(1, concurrency or slow.concurrency)
    waves = max(1, math.ceil(plan.per_round / c))
    waiting = min(plan.workers, c) * producers_seconds / waves  # per round: one producer's time, over the rounds
    return waiting * slow.prices.function_gb_second * slow.function_memory / GB


def _pipelined(terms: tuple[Any, ...], reads: int | None) -> tuple[Any, ...]:
    """A pipelined hybrid's producer or combiner stage: a round's combiners start as its
    producers finish, in the same executor call, so the producers' imbalance (the tail of their
    last wave, which an unpipelined round waits out) is the combiners' time, and the combiners
    pay no start-up of their own, in any round."""
    gone = ("imbalance", "fast-tier imbalance", "rounds imbalance") if reads is None else ("start-up", "rounds start-up")
    return tuple(t for t in terms if t.name not in gone)


@dataclass(frozen=True)
class TierOptions:
    """What the selector needs to put tier candidates beside the slow ones: the fast tier's
    profile, its free bytes now, the tiers allowed for this exchange, and how many producers write
    at once (their writes in flight take fast memory too, see :func:`in_flight`)."""

    fast: FastTierProfile
    free: float | None = None
    allowed: tuple[str, ...] = ("slow", "fast", "hybrid")
    writers: int = 0
    pipelined: bool | None = None  # the hybrid's variants: both (None), or the forced one
    spill: bool = True  # producers the full fast tier refuses may write to the slow tier instead (not with eager consumers)


def tier_candidates(plans: list[Any], data_bytes: int, slow: StorageProfile, options: TierOptions, concurrency: int | None, producers_done: bool, phases: dict[str, tuple[str, ...]] | None, senders: int | None, buckets: int | None, ratio: float | None = None) -> list[Any]:
    """The fast-tier prediction of every plan (if the exchange fits; else with the producers that
    do not fit spilling to the slow tier, and levels 2..k there) and, per P, the hybrid with
    rounds r of the fast tier's usable memory in whole producers, of half and of a quarter of it
    (the fast-tier capacity to use: a smaller r holds less memory, priced per GB-hour, in more
    rounds; Locus §3.4), each pipelined and not, whenever that makes 2 rounds or more. ``ratio``:
    the stored bytes per byte of data the producers measured (else the profile's, or a guess)."""
    out = []
    fast = options.fast
    stored = data_bytes * (stored_share(slow, phases) if ratio is None else ratio)  # what the exchange's objects take on a tier
    if "fast" in options.allowed:  # every level's objects stay until the run ends, and writes in flight need room too
        fitting = [plan for plan in plans if fits_whole(fast, options.free, stored, plan, senders, options.writers)]
        out += [predict_on_tier(plan, data_bytes, slow, fast, "fast", concurrency, producers_done, phases, stored=ratio) for plan in fitting]
        if options.spill and not producers_done:
            out += _spilling(plans, fitting, data_bytes, stored, slow, options, concurrency, phases, senders)
    if "hybrid" in options.allowed:
        for p in sorted({plan.workers for plan in plans}):
            m_all = senders or p
            # a round keeps every writer's whole share in reserve (per_round_for), more than the
            # spilling fast tier's in_flight: a round that overflows costs a re-run, not a spill
            most = per_round_for(fast.usable(options.free), stored, m_all, options.writers)
            if not 1 <= most < m_all or (buckets is not None and p > buckets):  # one round: the fast tier alone
                continue
            for m in sorted({most, -(-most // 2), -(-most // 4)}, reverse=True):
                for pipelined in (True, False) if options.pipelined is None else (options.pipelined,):  # shorter rounds, or M fast requests instead of M * P
                    plan = HybridPlan.build(p, m_all, m, buckets if buckets != p else None, int(stored * m / m_all), pipelined)
                    out.append(predict_on_tier(plan, data_bytes, slow, fast, "hybrid", concurrency, producers_done, phases, stored=ratio))
    return out


def _spilling(plans: list[Any], fitting: list[Any], data_bytes: int, stored: float, slow: StorageProfile, options: TierOptions, concurrency: int | None, phases: dict[str, tuple[str, ...]] | None, senders: int | None) -> list[Any]:
    """The fast tier for plans whose exchange does not fit it whole: the producers write there
    until it is full, and the rest write to the slow tier instead (croupier.dag.task.write), so a
    share m / M of level 1 is on the fast tier, m being the producers whose objects fit with the
    writes in flight (as a hybrid round's); levels 2..k then go to the slow tier."""
    done = {id(plan) for plan in fitting}
    out = []
    for plan in plans:
        if id(plan) in done:
            continue
        share = fast_share(options.fast, options.free, stored, senders or plan.producers, options.writers, object_bytes(plan, stored, senders))
        if 0.0 < share < 1.0:
            out.append(predict_on_tier(plan, data_bytes, slow, options.fast, "fast", concurrency, False, phases, share))
    return out


def fast_share(fast: FastTierProfile, free: float | None, stored: float, senders: int, writers: int = 0, largest: float | None = None) -> float:
    """The share of ``senders`` producers whose objects (``stored`` bytes in all, one level, in
    objects of at most ``largest`` bytes; default one per producer) the fast tier holds before it
    is full, with ``writers`` producers writing at once: m / M, m the producers whose shares fit
    beside the writes in flight (:func:`in_flight`); 1 when the exchange fits whole."""
    share = max(1.0, stored / senders)
    m = int((fast.room(free) - in_flight(share, share if largest is None else largest, writers)) // (share * fast.memory_overhead))
    return max(0, min(senders, m)) / senders


def fits_whole(fast: FastTierProfile, free: float | None, stored: float, plan: Any, senders: int | None, writers: int) -> bool:
    """Whether every level ``plan`` stores (``stored`` bytes each; its objects stay until the run
    ends) fits the fast tier beside the requests in flight (:func:`in_flight`): ``writers``
    writing and as many reading (a later level's tasks, or eager consumers, read while others
    write)."""
    share = max(1.0, stored / max(1, senders or plan.producers))
    return stored * plan.stored_levels * fast.memory_overhead + in_flight(share, object_bytes(plan, stored, senders), writers, writers) <= fast.room(free)


def in_flight(share: float, largest: float, writers: int, readers: int = 0) -> float:
    """Fast-tier memory the requests in flight take beside what is stored, with ``writers``
    producers writing shares of ``share`` bytes in objects of up to ``largest`` bytes: the object
    being written (Redis holds the request in a client buffer, and the write script's copy of it,
    when it checks for room; once written, the object takes its own memory), the other writers'
    shares, half written on average, and one object per reader reading meanwhile (the reply Redis
    buffers). On the build machine (Redis capped at 512 MiB, 1 and 2 writers, shares of 95-150 MiB
    in objects of 1-105 MB; ``bench/fast_tier_fill.py``) this counted the shares that fit right in 7
    of 10 cases and one too few in the others, where counting every writer's whole share in flight
    and 1.3 bytes per stored byte counted 1-2 where 2-5 fit."""
    return largest * (1 + readers) + max(0, writers - 1) * share / 2


def object_bytes(plan: Any, stored: float, senders: int | None) -> float:
    """The largest object a producer of ``plan`` writes, about: its share of ``stored`` bytes over
    the objects it writes at level 1 (one when write-combined, one per receiver when not)."""
    producers = max(1, senders or plan.producers)
    writes = getattr(plan, "writes", None)
    count = len(writes(0, 0)) if writes is not None else 1
    return stored / producers / max(1, count)


def stored_share(slow: StorageProfile, phases: dict[str, tuple[str, ...]] | None = None) -> float:
    """Bytes an exchange's objects take per byte of its data D: the ratio the profile measured for
    the producers' write kind (zstd stores TeraSort records at about a third), else a guess from
    its codec (:data:`COMPRESSION_GUESS`), else 1. What decides whether an exchange fits the fast
    tier, and a hybrid round's size."""
    from croupier.model.perf import exchange_write_kind

    kind = exchange_write_kind(phases)
    if kind is None:
        return 1.0
    guess = next((1.0 / f for codec, f in COMPRESSION_GUESS.items() if f"-{codec}" in kind), 1.0)
    return slow.stored_ratio(kind, guess)


def from_selection(choice: Any, options: TierOptions | None = None) -> TierChoice:
    """The tier the selector's tier x algorithm x P search chose (see
    :func:`croupier.model.selector.choose` with ``tiers``), with the best candidate of each tier
    and its dominant term as the reason."""
    best_of: dict[str, Any] = {}
    for c in sorted(choice.candidates, key=lambda c: (c.seconds, c.cost) if choice.objective == "time" else (c.cost, c.seconds)):
        best_of.setdefault(c.tier, c)
    winner = choice.best
    parts = []
    for tier, c in best_of.items():
        d = c.dominant()
        spill = f" with {c.fast_share:.0%} of its producers' objects there, the others spilling to the slow tier" if c.fast_share < 1 else ""
        parts.append(f"{tier}: {c.plan.name} P={c.workers}{spill} {c.seconds:.3f} s, ${c.cost:.6f}, dominated by {d.name}")
    if options is not None:  # the tiers with no candidate, and why
        room = f"{compact_bytes(options.fast.usable(options.free))} usable"
        if "fast" in options.allowed and "fast" not in best_of:
            parts.append(f"fast: does not fit ({room})" + ("" if options.spill else "; its producers could not spill to the slow tier"))
        if "hybrid" in options.allowed and "hybrid" not in best_of:
            parts.append(f"hybrid: no round of whole producers fits or it fits in one ({room})")
    why = f"auto, {choice.objective}, ~{choice.data_bytes / (1 << 20):,.0f} MiB to move; the selector over tier x algorithm x P ({len(choice.candidates)} candidates), best of each tier: " + "; ".join(parts)
    candidates = tuple(TierCandidate(c.tier, c.seconds, c.cost, True, getattr(c.plan, "round_bytes", 0), getattr(c.plan, "per_round", 0), c.dominant().name) for c in best_of.values())
    plan = winner.plan
    if winner.tier == "hybrid":
        return TierChoice("hybrid", why, plan.round_bytes, plan.per_round, candidates, plan.workers, plan.pipelined)
    return TierChoice(winner.tier, why, candidates=candidates, fast_share=winner.fast_share)

