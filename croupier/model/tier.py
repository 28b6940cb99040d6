"""The fast tier's model (Locus §3.3, Table 3) and the tier choice of one exchange.

A fast tier (Redis, ElastiCache, S3 Express One Zone beside S3 Standard) is described by a
:class:`FastTierProfile`: its request throughput q_f (all functions together), the bandwidth one
function gets to it (b) and the server-side cap (b_f), its capacity, and its prices (memory per
GB-hour, requests or transferred units). An exchange of S bytes in R requests over P functions
takes, per Table 3 of Locus,

* fast tier:  T = 2 · max(R / q_f, S / b_eff),   b_eff = min(b · P, b_f)
* slow tier:  T = 2 · max(R / q_s, S / (b_s · P))  (q_s and b_s from the slow store's profile)

(the factor 2: every byte is written once and read once). Cost: functions' GB-seconds for T, the
fast tier's memory for T (provisioned capacity) and its request or transfer charges; the slow
tier's request charges. :func:`choose_tier` compares both for one exchange under the run's
objective ("time": fastest within the budget, "cost": cheapest) and refuses the fast tier when
the exchange does not fit its capacity (with headroom for Redis' per-object overhead).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from croupier.config import Config
from croupier.errors import ConfigError
from croupier.model.profile import StorageProfile, profile_for

#: Bytes of fast-tier memory one stored byte takes (allocator, keys, index, client buffers).
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

    def effective_bandwidth(self, workers: int) -> float:
        """b_eff = min(b · P, b_f)."""
        return min(self.function_bandwidth * max(1, workers), self.server_bandwidth)

    def exchange_seconds(self, nbytes: float, requests: float, workers: int) -> float:
        """Locus Table 3, fast row: 2 · max(R / q_f, S / b_eff)."""
        return 2 * max(requests / self.request_rate, nbytes / self.effective_bandwidth(workers))

    def exchange_cost(self, nbytes: float, requests: float, seconds: float) -> float:
        """USD of the fast tier for one exchange: capacity held for ``seconds``, requests, transfer."""
        memory = self.capacity / GB * self.usd_per_gb_hour * seconds / 3600
        return memory + requests * self.usd_per_million_requests / 1e6 + 2 * nbytes / GB * self.usd_per_gb_transferred

    def fits(self, nbytes: float, free: float | None = None) -> bool:
        """Whether an exchange of ``nbytes`` fits (``free``: bytes the server has free now)."""
        room = self.capacity if free is None else min(self.capacity, free)
        return nbytes * MEMORY_OVERHEAD <= room

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FastTierProfile:
        return cls(**data)

    @classmethod
    def load(cls, path_or_name: str | Path) -> FastTierProfile:
        """A fast-tier profile file, or a shipped one by name (see :func:`shipped_tiers`)."""
        path = Path(path_or_name)
        if path.exists():
            text = path.read_text()
        else:
            shipped = resources.files("croupier.model") / "tiers" / f"{path_or_name}.json"
            if not shipped.is_file():
                raise ConfigError(f"no fast-tier profile {path_or_name!r}; shipped: {', '.join(shipped_tiers())}")
            text = shipped.read_text()
        try:
            return cls.from_dict(json.loads(text))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"fast-tier profile {path_or_name}: not valid ({exc})") from exc

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")


def shipped_tiers() -> list[str]:
    """Names of the shipped fast-tier profiles."""
    folder = resources.files("croupier.model") / "tiers"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def slow_exchange_seconds(profile: StorageProfile, nbytes: float, requests: float, workers: int) -> float:
    """Locus Table 3, slow row: 2 · max(R / q_s, S / (b_s · P)), q_s at the exchange's object size."""
    size = nbytes / max(1.0, requests)
    q = min(profile.write.q(size, workers), profile.read.q(size, workers))
    bandwidth = min(profile.read_bandwidth, profile.write_bandwidth) * max(1, workers)
    return 2 * max(requests / q, nbytes / bandwidth)


@dataclass(frozen=True)
class TierCandidate:
    """One tier's prediction for one exchange."""

    tier: str
    seconds: float
    cost: float
    fits: bool = True

    def describe(self) -> str:
        fit = "" if self.fits else ", does not fit"
        return f"{self.tier}: {self.seconds:.3f} s, ${self.cost:.6f}{fit}"


def compare(nbytes: float, workers: int, slow: StorageProfile, fast: FastTierProfile, free: float | None = None) -> list[TierCandidate]:
    """Both tiers' predictions for a direct exchange of ``nbytes`` over ``workers`` functions
    (R = 2 · P² requests: P² objects written, P² read)."""
    p = max(1, workers)
    requests = 2.0 * p * p
    function_usd = slow.prices.function_gb_second * slow.function_memory / GB * p
    slow_s = slow_exchange_seconds(slow, nbytes, requests, p)
    slow_usd = function_usd * slow_s + requests / 2 * (slow.prices.write_request + slow.prices.read_request)
    fast_s = fast.exchange_seconds(nbytes, requests, p)
    fast_usd = function_usd * fast_s + fast.exchange_cost(nbytes, requests, fast_s)
    return [TierCandidate("slow", slow_s, slow_usd), TierCandidate("fast", fast_s, fast_usd, fast.fits(nbytes, free))]


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


def choose_tier(estimate: int | None, config: Config, slow_url: str | None = None, free: float | None = None) -> tuple[str, str]:
    """("slow" | "fast", why) for one exchange of ``estimate`` bytes under ``config`` ("auto")."""
    if estimate is None:
        return "slow", "size unknown"
    encoding = config.shuffle_encoding(slow_url or config.tmp_url or "file:///tmp")
    estimate = int(estimate / COMPRESSION_GUESS.get(encoding, 1.0))
    fast = fast_profile_for(config)
    slow = profile_for(config, slow_url or config.tmp_url or "file:///tmp")
    workers = config.workers or max(1, min(config.concurrency * 2, int(math.sqrt(max(1, estimate) / (1 << 20))) or 1))
    candidates = compare(estimate, workers, slow, fast, free)
    winner = best(candidates, config.objective, config.budget)
    why = f"auto, {config.objective}, ~{estimate / (1 << 20):,.0f} MiB to move: " + "; ".join(c.describe() for c in candidates)
    return winner.tier, why
