"""Request accounting: how many requests of each kind a store made, and how many bytes they moved.

Kinds follow the S3 price sheet, which is also what the performance models count:
PUT, GET (whole object), GET_RANGE (one byte range), HEAD, LIST (one page), DELETE (one batch of up
to 1000 keys). ``retries`` counts extra attempts after transient failures, ``misses`` reads of an
object not there (yet: a reader polling for what a producer still writes); neither is in
``requests`` (which the plans' formulas give), though a store may bill both. Stats are plain data so workers can return them as task metadata and the driver can
add them up per stage.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Iterable

KINDS = ("PUT", "GET", "GET_RANGE", "HEAD", "LIST", "DELETE", "COPY")
_LOCK = threading.Lock()  # counters are updated from range-fetch threads too


@dataclass
class KindStats:
    """Counters of one request kind."""

    requests: int = 0
    bytes: int = 0
    retries: int = 0
    misses: int = 0
    seconds: float = 0.0
    prefetched: int = 0
    prefetched_seconds: float = 0.0

    def add(self, other: KindStats) -> None:
        """Add ``other``'s counters into this one."""
        self.requests += other.requests
        self.bytes += other.bytes
        self.retries += other.retries
        self.misses += other.misses
        self.seconds += other.seconds
        self.prefetched += other.prefetched
        self.prefetched_seconds += other.prefetched_seconds


@dataclass
class IOStats:
    """Counters of every request kind; mergeable and JSON-friendly.

    State:
        kinds: kind name -> counters; kinds never used are absent
    """

    kinds: dict[str, KindStats] = field(default_factory=dict)

    def record(self, kind: str, nbytes: int = 0, requests: int = 1, seconds: float = 0.0) -> None:
        """Count ``requests`` successful requests of ``kind`` that moved ``nbytes``."""
        with _LOCK:
            stats = self.kinds.setdefault(kind, KindStats())
            stats.requests += requests
            stats.bytes += nbytes
            stats.seconds += seconds

    def record_prefetched(self, kind: str, seconds: float) -> None:
        """Mark one counted request of ``kind`` as served by look-ahead prefetch (``seconds`` it took
        in the background, while the function was busy with its previous task)."""
        with _LOCK:
            stats = self.kinds.setdefault(kind, KindStats())
            stats.prefetched += 1
            stats.prefetched_seconds += seconds

    def record_retry(self, kind: str) -> None:
        """Count one retried attempt of a ``kind`` request."""
        with _LOCK:
            self.kinds.setdefault(kind, KindStats()).retries += 1

    def record_miss(self, kind: str) -> None:
        """Count one ``kind`` request for an object that was not there."""
        with _LOCK:
            self.kinds.setdefault(kind, KindStats()).misses += 1

    def misses(self, kind: str | None = None) -> int:
        """Reads of absent objects, of one kind or of all kinds."""
        if kind is not None:
            return self.kinds.get(kind, KindStats()).misses
        return sum(s.misses for s in self.kinds.values())

    def merge(self, other: IOStats) -> None:
        """Add all of ``other``'s counters into this one."""
        for kind, stats in other.kinds.items():
            self.kinds.setdefault(kind, KindStats()).add(stats)

    def requests(self, kind: str | None = None) -> int:
        """Requests of one kind, or of all kinds."""
        if kind is not None:
            return self.kinds.get(kind, KindStats()).requests
        return sum(s.requests for s in self.kinds.values())

    def bytes(self, kind: str) -> int:
        """Bytes moved by requests of ``kind``."""
        return self.kinds.get(kind, KindStats()).bytes

    @property
    def bytes_read(self) -> int:
        """Bytes fetched by GET and GET_RANGE."""
        return self.bytes("GET") + self.bytes("GET_RANGE")

    @property
    def bytes_written(self) -> int:
        """Bytes stored by PUT."""
        return self.bytes("PUT")

    @property
    def retries(self) -> int:
        """Retried attempts over all kinds."""
        return sum(s.retries for s in self.kinds.values())

    @classmethod
    def total(cls, parts: Iterable[IOStats]) -> IOStats:
        """All of ``parts`` added together (e.g. a task's channels)."""
        out = cls()
        for part in parts:
            out.merge(part)
        return out

    def snapshot(self) -> IOStats:
        """Return an independent copy."""
        return IOStats.total([self])

    def minus(self, earlier: IOStats) -> IOStats:
        """Return the counters accumulated since ``earlier`` (a snapshot of this object)."""
        delta = self.snapshot()
        for kind, stats in earlier.kinds.items():
            mine = delta.kinds.setdefault(kind, KindStats())
            mine.requests -= stats.requests
            mine.bytes -= stats.bytes
            mine.retries -= stats.retries
            mine.misses -= stats.misses
            mine.seconds -= stats.seconds
        delta.kinds = {k: v for k, v in delta.kinds.items() if v.requests or v.retries or v.bytes or v.misses}
        return delta

    def to_dict(self) -> dict[str, dict[str, float]]:
        """JSON-friendly form, kinds in canonical order."""
        order = sorted(self.kinds, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS))
        return {k: vars(self.kinds[k]).copy() for k in order}

    @classmethod
    def from_dict(cls, data: dict[str, dict[str, float]]) -> IOStats:
        """Inverse of :meth:`to_dict`."""
        return cls({k: KindStats(**v) for k, v in data.items()})  # type: ignore[arg-type]


class BusyClock:
    """Wall-clock seconds during which at least one request was in flight: the union of the
    requests' time intervals, not their sum.

    A task that fetches eight byte ranges at once for 0.1 s waited 0.1 s on storage, not 0.8 s;
    summing request seconds made a phase's "request time" exceed its wall time, so the fit read
    its compute as zero (issue 15). Shared by all of one task's stores and threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight = 0
        self._since = 0.0
        self._total = 0.0

    def enter(self) -> None:
        """A request starts."""
        with self._lock:
            if self._inflight == 0:
                self._since = time.perf_counter()
            self._inflight += 1

    def exit(self) -> None:
        """A request ends (successfully or not)."""
        with self._lock:
            self._inflight -= 1
            if self._inflight == 0:
                self._total += time.perf_counter() - self._since

    def __enter__(self) -> BusyClock:
        self.enter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.exit()

    def seconds(self) -> float:
        """Busy seconds so far, counting requests still in flight up to now."""
        with self._lock:
            return self._total + (time.perf_counter() - self._since if self._inflight else 0.0)
