"""``croupier calibrate --store redis://...``: measure a fast tier and fit its model's figures
(Locus §3.3): the request throughput q_f, one function's bandwidth b, the server-side cap b_f and
the capacity; see :class:`croupier.model.tier.FastTierProfile`.

The driver measures with threads (each thread stands for one function: a Redis client spends its
time in socket I/O, so threads overlap as processes would on this machine):

* q_f: ``concurrency x 4`` threads PUT and GET 4 KiB objects for a while; requests per second;
* b:   one thread PUTs and GETs objects of 4 MiB; bytes per second (both directions);
* b_f: ``concurrency`` threads do the same at once; bytes per second of all of them together;
* capacity: the server's ``maxmemory`` (else half of this machine's memory);
* memory per stored byte: the memory each of a few objects of 3-13 MB (sizes an exchange writes,
  off the allocator's power-of-two classes) frees when deleted, over its bytes, the largest of
  them; skipped (the profile keeps :data:`~croupier.model.tier.MEMORY_OVERHEAD`) when the server
  has not twice their room free, does not report its memory, refuses the writes, or a figure is
  implausible (another client wrote or deleted at the same time).

A self-hosted server has no prices; the profile's source says where and when it was measured.
Every object written is deleted at the end.
"""

from __future__ import annotations

import os
import platform
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from croupier.config import Config
from croupier.errors import StorageError
from croupier.model.tier import MEMORY_OVERHEAD, FastTierProfile
from croupier.storage import Store, open_store
from croupier.storage.location import parse_location

SMALL = 4 << 10
LARGE = 4 << 20


def calibrate_fast_tier(url: str, config: Config, quick: bool = False, name: str | None = None) -> FastTierProfile:
    """Measure the fast tier at ``url`` and return its profile (objects under it are deleted)."""
    seconds = 1.0 if quick else 4.0
    store = open_store(parse_location(url), config).sub(f"_calibration-{uuid.uuid4().hex[:8]}")
    try:
        requests = _rate(store, SMALL, max(1, config.concurrency) * 4, seconds) / 1.0
        single = _rate(store, LARGE, 1, seconds) * LARGE
        server = _rate(store, LARGE, max(1, config.concurrency), seconds) * LARGE
        capacity = _capacity(store)
        overhead = _memory_overhead(store)
    finally:
        store.delete_prefix()
        store.close()
    when = time.strftime("%Y-%m-%d", time.gmtime())
    return FastTierProfile(
        name=name or str(parse_location(url)),
        source=f"croupier calibrate{' --quick' if quick else ''} on {platform.node()} ({os.cpu_count()} cores), "
        f"concurrency {config.concurrency}, against {parse_location(url)}; self-hosted: no prices",
        date=when,
        request_rate=requests,
        function_bandwidth=single,
        server_bandwidth=max(server, single),
        capacity=capacity,
        memory_overhead=overhead if overhead is not None else MEMORY_OVERHEAD,
    )


def _rate(store: Store, size: int, threads: int, seconds: float) -> float:
    """Requests per second ``threads`` threads achieve, each PUTting then GETting ``size`` bytes."""
    payload = os.urandom(size)
    done = [0]
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def worker(t: int) -> None:
        n = 0
        while time.perf_counter() < deadline:
            key = f"t{t}/o{n % 8}"
            store.put(key, payload)
            store.get(key)
            n += 2
        with lock:
            done[0] += n

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(worker, range(threads)))
    return done[0] / (time.perf_counter() - started)


def _capacity(store: Store) -> int:
    """The server's memory limit (maxmemory), else half of this machine's memory."""
    backend = store.backend
    free = getattr(backend, "free_memory", None)
    limit = getattr(backend, "max_memory", None)
    if limit is not None:
        value = limit()
        if value:
            return int(value)
    if free is not None and free() is not None:
        return int(free())
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)


#: Object sizes the memory measurement writes: 39 MB in all.
OVERHEAD_SIZES = (3_000_000, 5_000_000, 7_000_000, 11_000_000, 13_000_000)


def _memory_overhead(store: Store) -> float | None:
    """Bytes of server memory per stored byte (see the module docstring), or None. Deletes the
    objects of the rate measurements first, to make room; each object is deleted apart, and the
    largest of their figures is kept (an allocator rounds some sizes up more than others)."""
    store.delete_prefix()
    used = getattr(store.backend, "used_memory", None)
    free = getattr(store.backend, "free_memory", None)
    if used is None or (free is not None and (room := free()) is not None and room < 2 * sum(OVERHEAD_SIZES)):
        return None
    keys = [f"m/o{i}" for i in range(len(OVERHEAD_SIZES))]
    ratios = []
    try:
        for key, size in zip(keys, OVERHEAD_SIZES):
            store.put(key, os.urandom(size))
        for key, size in zip(keys, OVERHEAD_SIZES):
            before = used()
            store.delete([key])
            ratios.append((before - used()) / size)
    except StorageError:  # another client filled the server meanwhile: no figure
        return None
    return plausible_overhead(ratios)


def plausible_overhead(ratios: list[float]) -> float | None:
    """The memory per stored byte from per-object figures: their largest, or None when any is
    implausible (below 0.99: another client wrote while it was measured; above 2: one freed
    memory meanwhile, or the server compresses). Figures between 0.99 and 1 count as 1."""
    if not ratios or not all(0.99 <= r <= 2.0 for r in ratios):
        return None
    return max(1.0, max(ratios))


def describe_tier(profile: FastTierProfile) -> str:
    """The fitted figures, one per line."""
    return "\n".join(
        [
            f"fast tier {profile.name} ({profile.date})",
            f"  q_f  request throughput   {profile.request_rate:,.0f} requests/s",
            f"  b    one function         {profile.function_bandwidth / 1e6:,.1f} MB/s",
            f"  b_f  server cap           {profile.server_bandwidth / 1e6:,.1f} MB/s",
            f"  capacity                  {profile.capacity / (1 << 20):,.0f} MiB",
            f"  memory per stored byte    {profile.memory_overhead:.3f}",
            f"  source: {profile.source}",
        ]
    )
