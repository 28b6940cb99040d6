"""Cloud platforms: what a function platform and its stores do beyond a storage profile.

A :class:`Platform` names the storage profile the models use (``profile``), today's prices (each
with its source and date), the store's per-prefix request-rate limits and how it scales a prefix
up, the function's network as a token bucket, invocation and start-up delays, stragglers, the
speculation policy, and the fast tiers one may put the exchange on (S3 Express One Zone,
ElastiCache). Shipped platforms are JSON files in ``croupier/sim/platforms/``; the planner
(:mod:`croupier.plan.cloud`) and the simulator (:mod:`croupier.sim.engine`) read them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from croupier import shipped
from croupier.errors import ConfigError
from croupier.model.profile import Curve, Prices, StorageProfile


#: Exchange objects a cloud task writes at once (its writer threads), unless its platform says otherwise.
WRITE_STREAMS = 8


@dataclass(frozen=True)
class StoreLimits:
    """Per-prefix request rates (S3: a partitioned prefix), prefix scale-up and retry backoff."""

    put_rate: float = 3500.0
    get_rate: float = 5500.0
    initial_partitions: int = 1
    max_partitions: int = 64
    scale_after_seconds: float = 30.0  # throttled this long, the store doubles the partitions
    get_latency: float = 0.025
    put_latency: float = 0.040
    backoff_base: float = 0.05
    backoff_cap: float = 2.0
    aggregate_bandwidth: float = 0.0  # bytes/s the whole store moves at most, all functions together (0: no limit)


@dataclass(frozen=True)
class Network:
    """A function's network as a token bucket: ``burst_bytes`` at the burst rate, then sustained.

    ``by_memory``: (function memory in bytes, bytes/s) points where a function's bandwidth
    depends on its memory (Lambda in 2018, Locus Fig. 2); :meth:`at_memory` reads it (linear
    between points, flat beyond them) as a bucket without burst. Empty: the same for every size.
    """

    burst_bytes_per_second: float = 1.2 * 2**30
    burst_bytes: float = 300 * 2**20
    sustained_bytes_per_second: float = 75 * 2**20
    by_memory: tuple[tuple[float, float], ...] = ()

    def at_memory(self, memory: float) -> Network:
        """The network of a function of ``memory`` bytes (itself when bandwidth does not depend on memory)."""
        if not self.by_memory:
            return self
        memories, rates = zip(*sorted(self.by_memory))
        rate = float(np.interp(memory, memories, rates))  # linear between points, flat beyond them
        return Network(rate, 0.0, rate)


@dataclass(frozen=True)
class Invocation:
    """How functions get started: a driver's invocation rate, per-invocation latency, cold start;
    from ``two_level_from`` functions on, two-level invocation (Lambada §3.2)."""

    driver_rate: float = 250.0
    worker_rate: float = 250.0
    latency: float = 0.05
    cold_start: float = 0.25
    two_level_from: int = 256


@dataclass(frozen=True)
class Stragglers:
    """Each task is a straggler with ``probability``; a straggler runs ``slowdown`` times slower."""

    probability: float = 0.01
    slowdown: float = 2.0


@dataclass(frozen=True)
class Speculation:
    """Once ``after_fraction`` of a stage's tasks are done, a task running ``factor`` times the
    median task time gets a backup copy; the first copy to finish counts."""

    after_fraction: float = 0.9
    factor: float = 1.5


@dataclass(frozen=True)
class FastTier:
    """A store the exchange may use instead of the object store, and how it is billed.

    ``bandwidth_cap``: aggregate bytes/s of one node (0: no cap), ``node_bytes``: memory of one
    node (nodes = intermediate bytes / node_bytes), ``node_second``: USD per node-second;
    ``capacity_gb_second``: USD per stored GB-second; requests and transfer in USD per request / GB.
    """

    name: str
    profile: str
    bandwidth_cap: float = 0.0
    capacity_gb_second: float = 0.0
    node_bytes: float = 0.0
    node_second: float = 0.0
    read_request: float = 0.0
    write_request: float = 0.0
    transfer_gb: float = 0.0
    source: str = ""

    def nodes(self, stored_bytes: float) -> int:
        """Nodes needed to hold ``stored_bytes`` (0 for a tier billed by capacity)."""
        if self.node_bytes <= 0:
            return 0
        return max(1, -(-int(stored_bytes) // int(self.node_bytes)))

    def aggregate_bandwidth(self, stored_bytes: float) -> float:
        """Bytes/s the tier moves at most when holding ``stored_bytes`` (0: no cap)."""
        return self.bandwidth_cap * max(1, self.nodes(stored_bytes)) if self.bandwidth_cap else 0.0


@dataclass(frozen=True)
class Platform:
    """A function platform with its store (see the module docstring)."""

    name: str
    profile: str
    source: str
    prices: Prices
    storage: StoreLimits = StoreLimits()
    network: Network = Network()
    invocation: Invocation = Invocation()
    stragglers: Stragglers = Stragglers()
    speculation: Speculation = Speculation()
    concurrency: int = 1000
    fast_tiers: dict[str, FastTier] = field(default_factory=dict)
    #: exchange objects one task writes at once
    write_streams: int = WRITE_STREAMS
    #: requests take the storage profile's time (see :class:`croupier.sim.engine.ProfileIO`: the
    #: model's request curves, bandwidths and read/write multipliers) instead of ``storage``'s
    #: latencies and rate limits and ``network``'s bucket: a store this machine calibrated
    io_from_profile: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Platform:
        data = dict(data)
        tiers = {k: FastTier(name=k, **v) for k, v in data.pop("fast_tiers", {}).items()}
        return cls(
            name=data["name"],
            profile=data["profile"],
            source=data.get("source", ""),
            prices=Prices(**data["prices"]),
            storage=StoreLimits(**data.get("storage", {})),
            network=_network(data.get("network", {})),
            invocation=Invocation(**data.get("invocation", {})),
            stragglers=Stragglers(**data.get("stragglers", {})),
            speculation=Speculation(**data.get("speculation", {})),
            concurrency=int(data.get("concurrency", 1000)),
            fast_tiers=tiers,
            write_streams=int(data.get("write_streams", WRITE_STREAMS)),
            io_from_profile=bool(data.get("io_from_profile", False)),
        )

    @classmethod
    def load(cls, name_or_path: str) -> Platform:
        """A platform file, or a shipped one by name (aws-lambda, ibm-cf)."""
        return shipped.load_shipped(name_or_path, "croupier.sim", "platforms", "platform", cls.from_dict)

    def at_memory(self, memory: float) -> Platform:
        """This platform for functions of ``memory`` bytes (their network, see :meth:`Network.at_memory`)."""
        return replace(self, network=self.network.at_memory(memory))

    def tier(self, name: str) -> FastTier:
        """The fast tier ``name``, or a clear error listing the platform's tiers."""
        if name not in self.fast_tiers:
            have = ", ".join(sorted(self.fast_tiers)) or "none"
            raise ConfigError(f"platform {self.name} has no fast tier {name!r}; it has: {have}")
        return self.fast_tiers[name]


def _network(data: dict[str, Any]) -> Network:
    """A :class:`Network` from JSON (``by_memory``: [[memory bytes, bytes/s], ...])."""
    data = dict(data)
    data["by_memory"] = tuple((float(m), float(r)) for m, r in data.get("by_memory", ()))
    return Network(**data)


def platform_names() -> list[str]:
    """Names of the shipped platforms."""
    return shipped.shipped_names("croupier.sim", "platforms")


#: Which shipped platform goes with a shipped storage profile.
PLATFORM_OF_PROFILE = {"aws-s3": "aws-lambda", "aws-s3-2018": "aws-lambda-2018", "ibm-cos": "ibm-cf", "aws-s3-express": "aws-lambda", "aws-elasticache": "aws-lambda"}


def platform_for(profile: StorageProfile) -> Platform:
    """The shipped platform of a shipped cloud profile (aws-s3 -> aws-lambda); for any other
    profile (a calibrated store: local, SeaweedFS) the platform its own figures imply
    (:func:`platform_of_profile`)."""
    if profile.name in PLATFORM_OF_PROFILE:
        return Platform.load(PLATFORM_OF_PROFILE[profile.name])
    return platform_of_profile(profile)


def platform_of_profile(profile: StorageProfile) -> Platform:
    """A platform from a storage profile alone, on the model's own terms (:mod:`croupier.model.stage`),
    for simulating a store this machine calibrated (validation) or planning with a calibrated profile:

    - requests take the profile's time (``io_from_profile``): a request of s bytes keeps one stream
      busy for scale * max(1 / a(s), s / b) and the store serves at most qmax(s) / scale of them a
      second, which is the model's max(bandwidth, throughput) term with q(s, P) = min(a(s) P, qmax(s)),
      reads and writes each with their own curve, bandwidth and multiplier (no function-wide
      network bucket: the profile's bandwidths are per stream unless it says otherwise, and no 503s);
    - a task writes its exchange objects one after the other (:func:`croupier.exchange.move.write_level`;
      the model's writes have one in flight per function);
    - start-up t0 + t1 * waves: a function's first task starts t0 + t1 after the stage (cold start
      t0, invocation latency t1), every later task (a wave) t1 after the previous one ends;
    - no price beyond the profile's, no stragglers, the profile's concurrency.
    """
    return Platform(
        name=f"{profile.name} (from its profile)",
        profile=profile.name,
        source=f"derived from profile {profile.label}: {profile.source}",
        prices=profile.prices,
        storage=StoreLimits(initial_partitions=1, max_partitions=1, scale_after_seconds=1e9, get_latency=0.0, put_latency=0.0),
        network=Network(burst_bytes_per_second=math.inf, burst_bytes=0, sustained_bytes_per_second=math.inf),
        invocation=Invocation(
            driver_rate=math.inf, worker_rate=math.inf, latency=profile.wave_seconds, cold_start=profile.startup_seconds, two_level_from=10**9
        ),
        stragglers=Stragglers(probability=0.0),
        concurrency=profile.concurrency,
        write_streams=1,
        io_from_profile=True,
    )


def priced(profile: StorageProfile, platform: Platform, memory: int | None = None) -> StorageProfile:
    """``profile`` with the platform's prices, concurrency and (if given) function memory."""
    return replace(
        profile,
        prices=platform.prices,
        concurrency=platform.concurrency,
        function_memory=memory or profile.function_memory,
    )


def effective_bandwidth(net: Network, nbytes: float) -> float:
    """Average bytes/s one function moves ``nbytes`` at through a full token bucket: the burst
    rate while its tokens last, the sustained rate after (what a task's transfers average)."""
    r, burst = net.sustained_bytes_per_second, net.burst_bytes_per_second
    if nbytes <= 0 or burst <= r or net.burst_bytes <= 0:
        return r
    at_burst = net.burst_bytes * burst / (burst - r)
    seconds = nbytes / burst if nbytes <= at_burst else at_burst / burst + (nbytes - at_burst) / r
    return nbytes / seconds


def networked(profile: StorageProfile, platform: Platform, task_bytes: float) -> StorageProfile:
    """``profile`` whose per-worker read and write bandwidths are the platform network's average
    for a task moving ``task_bytes`` in and out (both directions share the function's bucket),
    for the whole function (the requests it keeps in flight share it)."""
    bw = effective_bandwidth(platform.network, 2 * task_bytes)

    def rebase(curve: Curve, old: float) -> Curve:
        # a(s) = 1 / (latency + s / b): swap the old bandwidth's share of a request's time for the new
        per = tuple(1.0 / max(1e-9, 1.0 / a - s / old + s / bw) for a, s in zip(curve.per_worker, curve.sizes))
        return Curve(curve.sizes, per, curve.ceiling)

    return replace(
        profile,
        read=rebase(profile.read, profile.read_bandwidth),
        write=rebase(profile.write, profile.write_bandwidth),
        read_bandwidth=bw,
        write_bandwidth=bw,
        network_per_function=True,  # one bucket per function: its streams share it (as the simulator's transfers do)
    )


def capped(profile: StorageProfile, bandwidth: float) -> StorageProfile:
    """``profile`` whose request ceilings also respect an aggregate ``bandwidth`` (bytes/s): at
    object size s no more than bandwidth / s requests per second (a fast tier's NIC), so the
    selector's own q(s, P) sees the cap."""
    if bandwidth <= 0:
        return profile

    def cap(curve: Curve) -> Curve:
        return Curve(curve.sizes, curve.per_worker, tuple(min(c, bandwidth / s) for c, s in zip(curve.ceiling, curve.sizes)))

    return replace(profile, read=cap(profile.read), write=cap(profile.write))
