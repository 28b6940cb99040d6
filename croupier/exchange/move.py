"""The one exchange executor: writes and reads the objects of any exchange plan, for any job.

::

    producer task ──write_level(0)──> objects ──pass_level(1)──> ... ──fetch(last level)──> consumer task
                   (chunks tagged           (intermediate levels:            (chunks in bucket,
                    bucket, producer)        read, re-route, write)            producer order)

It moves opaque chunks (see :mod:`croupier.exchange.segments`): what a payload means (TeraSort
records, Arrow record batches) is the business of the operators that encode and decode it, never of
this module, so every algorithm — direct, k-level for any factorisation, write combining, broadcast
— serves sort, group-by and join alike. Levels run as separate stages (waves): every object a stage
reads was written by a finished stage, so no task ever waits for a sender that is not running. Only
eager consumers of a plain direct exchange start early; they poll, with backoff and a bounded time,
for objects still being written, then fail naming the missing object.

Write combining: a sender writes one object holding one segment per receiver (at level 1: one per
bucket); the task returns the segment boundaries, and the driver turns them into each receiver's
byte range (task metadata, no extra requests).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence, Union

from croupier.errors import ObjectNotFound, StorageError
from croupier.exchange import segments
from croupier.exchange.broadcast import BroadcastPlan
from croupier.exchange.levels import LevelsPlan
from croupier.exchange.plan import ExchangePlan
from croupier.exchange.segments import Chunk
from croupier.storage import Store
from croupier.storage.backend import Buffer
from croupier.storage.threads import shared_pool

Plan = Union[ExchangePlan, BroadcastPlan]
#: Segment boundaries of a combined object (segments + 1 offsets); None for plain objects.
Written = Union[tuple[int, ...], None]

FETCH_THREADS = 8
#: An object's buffers are joined before its write up to this size (see :func:`_gathered`).
GATHER_BYTES = 8 << 20


@dataclass(frozen=True)
class Fetch:
    """One read of an exchange object: whole (start None) or the byte range [start, end); ``url``:
    the store it is in when not the exchange's own (a sender that fell back to the slow tier)."""

    key: str
    start: int | None = None
    end: int | None = None
    url: str | None = None

    def as_input(self, url: str) -> tuple[str, str, int | None, int | None]:
        """The (store URL, key, start, end) a task declares for look-ahead prefetch."""
        return (self.url or url, self.key, self.start, self.end)


# --- writing --------------------------------------------------------------------------------------


def write_level(store: Store, plan: Plan, level: int, sender: int, chunks: Sequence[Chunk], prefix: str = "") -> tuple[Written, int]:
    """Write ``sender``'s chunks at ``level`` under key ``prefix``; return (segment boundaries if
    combined, bytes written)."""
    if isinstance(plan, BroadcastPlan):
        buffers, size = segments.encode_sized(segments.ordered(chunks))
        store.put(prefix + plan.key(level, sender), _gathered(buffers, size))
        return None, size
    routed = _route(plan, level, chunks)
    written = 0
    for obj in plan.writes(level, sender):
        if plan.combined(level):
            encoded = [segments.encode_sized(routed.get(j, ())) for j in range(plan.segments(level))]
            sizes = [n for _, n in encoded]
            store.put(prefix + obj.key, _gathered([b for e, _ in encoded for b in e], sum(sizes)))
            bounds = [0]
            for s in sizes:
                bounds.append(bounds[-1] + s)
            return tuple(bounds), bounds[-1]
        (receiver,) = obj.receivers
        buffers, size = segments.encode_sized(routed.get(plan.route(level, receiver), ()))
        store.put(prefix + obj.key, _gathered(buffers, size))
        written += size
    return None, written


def _gathered(buffers: list[Buffer], size: int) -> list[Buffer]:
    """The buffers of one object as one, when small: a write-combined object of 128 buckets is
    256 small buffers (a header and rows each), a level's object one per chunk it regroups, and
    a store takes them one by one (a local file
    wrote 256 parts in twice the time of one; S3 joins them anyway). Large ones stay apart, so
    that a local write copies nothing."""
    if len(buffers) <= 2 or size > GATHER_BYTES:
        return buffers
    return [b"".join(buffers)]


def _route(plan: ExchangePlan, level: int, chunks: Sequence[Chunk]) -> dict[int, list[Chunk]]:
    """Chunks by destination slot: the bucket at a combined level 1, else the receiver's digit."""
    out: dict[int, list[Chunk]] = defaultdict(list)
    by_bucket = plan.combined(level) and level == 0
    for chunk in segments.ordered(chunks):
        out[chunk.bucket if by_bucket else plan.route(level, plan.partition_of(chunk.bucket))].append(chunk)
    return out


# --- reading --------------------------------------------------------------------------------------


def fetches_for(plan: Plan, level: int, worker: int, written: Sequence[Written], prefix: str = "", urls: Sequence[str] = ()) -> list[Fetch]:
    """What ``worker`` reads after ``level`` (objects under key ``prefix``); ``written[s]`` = what
    sender s reported; ``urls[s]``, if given and not "", the store sender s wrote to instead of
    the exchange's (it fell back to the slow tier)."""

    def where(sender: int) -> str | None:
        return (urls[sender] or None) if sender < len(urls) else None

    if isinstance(plan, BroadcastPlan):
        return [Fetch(prefix + plan.key(level, s), url=where(s)) for s in plan.senders_of(level, worker)]
    out = []
    for read in plan.reads(level, worker):
        if not read.ranged:
            out.append(Fetch(prefix + read.key, url=where(read.sender)))
            continue
        bounds = written[read.sender]
        if bounds is None:
            raise ValueError(f"sender {read.sender} of level {level} reported no segment boundaries for {read.key}")
        out.append(Fetch(prefix + read.key, bounds[read.segment], bounds[read.segment_end], where(read.sender)))
    return out


def fetch(store: Store, fetches: Sequence[Fetch], wait: float, other: Callable[[str], Store] | None = None) -> list[Chunk]:
    """All chunks of ``fetches`` (several requests in flight; missing objects polled for ``wait`` s);
    ``other(url)`` opens the store of a fetch whose object is not in ``store``."""
    if not fetches:
        return []

    def one(f: Fetch) -> list[Chunk]:
        source = store
        if f.url is not None:
            if other is None:
                raise ValueError(f"{f.key} is in {f.url}, but no store was given to read it from")
            source = other(f.url)
        blob = get_when_ready(source, f.key, wait, None if f.start is None else (f.start, f.end or 0))
        return segments.decode(blob, f"{source.url}/{f.key}")

    if len(fetches) == 1:
        return one(fetches[0])
    return [c for chunks in shared_pool("fetch", FETCH_THREADS).map(one, fetches) for c in chunks]


def pass_level(store: Store, plan: Plan, level: int, worker: int, fetches: Sequence[Fetch], wait: float, prefix: str = "", other: Callable[[str], Store] | None = None) -> tuple[Written, int]:
    """An intermediate level's task: receive what level ``level - 1`` sent, pass it on at ``level``
    (writing under key ``prefix``)."""
    return write_level(store, plan, level, worker, fetch(store, fetches, wait, other), prefix)


def pass_memory_level(store: Store, plan: LevelsPlan, level: int, task: int, fetches: Sequence[Sequence[Fetch]], wait: float, prefix: str = "", other: Callable[[str], Store] | None = None) -> list[tuple[Written, int]]:
    """A memory level's task (MinFlow): receive what level ``level - 1`` sent to each member of the
    task's group (``fetches[i]``: member i's reads), move every chunk to the member whose digit
    ``level`` is its partition's (in memory, no request), and write each member's objects of level
    ``level + 1`` under key ``prefix``; per member, in digit order: (written, bytes)."""
    members = plan.members(level, task)
    received: dict[int, list[Chunk]] = defaultdict(list)
    for chunk in fetch(store, [f for member in fetches for f in member], wait, other):  # (every member's reads in flight together)
        received[plan.topology.digit(plan.partition_of(chunk.bucket), level)].append(chunk)
    return [write_level(store, plan, level + 1, member, received.get(i, []), prefix) for i, member in enumerate(members)]


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
