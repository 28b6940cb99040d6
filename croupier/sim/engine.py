"""A discrete-event simulator of exchange plans on a cloud platform.

It runs the stages of an :class:`~croupier.exchange.plan.ExchangePlan` (producers, levels 2..k,
consumers, as :meth:`~croupier.exchange.plan.ExchangePlan.stages` lists them; one after the
other, as the DAG runner does) with the objects and request counts the
plan gives, against a :class:`~croupier.sim.platform.Platform` and a storage profile:

- **Stores with per-prefix rate limits.** Every request goes to the partition of its key's prefix
  (crc32 of the key modulo the partitions). A partition admits ``get_rate`` GETs and ``put_rate``
  PUTs per second (a token bucket holding one second's worth); a request it cannot admit gets a
  503 and is retried after exponential backoff with jitter. A store throttled for
  ``scale_after_seconds`` doubles its partitions (S3 splitting a hot prefix), up to
  ``max_partitions``.
- **Functions' network as a token bucket**: ``burst_bytes`` at the burst rate, then the sustained
  rate; transfers of one function share it (first come, first served).
- **Invocation**: a driver invokes functions at ``driver_rate`` per second, each taking
  ``latency`` plus a ``cold_start`` for a function's first task; from ``two_level_from`` functions
  on, the first wave is started by two-level invocation (the driver starts about sqrt(C)
  functions, each of which starts about sqrt(C) more; Lambada §3.2).
- **Stragglers**: each task is slowed by ``slowdown`` with ``probability``; **speculation**: once
  ``after_fraction`` of a stage's tasks are done, a task running longer than ``factor`` times the
  median gets a backup copy and finishes with whichever copy ends first.
- **A fast tier's bandwidth cap**: all transfers to and from the tier share one link of that many
  bytes per second.
- **A store this machine calibrated** (a platform with ``io_from_profile``, see
  :func:`croupier.sim.platform.platform_of_profile`): requests take the storage profile's time
  instead (:class:`ProfileIO`: the model's request curves, per-stream bandwidths and read/write
  multipliers), so the simulator and the model (:mod:`croupier.model.stage`) share their inputs.

Compute per task is the model's (:func:`croupier.model.stage.kind_seconds` of the stage's facts,
:func:`croupier.model.perf.stage_facts`, over its tasks), and a function's first task also pays
the model's first-touch term. On a calibrated store's platform a stage ends the profile's
imbalance (the model's ``g``) times one task's work after its last simulated task: simulated tasks
are equal, real ones are not (a cloud platform's stragglers and speculation model that instead).

Scale: a stage's C = min(tasks, concurrency) function slots are simulated as at most
``max_slots`` slots, each standing for ``weight`` identical ones (its requests count ``weight``
times against the rate limits and the tier's link); a task's requests are simulated in at most
``quantum`` batches, each standing for k requests issued one after the other on one stream.
Small plans are simulated request by request (weight 1, batches of one request).

Deterministic: every random draw comes from one ``random.Random(seed)`` in a fixed order.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Generator, Iterable

from croupier.errors import ConfigError
from croupier.exchange.move import FETCH_THREADS
from croupier.exchange.plan import ExchangePlan
from croupier.model.perf import SORT_PHASES, stage_facts, stored_ratio
from croupier.model.profile import StorageProfile
from croupier.model.stage import first_touch_seconds, kind_seconds
from croupier.sim.platform import WRITE_STREAMS, Network, Platform, StoreLimits
#: Where a task's time goes, in the order the summary prints it.
PARTS = ("invocation", "read", "compute", "write", "backoff")


# --- the scheduler ---------------------------------------------------------------------------
Process = Generator[Any, Any, None]


@dataclass
class Join:
    """Wait for ``count`` spawned processes; the waiting process resumes when the last ends."""

    count: int
    waiter: Process | None = None


class Scheduler:
    """A heap of (time, sequence, process): processes yield an absolute time to sleep until, or a
    :class:`Join` to wait for children."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Process]] = []
        self._seq = 0
        self.events = 0

    def spawn(self, proc: Process, at: float, join: Join | None = None) -> None:
        self._push(at, self._wrap(proc, join))

    def _wrap(self, proc: Process, join: Join | None) -> Process:
        yield from proc
        if join is not None:
            join.count -= 1
            if join.count == 0 and join.waiter is not None:
                self._push(self.now, join.waiter)

    def _push(self, at: float, proc: Process) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, proc))

    def run(self) -> None:
        while self._heap:
            at, _, proc = heapq.heappop(self._heap)
            self.now = max(self.now, at)
            self.events += 1
            try:
                signal = next(proc)
            except StopIteration:
                continue
            if isinstance(signal, Join):
                if signal.count == 0:
                    self._push(self.now, proc)
                else:
                    signal.waiter = proc
            else:
                self._push(max(self.now, float(signal)), proc)


# --- network and stores ----------------------------------------------------------------------
class NetworkBucket:
    """One function's network: send at the burst rate while the bucket holds tokens (bytes),
    refilled at the sustained rate up to ``burst_bytes``; transfers queue first come, first served."""

    def __init__(self, net: Network) -> None:
        self.net = net
        self.tokens = float(net.burst_bytes)
        self.last = 0.0
        self.free = 0.0

    def transfer(self, start: float, nbytes: float) -> float:
        """When ``nbytes`` handed over at ``start`` have gone through."""
        start = max(start, self.free)
        r, burst = self.net.sustained_bytes_per_second, self.net.burst_bytes_per_second
        self.tokens = min(float(self.net.burst_bytes), self.tokens + r * max(0.0, start - self.last))
        if burst <= r or self.tokens <= 0:
            seconds = nbytes / r
            self.tokens = 0.0 if burst > r else self.tokens
        else:
            at_burst = self.tokens * burst / (burst - r)  # bytes sent before the bucket runs dry
            if nbytes <= at_burst:
                seconds = nbytes / burst
                self.tokens -= nbytes * (burst - r) / burst
            else:
                seconds = at_burst / burst + (nbytes - at_burst) / r
                self.tokens = 0.0
        self.last = self.free = start + seconds
        return self.free


class Store:
    """An object store's (or tier's) request admission: per-partition token buckets of requests,
    503s, scale-up, and an optional shared bandwidth link."""

    def __init__(self, name: str, limits: StoreLimits, bandwidth_cap: float = 0.0) -> None:
        self.name = name
        self.limits = limits
        self.partitions = max(1, limits.initial_partitions)
        self.tokens: dict[tuple[str, int], float] = {}
        self.updated: dict[tuple[str, int], float] = {}
        self.throttled_since: float | None = None
        self.last_throttle = -math.inf
        self.throttles = 0
        self.requests = {"GET": 0.0, "PUT": 0.0}
        self.bandwidth_cap = bandwidth_cap
        self.link_free = 0.0
        self.server_free = {"GET": 0.0, "PUT": 0.0}

    def rate(self, op: str) -> float:
        return self.limits.get_rate if op == "GET" else self.limits.put_rate

    def admit(self, now: float, key: str, op: str, count: float) -> bool:
        """Admit ``count`` requests of ``op`` on ``key`` now, or throttle them (503)."""
        part = (op, zlib.crc32(key.encode()) % self.partitions)
        rate = self.rate(op)
        tokens = min(rate, self.tokens.get(part, rate) + rate * (now - self.updated.get(part, now)))
        self.updated[part] = now
        if tokens >= count or (tokens >= rate and count > rate):
            self.tokens[part] = tokens - count
            self.requests[op] += count
            if now - self.last_throttle > self.limits.scale_after_seconds:
                self.throttled_since = None
            return True
        self.tokens[part] = tokens
        self.throttles += 1
        self._throttled(now)
        return False

    def take(self, now: float, key: str, op: str, count: float) -> float:
        """Admit what the partition can of ``count`` requests now (a batch stands for many
        requests: those beyond the tokens get 503s); returns how many were admitted."""
        part = (op, zlib.crc32(key.encode()) % self.partitions)
        rate = self.rate(op)
        tokens = min(rate, self.tokens.get(part, rate) + rate * (now - self.updated.get(part, now)))
        self.updated[part] = now
        admitted = min(count, max(0.0, math.floor(tokens)))
        self.tokens[part] = tokens - admitted
        self.requests[op] += admitted
        if admitted < count:
            self.throttles += 1
            self._throttled(now)
        elif now - self.last_throttle > self.limits.scale_after_seconds:
            self.throttled_since = None
        return admitted

    def _throttled(self, now: float) -> None:
        if self.throttled_since is None or now - self.last_throttle > self.limits.scale_after_seconds:
            self.throttled_since = now
        self.last_throttle = now
        if now - self.throttled_since >= self.limits.scale_after_seconds and self.partitions < self.limits.max_partitions:
            self.partitions = min(self.limits.max_partitions, self.partitions * 2)
            self.tokens.clear()
            self.updated.clear()
            self.throttled_since = now

    def serve(self, op: str, start: float, seconds: float) -> float:
        """When the store, serving ``op`` requests one at a time at its ceiling, is done with
        requests handed over at ``start`` that take ``seconds`` of its time (first come, first served)."""
        self.server_free[op] = max(self.server_free[op], start) + seconds
        return self.server_free[op]

    def link(self, start: float, nbytes: float) -> float:
        """When ``nbytes`` starting at ``start`` have passed the shared link (``start`` if no cap)."""
        if not self.bandwidth_cap:
            return start
        self.link_free = max(self.link_free, start) + nbytes / self.bandwidth_cap
        return self.link_free


class ProfileIO:
    """Request times of a calibrated store, on the model's terms (:func:`croupier.model.stage.io_term`):
    a request of s bytes keeps its stream busy for scale * max(1 / a(s), s / b) (one in flight: the
    curve's per-worker rate, the profile's per-stream bandwidth) and takes scale / qmax(s) of the
    store's time (its ceiling), so n requests from F streams take about
    scale * max(n / q(s, F), bytes / (b F)), the model's read or write term. ``scale`` is the
    profile's read or write multiplier."""

    def __init__(self, profile: StorageProfile) -> None:
        self.profile = profile

    def seconds(self, op: str, size: float) -> tuple[float, float]:
        """(seconds a stream is busy, seconds of the store's time) for one ``op`` request of ``size`` bytes."""
        p = self.profile
        curve, bandwidth, scale = (p.read, p.read_bandwidth, p.read_scale) if op == "GET" else (p.write, p.write_bandwidth, p.write_scale)
        busy = max(1.0 / curve.q(size, 1.0), size / bandwidth if bandwidth > 0 else 0.0)
        return scale * busy, scale / curve.q(size, math.inf)


# --- what tasks do ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Batch:
    """``count`` requests of ``nbytes`` in all to ``key`` on one stream (a request when count = 1)."""

    key: str
    count: int
    nbytes: float


@dataclass(frozen=True)
class TaskIO:
    """What one task of a stage reads and writes, on which store, with how many streams."""

    reads: tuple[Batch, ...]
    read_store: str
    read_streams: int
    compute_seconds: float
    writes: tuple[Batch, ...]
    write_store: str
    write_streams: int = WRITE_STREAMS
    representative: bool = False  # keys stand for every task's own (salted per task for the prefix hash)
    first_touch: float = 0.0  # seconds of fresh memory a function's first task touches (later tasks reuse it)


@dataclass(frozen=True)
class StageSpec:
    """A stage: its name, its tasks' work (one :class:`TaskIO` per task)."""

    name: str
    tasks: tuple[TaskIO, ...]


def batches(keys: list[str], sizes: list[float], quantum: int) -> tuple[Batch, ...]:
    """``keys`` (with their byte sizes) in at most ``quantum`` batches of consecutive requests."""
    if not keys:
        return ()
    per = max(1, math.ceil(len(keys) / max(1, quantum)))
    return tuple(Batch(keys[i], len(keys[i : i + per]), float(sum(sizes[i : i + per]))) for i in range(0, len(keys), per))


def sort_stages(
    plan: ExchangePlan, data_bytes: int, profile: StorageProfile, quantum: int = 64, exact_limit: int = 20000, fast: bool = False, exchange_only: bool = False, write_streams: int = WRITE_STREAMS
) -> list[StageSpec]:
    """The stages of a TeraSort through ``plan``: producers read D/M of input and write level 1;
    levels 2..k regroup (a memory level's P / g group tasks read and write their members'
    objects); consumers read level k and write D/P of output. Objects and keys are
    the plan's own (:meth:`ExchangePlan.writes`, :meth:`ExchangePlan.reads`) when the plan has
    at most ``exact_limit`` objects per level, else each task's counts with representative keys.
    Compute per task is the model's compute of the stage (:func:`croupier.model.stage.kind_seconds`
    of :func:`croupier.model.perf.stage_facts`) over its tasks; a function's first task adds the
    model's first-touch seconds. ``write_streams``: exchange objects a task writes at once. ``fast``:
    the exchange objects live on the fast tier. ``exchange_only``: the exchange in isolation (no
    input read, no output write; compute of partitioning and regrouping only)."""
    d = float(data_bytes)
    counts = plan.counts(data_bytes)
    exact = all(c.objects <= exact_limit and c.gets + c.ranged_gets <= exact_limit * 4 for c in counts)
    tier = "fast" if fast else "store"
    kinds_of = {role: tuple(k for k in kinds if not exchange_only or k.startswith("write:exchange") or k == "regroup") for role, kinds in SORT_PHASES.items()}
    stored = stored_ratio(profile, kinds_of)
    facts = stage_facts(plan, data_bytes, phases=kinds_of, stored=stored)
    stages = []
    for i, stage in enumerate(plan.stages()):
        first, last = stage.reads is None, stage.writes is None
        name = "map" if first else ("reduce" if last else f"level {stage.writes + 1}")
        tasks_n = stage.tasks
        per_task = d / tasks_n
        per_byte, per_call = kind_seconds(facts[i], profile)
        compute = (sum(per_byte.values()) + sum(per_call.values())) / max(1, facts[i].tasks)
        touch = first_touch_seconds(facts[i], profile)
        tasks = []
        for t in range(tasks_n if exact else 1):
            members = plan.members(stage.memory, t) if stage.memory is not None else [t]  # (a memory level: its group's workers)
            if first:
                reads, rstore, rstreams = (() if exchange_only else (Batch(f"input/part-{t:06d}", 1, per_task),)), "store", 1
            else:
                fetched = counts[stage.reads].gets + counts[stage.reads].ranged_gets
                rkeys = [r.key for w in members for r in plan.reads(stage.reads, w)] if exact else _rep_keys(stage.reads, fetched, tasks_n)
                rsize = d * stored / max(1, fetched)
                reads = batches(rkeys, [rsize] * len(rkeys), quantum)
                rstore, rstreams = tier, min(FETCH_THREADS, len(rkeys))
            if last:
                writes, wstore = (() if exchange_only else (Batch(f"output/part-{t:06d}", 1, per_task),)), "store"
            else:
                wkeys = [o.key for w in members for o in plan.writes(stage.writes, w)] if exact else _rep_keys(stage.writes, counts[stage.writes].puts, tasks_n)
                wsize = d * stored / max(1, counts[stage.writes].puts)
                writes, wstore = batches(wkeys, [wsize] * len(wkeys), quantum), tier
            tasks.append(TaskIO(reads, rstore, rstreams, compute, writes, wstore, max(1, min(write_streams, sum(b.count for b in writes))), not exact, touch))
        if not exact:
            tasks = tasks * tasks_n
        stages.append(StageSpec(name, tuple(tasks)))
    return stages


def _rep_keys(level: int, requests: int, tasks: int) -> list[str]:
    """Representative keys of one task's requests at ``level`` when the plan is too large to list."""
    per = max(1, round(requests / tasks))
    return [f"l{level}/s{j:05d}/r{j % 97:05d}" for j in range(per)]


# --- the simulation ---------------------------------------------------------------------------
@dataclass
class TaskRecord:
    """When a simulated task (slot's task) started and ended, and where its time went."""

    stage: str
    invoked: float
    start: float
    end: float
    parts: dict[str, float] = field(default_factory=dict)
    straggler: bool = False
    weight: float = 1.0
    touch: float = 0.0  # of its compute, the first-touch seconds (a function's first task)

    @property
    def work(self) -> float:
        """Seconds it read, computed and wrote, first touch aside: what the model's imbalance scales."""
        return self.parts.get("read", 0.0) + self.parts.get("compute", 0.0) + self.parts.get("write", 0.0) - self.touch


@dataclass
class SimResult:
    """One simulated run: makespan, stage ends, per-task records, store counters."""

    seconds: float
    stages: dict[str, tuple[float, float]]
    tasks: list[TaskRecord]
    throttles: dict[str, int]
    partitions: dict[str, int]
    requests: dict[str, dict[str, float]]
    speculated: int
    events: int

    def breakdown(self) -> dict[str, float]:
        """Share of all task time (weighted) per part of :data:`PARTS`."""
        totals = {p: 0.0 for p in PARTS}
        for t in self.tasks:
            for p, v in t.parts.items():
                totals[p] += v * t.weight
        whole = sum(totals.values()) or 1.0
        return {p: v / whole for p, v in totals.items()}


@dataclass(frozen=True)
class SimSettings:
    """Scale knobs: simulated slots per stage at most, batches per task phase at most."""

    max_slots: int = 200
    quantum: int = 32
    speculation: bool = True


class Simulation:
    """Run :class:`StageSpec` s one after the other on a platform (see the module docstring)."""

    def __init__(
        self,
        platform: Platform,
        seed: int = 0,
        concurrency: int | None = None,
        fast_cap: float = 0.0,
        fast_limits: StoreLimits | None = None,
        settings: SimSettings = SimSettings(),
        profile: StorageProfile | None = None,
    ) -> None:
        if platform.io_from_profile and profile is None:
            raise ConfigError(f"platform {platform.name} takes request times from a storage profile: pass the profile to the simulation")
        self.platform = platform
        self.io = ProfileIO(profile) if platform.io_from_profile and profile is not None else None
        # a calibrated store's imbalance (the model's g); a cloud platform's own stragglers model it
        self.imbalance = profile.imbalance if platform.io_from_profile and profile is not None else 0.0
        self.rng = random.Random(seed)
        self.concurrency = concurrency or platform.concurrency
        self.settings = settings
        self.stores = {"store": Store("store", platform.storage, platform.storage.aggregate_bandwidth)}
        if fast_limits is not None or fast_cap:
            self.stores["fast"] = Store("fast", fast_limits or platform.storage, fast_cap)
        self.sched = Scheduler()
        self.records: list[TaskRecord] = []
        self.driver_free = 0.0
        self.warm: set[int] = set()
        self.speculated = 0

    # invocation
    def _first_wave(self, slots: int, weight: float, at: float) -> list[float]:
        """When each simulated slot's first task is running (driver, or two-level invocation)."""
        inv = self.platform.invocation
        real = [min(slots * weight - 1, round(i * weight)) for i in range(slots)]
        total = max(1, round(slots * weight))
        out = []
        if total >= inv.two_level_from:
            g = max(1, math.ceil(math.sqrt(total)))
            for j in real:
                parent, child = divmod(int(j), g)
                parent_up = at + (parent + 1) / inv.driver_rate + inv.latency + inv.cold_start
                out.append(parent_up if child == 0 else parent_up + child / inv.worker_rate + inv.latency + inv.cold_start)
        else:
            for j in real:
                out.append(at + (j + 1) / inv.driver_rate + inv.latency + inv.cold_start)
        self.driver_free = max(self.driver_free, at + min(total, math.ceil(math.sqrt(total)) if total >= inv.two_level_from else total) / inv.driver_rate)
        return out

    def _invoke_next(self, now: float, weight: float) -> float:
        """A later task of a slot: the driver invokes it when the slot frees (its rate shared)."""
        inv = self.platform.invocation
        self.driver_free = max(self.driver_free, now) + weight / inv.driver_rate
        return self.driver_free + inv.latency

    # requests
    def _request(self, fn: NetworkBucket, store: Store, op: str, batch: Batch, weight: float, slow: float, parts: dict[str, float]) -> Process:
        if self.io is not None:
            yield from self._profile_request(self.io, store, op, batch, weight, slow)
            return
        limits = store.limits
        latency = (limits.get_latency if op == "GET" else limits.put_latency) * slow
        attempt = 0
        left = batch.count * weight
        while True:
            left -= store.take(self.sched.now, batch.key, op, left)
            if left <= 0:
                break
            attempt += 1
            wait = min(limits.backoff_cap, limits.backoff_base * 2 ** min(attempt, 20)) * (0.5 + self.rng.random())
            parts["backoff"] += wait
            yield self.sched.now + wait
        start = self.sched.now
        end = fn.transfer(start + latency, batch.nbytes * slow)
        end = max(end, store.link(start, batch.nbytes * weight), start + latency * batch.count)
        yield end

    def _profile_request(self, io: ProfileIO, store: Store, op: str, batch: Batch, weight: float, slow: float) -> Process:
        """``batch`` on one stream at the profile's times (:class:`ProfileIO`): its requests one after
        the other, and the store serving them (all slots' together) at its ceiling."""
        busy, served = io.seconds(op, batch.nbytes / max(1, batch.count))
        start = self.sched.now
        store.requests[op] += batch.count * weight
        yield max(start + busy * batch.count * slow, store.serve(op, start, served * batch.count * weight))

    def _phase(self, fn: NetworkBucket, store_name: str, op: str, todo: tuple[Batch, ...], streams: int, weight: float, slow: float, parts: dict[str, float], part: str) -> Process:
        if not todo:
            return
        start, backoff = self.sched.now, parts["backoff"]
        store = self.stores[store_name]
        streams = max(1, min(streams, len(todo)))
        join = Join(streams)
        for s in range(streams):
            self.sched.spawn(self._stream(fn, store, op, todo[s::streams], weight, slow, parts), self.sched.now, join)
        yield join
        elapsed = self.sched.now - start
        waited = min(elapsed, (parts["backoff"] - backoff) / streams)  # backoff of parallel streams, as wall time
        parts["backoff"] = backoff + waited
        parts[part] += elapsed - waited

    def _stream(self, fn: NetworkBucket, store: Store, op: str, todo: tuple[Batch, ...], weight: float, slow: float, parts: dict[str, float]) -> Process:
        for batch in todo:
            yield from self._request(fn, store, op, batch, weight, slow, parts)

    def _slot(self, stage: str, tasks: list[TaskIO], at: float, first: float, weight: float, slot: int) -> Process:
        fn = NetworkBucket(self.platform.network)
        strag = self.platform.stragglers
        invoked = at
        yield first
        for n, task in enumerate(tasks):
            if n:
                invoked = self.sched.now
                yield self._invoke_next(self.sched.now, weight)
            slow = strag.slowdown if self.rng.random() < strag.probability else 1.0
            parts = {p: 0.0 for p in PARTS}
            start = self.sched.now
            parts["invocation"] = start - invoked
            reads, writes = task.reads, task.writes
            if task.representative:  # each task's own keys: spread over the prefixes as the real ones are
                salt = f"@{slot}:{n}"
                reads = tuple(replace(b, key=b.key + salt) for b in reads)
                writes = tuple(replace(b, key=b.key + salt) for b in writes)
            yield from self._phase(fn, task.read_store, "GET", reads, task.read_streams, weight, slow, parts, "read")
            touch = (task.first_touch if n == 0 else 0.0) * slow
            compute = task.compute_seconds * slow + touch
            yield self.sched.now + compute
            parts["compute"] = compute
            yield from self._phase(fn, task.write_store, "PUT", writes, task.write_streams, weight, slow, parts, "write")
            self.records.append(TaskRecord(stage, invoked, start, self.sched.now, parts, slow > 1.0, weight, touch))

    def run_stage(self, spec: StageSpec, at: float) -> float:
        """Simulate one stage starting at ``at``; returns when its last task (or backup) ends."""
        tasks = list(spec.tasks)
        slots = max(1, min(len(tasks), self.concurrency))
        sim_slots = min(slots, self.settings.max_slots)
        weight = slots / sim_slots
        starts = self._first_wave(sim_slots, weight, at)
        before = len(self.records)
        for i in range(sim_slots):
            real = min(slots - 1, round(i * weight))
            mine = tasks[real::slots]
            self.sched.spawn(self._slot(spec.name, mine, at, starts[i], weight, i), at)
        self.sched.run()
        mine_records = self.records[before:]
        end = max(r.end for r in mine_records)
        if self.settings.speculation:
            end = self._speculate(mine_records, end)
        # unequal real tasks, which simulated ones are not: the model's imbalance term
        waves = -(-len(tasks) // slots)
        return end + self.imbalance * sum(r.work for r in mine_records) / (sim_slots * waves)

    def _speculate(self, records: list[TaskRecord], end: float) -> float:
        """Backup copies for slow tasks once most are done; the stage ends at the last first copy."""
        spec = self.platform.speculation
        if len(records) < 4:
            return end
        ends = sorted(r.end for r in records)
        trigger = ends[min(len(ends) - 1, int(spec.after_fraction * len(ends)))]
        median = statistics.median(r.end - r.start for r in records)
        inv = self.platform.invocation
        finish = 0.0
        for r in records:
            if r.end > trigger and r.end - r.start > spec.factor * median:
                backup = trigger + inv.latency + median
                if backup < r.end:
                    self.speculated += 1
                    r.end = backup
            finish = max(finish, r.end)
        return finish

    def run(self, stages: Iterable[StageSpec]) -> SimResult:
        t = 0.0
        ends: dict[str, tuple[float, float]] = {}
        for spec in stages:
            start = t
            t = self.run_stage(spec, t)
            ends[spec.name] = (start, t)
        return SimResult(
            t, ends, self.records,
            {k: s.throttles for k, s in self.stores.items()},
            {k: s.partitions for k, s in self.stores.items()},
            {k: dict(s.requests) for k, s in self.stores.items()},
            self.speculated, self.sched.events,
        )  # fmt: skip


# --- summaries for croupier plan ------------------------------------------------------------------
@dataclass(frozen=True)
class SimSummary:
    """Several simulated runs of one plan: p50/p95 completion and where the time went."""

    runs: tuple[SimResult, ...]
    plan: str

    def percentile(self, q: float) -> float:
        values = sorted(r.seconds for r in self.runs)
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]

    def breakdown(self) -> dict[str, float]:
        out = {p: 0.0 for p in PARTS}
        for r in self.runs:
            for p, v in r.breakdown().items():
                out[p] += v / len(self.runs)
        return out

    def stage_means(self) -> dict[str, float]:
        names = list(self.runs[0].stages)
        return {n: statistics.fmean(r.stages[n][1] - r.stages[n][0] for r in self.runs) for n in names}

    def render(self) -> list[str]:
        first = self.runs[0]
        lines = [f"simulated ({len(self.runs)} runs, {self.plan}): p50 {self.percentile(0.5):,.1f} s, p95 {self.percentile(0.95):,.1f} s"]
        lines.append("  stages: " + ", ".join(f"{k} {v:,.1f} s" for k, v in self.stage_means().items()))
        lines.append("  task time went to: " + ", ".join(f"{k} {v:.0%}" for k, v in self.breakdown().items()))
        lines.append(
            f"  503s: {sum(first.throttles.values()):,} (run 1), partitions reached: "
            + ", ".join(f"{k} {v}" for k, v in first.partitions.items())
            + f", backup copies: {first.speculated}"
        )
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "p50": round(self.percentile(0.5), 3),
            "p95": round(self.percentile(0.95), 3),
            "runs": [round(r.seconds, 3) for r in self.runs],
            "stages": {k: round(v, 3) for k, v in self.stage_means().items()},
            "breakdown": {k: round(v, 4) for k, v in self.breakdown().items()},
            "throttles": self.runs[0].throttles,
            "partitions": self.runs[0].partitions,
        }


def simulate_sort(plan: ExchangePlan, data_bytes: int, platform: Platform, profile: StorageProfile, seed: int = 0, fast_cap: float = 0.0, fast_limits: StoreLimits | None = None, settings: SimSettings = SimSettings(), exchange_only: bool = False) -> SimResult:
    """One simulated TeraSort (or bare exchange) through ``plan`` (see :func:`sort_stages`)."""
    sim = Simulation(platform, seed, profile.concurrency, fast_cap, fast_limits, settings, profile)
    fast = fast_limits is not None or bool(fast_cap)
    return sim.run(sort_stages(plan, data_bytes, profile, settings.quantum, fast=fast, exchange_only=exchange_only, write_streams=platform.write_streams))


def tier_limits(profile: StorageProfile, platform: Platform) -> StoreLimits:
    """A fast tier's store limits from its profile's request ceilings (one partition, no scale-up)."""
    return replace(platform.storage, get_rate=max(profile.read.ceiling), put_rate=max(profile.write.ceiling), initial_partitions=1, max_partitions=1, get_latency=0.004, put_latency=0.004)


#: Events one simulated run may take (about a second of Python per 100,000).
EVENT_BUDGET = 400_000


def auto_settings(plan: ExchangePlan, concurrency: int, budget: int = EVENT_BUDGET) -> SimSettings:
    """Slots and batches for a plan so that one run takes about ``budget`` events: all of a small
    plan's requests one by one; a large plan's in fewer, larger batches and weighted slots."""
    slots = min(200, max(1, min(plan.workers, concurrency)))
    tasks_per_slot = math.ceil(max(plan.workers, plan.producers) / max(1, min(plan.workers, concurrency)))
    per_task = budget / ((plan.levels + 1) * slots * tasks_per_slot * 2)
    return SimSettings(max_slots=slots, quantum=int(min(64, max(1, per_task))))


def simulate_plan(plan: Any, runs: int = 5, seed: int = 0, settings: SimSettings | None = None) -> SimSummary:
    """Simulate a :class:`croupier.plan.cloud.CloudPlan`'s largest exchange ``runs`` times (seeds
    seed, seed+1, ...); ``settings`` default to :func:`auto_settings`."""
    from croupier.plan.cloud import stored_bytes

    results = []
    ex = max(plan.exchanges, key=lambda e: e.data_bytes)
    best = ex.choice.best
    fast_limits = None
    cap = 0.0
    if plan.options.fast_tier:
        tier = plan.platform.tier(plan.options.fast_tier)
        fast_limits = tier_limits(plan.profile, plan.platform)
        cap = tier.aggregate_bandwidth(stored_bytes(ex.data_bytes, 1))
    settings = settings or auto_settings(best.plan, plan.profile.concurrency)
    for r in range(runs):
        results.append(simulate_sort(best.plan, ex.data_bytes, plan.platform, plan.profile, seed + r, cap, fast_limits, settings, plan.options.exchange_only))
    return SimSummary(tuple(results), f"{best.plan.name} P={best.workers}")

