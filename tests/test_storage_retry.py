"""Transient failures are retried with backoff in the Store; permanent ones are not."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Sequence

import pytest

from croupier.config import Config, RetryPolicy, S3Options
from croupier.errors import ObjectNotFound, StorageError, TransientStorageError
from croupier.storage import Store, open_store
from croupier.storage.backend import Buffer
from croupier.storage.local import LocalBackend


class FlakyBackend(LocalBackend):
    """The real local backend, failing the first ``failures`` calls of each operation transiently."""

    def __init__(self, root: Path, failures: int) -> None:
        super().__init__(root)
        self.failures = failures
        self.calls: dict[str, int] = {}

    def _maybe_fail(self, op: str) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1
        if self.calls[op] <= self.failures:
            raise TransientStorageError(f"503 SlowDown on {op}")

    def put(self, key: str, parts: Sequence[Buffer]) -> None:
        self._maybe_fail("put")
        super().put(key, parts)

    def get(self, key: str) -> Buffer:
        self._maybe_fail("get")
        return super().get(key)


def test_transient_failures_are_retried_and_counted(tmp_path: Path) -> None:
    delays: list[float] = []
    store = Store(FlakyBackend(tmp_path, failures=2), RetryPolicy(attempts=4, base_delay=0.1, max_delay=1), sleep=delays.append)
    store.put("k", b"v")
    assert bytes(store.get("k")) == b"v"
    assert store.stats.requests("PUT") == 1 and store.stats.kinds["PUT"].retries == 2
    assert store.stats.retries == 4
    assert len(delays) == 4 and all(0 <= d <= 0.2 for d in delays)  # full jitter under 0.1 * 2**(n-1)


def test_retries_give_up_with_a_clear_error(tmp_path: Path) -> None:
    store = Store(FlakyBackend(tmp_path, failures=10), RetryPolicy(attempts=3, base_delay=0.001), sleep=lambda s: None)
    with pytest.raises(StorageError, match="PUT .*/k still failing after 3 attempts.*lower the concurrency"):
        store.put("k", b"v")


def test_missing_objects_are_not_retried(tmp_path: Path) -> None:
    backend = FlakyBackend(tmp_path, failures=0)
    store = Store(backend, RetryPolicy(attempts=5), sleep=lambda s: None)
    with pytest.raises(ObjectNotFound):
        store.get("absent")
    assert backend.calls["get"] == 1 and store.stats.retries == 0


def test_s3_connection_refused_is_transient_and_retried() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    config = Config(s3=S3Options(endpoint=f"http://127.0.0.1:{port}", allow_http=True, anonymous=True), retry=RetryPolicy(attempts=2, base_delay=0.001), request_timeout=5)
    store = open_store("s3://bucket/x", config)
    with pytest.raises(StorageError, match="still failing after 2 attempts") as info:
        store.get("k")
    assert isinstance(info.value.__cause__, TransientStorageError)
    assert store.stats.kinds["GET"].retries == 1


class SlowRangeBackend(LocalBackend):
    """The real local backend, each ranged read taking ``delay`` seconds."""

    def __init__(self, root: Path, delay: float) -> None:
        super().__init__(root)
        self.delay = delay

    def get_range(self, key: str, start: int, end: int) -> Buffer:
        import time

        time.sleep(self.delay)
        return super().get_range(key, start, end)


def test_busy_clock_is_the_union_of_request_intervals(monkeypatch: pytest.MonkeyPatch) -> None:
    from croupier.storage import stats as stats_module

    now = [0.0]
    monkeypatch.setattr(stats_module.time, "perf_counter", lambda: now[0])
    clock = stats_module.BusyClock()
    clock.enter()  # request A: 0 .. 3
    now[0] = 1.0
    clock.enter()  # request B: 1 .. 2, inside A
    now[0] = 2.0
    clock.exit()
    assert clock.seconds() == 2.0  # A still in flight: counted up to now
    now[0] = 3.0
    clock.exit()
    now[0] = 10.0  # idle: not counted
    clock.enter()  # request C: 10 .. 11.5
    now[0] = 11.5
    clock.exit()
    assert clock.seconds() == 4.5


def test_concurrent_range_reads_count_once_as_waiting_time(tmp_path: Path) -> None:
    """Eight ranges fetched at once wait about one request's time, not eight (issue 15: summed
    request seconds exceeded the phase's wall time and the fit set its compute to zero)."""
    from croupier.storage.stats import BusyClock

    clock = BusyClock()
    store = Store(SlowRangeBackend(tmp_path, delay=0.2), clock=clock)
    store.put("k", bytes(800))
    ranges = [(i * 100, (i + 1) * 100) for i in range(8)]
    assert [len(bytes(b)) for b in store.get_ranges("k", ranges)] == [100] * 8
    summed = store.stats.kinds["GET_RANGE"].seconds
    assert summed >= 8 * 0.2
    assert 0.2 <= clock.seconds() < summed / 2
    view = store.sub("other")  # views of the store share the clock
    view.put("k", bytes(10))
    view.get_range("k", 0, 10)
    assert clock.seconds() >= 0.4


def test_waiting_for_a_prefetch_in_flight_counts_as_waiting_on_storage(tmp_path: Path) -> None:
    """A task that asks for an input look-ahead prefetch is still fetching waits on storage as if
    it had fetched it itself; counted as compute, that wait made query stages' exchange reads look
    several times costlier per byte than the calibration's (issue 15)."""
    from croupier.storage.prefetch import PrefetchCache
    from croupier.storage.stats import BusyClock

    backend = SlowRangeBackend(tmp_path, delay=0.3)
    Store(backend).put("k", bytes(100))
    cache = PrefetchCache(1 << 20)
    cache.prepare("next", [(backend.url, "k", 0, 100)], lambda url: backend)
    clock = BusyClock()
    store = Store(backend, prefetch=cache, clock=clock)
    assert len(bytes(store.get_range("k", 0, 100))) == 100
    assert store.stats.kinds["GET_RANGE"].prefetched == 1, "served by the prefetch, not fetched again"
    assert clock.seconds() >= 0.2


def _pool_in_child(queue: "object") -> None:
    from croupier.storage.threads import shared_pool

    queue.put(list(shared_pool("test", 2).map(lambda x: x * 2, [1, 2, 3])))  # type: ignore[attr-defined]


def test_shared_pools_are_one_per_process_and_work_after_a_fork() -> None:
    """Requests in flight share the process's pools (a pool per task cost ~2 ms of thread starts);
    a forked worker, whose parent's threads did not survive the fork, gets its own."""
    import multiprocessing

    from croupier.storage.threads import shared_pool

    pool = shared_pool("test", 2)
    assert shared_pool("test", 2) is pool and shared_pool("other", 2) is not pool
    assert list(pool.map(lambda x: x + 1, [1, 2])) == [2, 3]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_pool_in_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=30) == [2, 4, 6]
    finally:
        child.join(timeout=30)
    assert child.exitcode == 0
