"""Running exchange plans: the worker side of one level (write) and of the next (read).

Data at a worker between levels is a mapping ``partition -> list of record arrays`` in arrival
order (sender order, then each sender's order), never concatenated until the final receiver
sorts. Levels run as separate stages (waves): every object a stage reads was written by a finished
stage, so no task ever waits for a sender that is not running, and no deadlock is possible.
Readers still poll briefly, with backoff and a bounded time, should a store be slow to show a
fresh object; then they fail naming the missing object.

Write combining: a worker writes one object holding one segment per receiver; the task returns
the byte range of each segment, and the driver hands each receiver its range (task metadata, no
extra requests).
"""

from __future__ import annotations

import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from croupier.errors import ObjectNotFound, StorageError
from croupier.exchange.plan import ExchangePlan
from croupier.ops import segments
from croupier.storage import Store
from croupier.storage.backend import Buffer

Blocks = dict[int, list[np.ndarray]]
#: Byte ranges per written object, in receiver order; None for plain (one object per receiver).
Ranges = list[tuple[int, int]] | None

FETCH_THREADS = 8


def write_level(store: Store, plan: ExchangePlan, level: int, worker: int, blocks: Blocks, fmt: str) -> tuple[Ranges, int]:
    """Write ``worker``'s data for ``level``; return (segment byte ranges if combined, bytes written)."""
    by_receiver: dict[int, list[tuple[int, list[np.ndarray]]]] = defaultdict(list)
    for partition in sorted(blocks):
        by_receiver[plan.route(level, partition)].append((partition, blocks[partition]))
    written = 0
    for obj in plan.writes(level, worker):
        encoded = [segments.encode(by_receiver.get(plan.topology.digit(r, level), []), fmt) for r in obj.receivers]
        sizes = [segments.size(parts) for parts in encoded]
        store.put(obj.key, [buf for parts in encoded for buf in parts])
        written += sum(sizes)
        if plan.combine:
            ends = np.cumsum(sizes).tolist()
            return [(int(e - s), int(e)) for s, e in zip(sizes, ends)], written
    return None, written


def read_level(store: Store, plan: ExchangePlan, level: int, worker: int, ranges: list[tuple[int, int]] | None, fmt: str, wait: float) -> Blocks:
    """Read what ``worker`` receives after ``level``; ``ranges`` = its range in each sender's object."""
    reads = plan.reads(level, worker)

    def fetch(i: int) -> Buffer:
        read = reads[i]
        if read.ranged:
            assert ranges is not None
            return get_when_ready(store, read.key, wait, ranges[i])
        return get_when_ready(store, read.key, wait)

    blocks: Blocks = defaultdict(list)
    with ThreadPoolExecutor(min(FETCH_THREADS, len(reads))) as pool:
        # look-ahead within the task: later inputs are in flight while this one is decoded
        for read, blob in zip(reads, pool.map(fetch, range(len(reads)))):
            for partition, records in segments.decode(blob, fmt, f"{store.url}/{read.key}"):
                blocks[partition].append(records)
    return blocks


def get_when_ready(store: Store, key: str, wait: float, byte_range: tuple[int, int] | None = None) -> Buffer:
    """Get an object (or a range of it), polling with backoff for up to ``wait`` seconds if missing."""
    deadline = time.monotonic() + wait
    delay = 0.01
    while True:
        try:
            if byte_range is None:
                return store.get(key)
            return store.get_range(key, *byte_range)
        except ObjectNotFound as exc:
            if time.monotonic() >= deadline:
                raise StorageError(
                    f"waited {wait:.0f}s for exchange object {store.url}/{key}, which its sender never wrote; "
                    "the sending task failed or is still running"
                ) from exc
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)


def ranges_for(plan: ExchangePlan, level: int, worker: int, written: list[Ranges]) -> list[tuple[int, int]] | None:
    """The byte range of ``worker``'s segment in each sender's combined object at ``level``."""
    if not plan.combine:
        return None
    out = []
    for read in plan.reads(level, worker):
        sender_ranges = written[read.sender]
        assert sender_ranges is not None
        out.append(sender_ranges[plan.topology.digit(worker, level)])
    return out
