"""Look-ahead prefetch (Cherry): a function fetches its next task's inputs while it runs this one.

When a function has several tasks to run in turn (P larger than the concurrency), the executor
tells it, with each task, which task it will run next and what that task will read (``Task.inputs``:
store URL, key, byte range). A few background threads fetch those objects into this cache while the
current task computes. When the next task's store asks for one of them, it gets the prefetched
bytes (waiting for a fetch still in flight rather than issuing it twice); the request is counted
in that task's report as it would have been, plus as ``prefetched``, with the seconds it took in
the background. Inputs are skipped once their known sizes pass the byte budget; anything not
prefetched is simply fetched by the task as usual.

A prefetch is one attempt, not retried. One that failed transiently (throttling, a time-out) is
counted as the store counts a failed attempt: as a retry of the task's own request, which follows
it; so the report's retries do not depend on which requests happened to be prefetched. Any other
failure (an object not written yet) is just a miss, as for the task's own request.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Sequence

from croupier.errors import TransientStorageError
from croupier.storage.backend import Backend, Buffer
from croupier.storage.threads import shared_pool

#: (store URL, key, start, end); start = end = None for a whole object.
Input = tuple[str, str, int | None, int | None]
FETCH_THREADS = 4


@dataclass(frozen=True)
class Fetched:
    """One prefetched request: the bytes (None: it failed transiently, see the module docstring),
    the request kind and how long it took."""

    data: Buffer | None
    kind: str
    seconds: float


class PrefetchCache:
    """The prefetched inputs of the next task of one worker process."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.task_id: str | None = None
        self._futures: dict[tuple[str, str, int | None, int | None], Future[Fetched | None]] = {}
        self._lock = threading.Lock()

    def prepare(self, task_id: str, inputs: Sequence[Input], backend: Callable[[str], Backend]) -> None:
        """Start fetching ``inputs`` of task ``task_id`` (dropping what an earlier plan fetched)."""
        import time

        self.clear()
        self.task_id = task_id
        total = 0
        for url, key, start, end in inputs:
            if start is not None and end is not None:
                total += end - start
                if total > self.budget:
                    break
            root = backend(url)

            def fetch(root: Backend = root, key: str = key, start: int | None = start, end: int | None = end) -> Fetched | None:
                began = time.perf_counter()
                kind = "GET" if start is None or end is None else "GET_RANGE"
                try:
                    data = root.get(key) if start is None or end is None else root.get_range(key, start, end)
                except TransientStorageError:  # a failed attempt: the task's own request is its retry
                    return Fetched(None, kind, time.perf_counter() - began)
                except Exception:  # noqa: BLE001 - any other failure is just a miss: the task fetches itself
                    return None
                return Fetched(data, kind, time.perf_counter() - began)

            with self._lock:
                self._futures[(root.url, key, start, end)] = shared_pool("prefetch", FETCH_THREADS).submit(fetch)

    def take(self, root_url: str, key: str, start: int | None, end: int | None) -> Fetched | None:
        """The prefetched bytes of this request (waiting if still in flight), or its transient
        failure (``data`` None), once; else None."""
        with self._lock:
            future = self._futures.pop((root_url, key, start, end), None)
        return None if future is None else future.result()

    def clear(self) -> None:
        """Forget everything (results still in flight are dropped when they land)."""
        with self._lock:
            self._futures.clear()
            self.task_id = None
