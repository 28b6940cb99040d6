"""The storage interface every other module uses: one facade over any backend.

::

    caller ──> Store ──(retry + backoff + jitter, counting, key prefix)──> Backend (local | S3)

This is the only place where storage requests are retried and counted, so every backend gets the
same fault handling and the same request accounting (see :mod:`croupier.storage.stats`).
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

from croupier.config import RetryPolicy
from croupier.errors import ObjectExists, ObjectNotFound, StorageError, TransientStorageError, VersionMismatch
from croupier.storage.backend import Backend, Buffer, ObjectInfo
from croupier.storage.location import Location
from croupier.storage.stats import BusyClock, IOStats
from croupier.storage.threads import shared_pool

if TYPE_CHECKING:
    from croupier.storage.prefetch import PrefetchCache

T = TypeVar("T")

#: Threads one store uses to fetch several byte ranges of an object at once.
RANGE_FETCH_THREADS = 8


class Store:
    """Atomic put, get, ranged get(s), head, list and batched delete, relative to a root prefix.

    State:
        backend: raw I/O under the store's root
        prefix:  key prefix this view adds (``""`` for the root itself, else ends with ``/``)
        retry:   backoff policy for transient failures
        stats:   request counters, shared by all views of one backend
    """

    def __init__(
        self,
        backend: Backend,
        retry: RetryPolicy = RetryPolicy(),
        stats: IOStats | None = None,
        prefix: str = "",
        sleep: Callable[[float], None] = time.sleep,
        prefetch: PrefetchCache | None = None,
        clock: BusyClock | None = None,
    ) -> None:
        self.backend = backend
        self.clock = clock if clock is not None else BusyClock()
        self.prefetch = prefetch
        self.retry = retry
        self.stats = stats if stats is not None else IOStats()
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._sleep = sleep

    @property
    def url(self) -> str:
        """URL of this view's root (without credentials), for messages."""
        return f"{self.backend.url}/{self.prefix[:-1]}" if self.prefix else self.backend.url

    @property
    def location(self) -> Location:
        """This view's root as a location."""
        root = self.backend.location
        return root.join(self.prefix) if self.prefix else root

    def sub(self, prefix: str) -> Store:
        """Return a view rooted at ``prefix`` below this one; it shares backend and counters."""
        return Store(self.backend, self.retry, self.stats, self.prefix + prefix.strip("/"), self._sleep, self.prefetch, self.clock)

    def put(self, key: str, data: Buffer | Sequence[Buffer]) -> None:
        """Store ``data`` (one buffer, or a list/tuple of parts to concatenate) at ``key`` atomically.

        Any object with the buffer protocol (bytes, memoryview, numpy arrays, pyarrow buffers)
        counts as one buffer.
        """
        parts = _parts(data)
        size = sum(p.nbytes for p in parts)
        self._run("PUT", key, lambda: self.backend.put(self.prefix + key, parts), lambda _: size)

    def put_create(self, key: str, data: Buffer | Sequence[Buffer]) -> str:
        """Store ``data`` at ``key`` only if no object is there (one PUT); return its version.

        Raises :class:`ObjectExists` if one is. A retry after a create whose answer was lost
        finds the object there: that counts as success only if the stored bytes are exactly ours.
        """
        parts = _parts(data)
        tries = [0]

        def create() -> str:
            tries[0] += 1
            try:
                return self.backend.put_create(self.prefix + key, parts)
            except ObjectExists:
                if tries[0] > 1:
                    mine = self._ours(key, parts)
                    if mine is not None:
                        return mine
                raise

        return self._conditional(key, create, parts)

    def put_replace(self, key: str, data: Buffer | Sequence[Buffer], version: str) -> str:
        """Replace the object at ``key`` only if its version is ``version`` (one PUT); return the
        new version. Raises :class:`VersionMismatch` otherwise. A retry after a replace whose
        answer was lost counts as success only if the stored bytes are exactly ours."""
        parts = _parts(data)
        tries = [0]

        def replace() -> str:
            tries[0] += 1
            try:
                return self.backend.put_replace(self.prefix + key, parts, version)
            except VersionMismatch:
                if tries[0] > 1:
                    mine = self._ours(key, parts)
                    if mine is not None:
                        return mine
                raise

        return self._conditional(key, replace, parts)

    def _conditional(self, key: str, call: Callable[[], str], parts: Sequence[memoryview]) -> str:
        """Run a conditional PUT; one whose condition failed was answered, so it is counted too."""
        try:
            return self._run("PUT", key, call, lambda _: sum(p.nbytes for p in parts))
        except (ObjectExists, VersionMismatch):
            self.stats.record("PUT", 0)
            raise

    def _ours(self, key: str, parts: Sequence[memoryview]) -> str | None:
        """The version of the object at ``key`` if it holds exactly ``parts`` (else None)."""
        try:
            info = self.backend.head(self.prefix + key)
            stored = self.backend.get(self.prefix + key)
        except ObjectNotFound:
            return None
        if memoryview(stored).tobytes() != b"".join(parts) or info.version is None:
            return None
        return info.version

    def get(self, key: str) -> Buffer:
        """Return the whole object at ``key``."""
        hit = self._prefetched(key, None, None)
        if hit is not None:
            return hit
        return self._run("GET", key, lambda: self.backend.get(self.prefix + key), _nbytes)

    def get_range(self, key: str, start: int, end: int) -> Buffer:
        """Return bytes [start, end) of the object at ``key`` (one ranged GET)."""
        if start < 0 or end < start:
            raise StorageError(f"invalid byte range [{start}, {end}) for {self.url}/{key}")
        hit = self._prefetched(key, start, end)
        if hit is not None:
            return hit
        return self._run("GET_RANGE", key, lambda: self.backend.get_range(self.prefix + key, start, end), _nbytes)

    def _prefetched(self, key: str, start: int | None, end: int | None) -> Buffer | None:
        """Bytes look-ahead prefetch already fetched for this request (counted as the request).
        A prefetch that failed transiently counts as a failed attempt of this request: one retry,
        as :meth:`_attempts` counts one (the caller then sends the request itself)."""
        if self.prefetch is None:
            return None
        with self.clock:  # waiting for a fetch still in flight is waiting on storage, as the request would be
            fetched = self.prefetch.take(self.backend.url, self.prefix + key, start, end)
        if fetched is None:
            return None
        if fetched.data is None:
            self.stats.record_retry(fetched.kind)
            return None
        self.stats.record(fetched.kind, _nbytes(fetched.data), seconds=fetched.seconds)
        self.stats.record_prefetched(fetched.kind, fetched.seconds)
        return fetched.data

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer]:
        """Return several byte ranges of one object, fetched concurrently (one ranged GET each)."""
        if len(ranges) <= 1:
            return [self.get_range(key, s, e) for s, e in ranges]
        return list(shared_pool("range", RANGE_FETCH_THREADS).map(lambda r: self.get_range(key, r[0], r[1]), ranges))

    def open_local(self, key: str) -> int | None:
        """A read-only file descriptor of the object at ``key`` when the backend keeps objects as
        files on this machine (counted as one OPEN request, retried like any), else None. The
        caller closes it, and records the bytes it reads with :meth:`record_local_read`."""
        if type(self.backend).open_local is Backend.open_local:
            return None
        return self._run("OPEN", key, lambda: self.backend.open_local(self.prefix + key), lambda _: 0)

    def record_local_read(self, nbytes: int) -> None:
        """Count ``nbytes`` read in place from a file :meth:`open_local` opened (``READ_LOCAL``: not
        a request to the store, so not in ``bytes_read``, which the storage model prices)."""
        self.stats.record("READ_LOCAL", nbytes, requests=0)

    def head(self, key: str) -> ObjectInfo:
        """Return the key, size and version of one object."""
        info = self._run("HEAD", key, lambda: self.backend.head(self.prefix + key), lambda _: 0)
        return ObjectInfo(key, info.size, info.version)

    def exists(self, key: str) -> bool:
        """Whether an object is stored at ``key`` (one HEAD)."""
        try:
            self.head(key)
        except ObjectNotFound:
            return False
        return True

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """All objects whose key starts with ``prefix``, sorted by key (one LIST per page)."""
        pages = self._run("LIST", prefix, lambda: self.backend.list_pages(self.prefix + prefix), lambda _: 0)
        self.stats.record("LIST", requests=len(pages) - 1)  # _run counted the first page
        cut = len(self.prefix)
        return [ObjectInfo(o.key[cut:], o.size, o.version) for page in pages for o in page]

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` (one COPY request and, on S3, one DELETE).

        Retried as a whole: a retry after a move that happened but lost its answer finds ``src``
        gone and ``dst`` in place, which counts as done.
        """

        def move() -> None:
            try:
                self.backend.rename(self.prefix + src, self.prefix + dst)
            except ObjectNotFound:
                self.backend.head(self.prefix + dst)  # already moved by an earlier try?

        self._run("COPY", src, move, lambda _: 0)

    def delete(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` in batches (one DELETE request per batch); missing keys are ignored."""
        batch = self.backend.delete_batch
        for i in range(0, len(keys), batch):
            chunk = [self.prefix + k for k in keys[i : i + batch]]
            self._run("DELETE", chunk[0], lambda c=chunk: self.backend.delete(c), lambda _: 0)

    def delete_prefix(self, prefix: str = "") -> int:
        """Delete every object under ``prefix``; return how many there were."""
        keys = [o.key for o in self.list(prefix)]
        self.delete(keys)
        self.backend.purge_partial(self.prefix + prefix)
        return len(keys)

    def close(self) -> None:
        """Release the backend's connections (the range-fetch threads are the process's, shared)."""
        self.backend.close()

    def _run(self, kind: str, key: str, call: Callable[[], T], size_of: Callable[[T], int]) -> T:
        """Run one request, retrying transient failures with exponential backoff and full jitter;
        the whole of it, back-off included, counts as time waiting on storage (``clock``)."""
        with self.clock:
            return self._attempts(kind, key, call, size_of)

    def _attempts(self, kind: str, key: str, call: Callable[[], T], size_of: Callable[[T], int]) -> T:
        policy = self.retry
        for attempt in range(1, policy.attempts + 1):
            started = time.perf_counter()
            try:
                result = call()
            except ObjectNotFound:
                self.stats.record_miss(kind)
                raise
            except TransientStorageError as exc:
                if attempt == policy.attempts:
                    raise StorageError(f"{kind} {self.url}/{key} still failing after {attempt} attempts: {exc}; {_advice(exc)}") from exc
                self.stats.record_retry(kind)
                delay = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
                self._sleep(random.uniform(0, delay))
                continue
            self.stats.record(kind, size_of(result), seconds=time.perf_counter() - started)
            return result
        raise AssertionError("unreachable: RetryPolicy.attempts must be >= 1")


def _advice(exc: BaseException) -> str:
    """What to do about a request that kept failing: a store that refuses connections is not
    running where the URL says; anything else is most often an overloaded one."""
    text = str(exc).lower()
    if "connection refused" in text or "error 111" in text or "failed to connect" in text or "name or service not known" in text:
        return "nothing answers at that address: check that the store is running and the URL (host, port) is right"
    return "the store may be overloaded: lower the concurrency or retry later"


def _parts(data: Buffer | Sequence[Buffer]) -> list[memoryview]:
    """``data`` as a list of flat byte views (one buffer, or a list/tuple of parts)."""
    raw = data if isinstance(data, (list, tuple)) else [data]
    return [_byte_view(p) for p in raw]


def _byte_view(buf: Buffer) -> memoryview:
    """A flat unsigned-byte view of any buffer (numpy arrays, pyarrow buffers use other formats)."""
    view = memoryview(buf)
    if view.format == "B" and view.ndim == 1:
        return view
    return view.cast("B") if view.nbytes else memoryview(b"")


def _nbytes(buf: Buffer) -> int:
    return memoryview(buf).nbytes
