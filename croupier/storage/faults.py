"""A fault-injecting backend for tests and chaos runs: throttling errors and a slow tail.

Wraps any backend. Each request, independently:

* with probability ``error_rate`` fails with a simulated ``503 SlowDown`` (a
  :class:`TransientStorageError`, which the store retries with backoff). Half of the injected
  failures of a PUT happen after the object was written (the client lost the answer), so retries
  must be idempotent;
* with probability ``slow_rate`` is ``slow_factor`` times slower than it really was (plus at least
  ``min_delay`` seconds), a straggling request;
* always takes at least ``latency`` extra seconds (a remote store's round trip on a local folder).

Enable it with ``Config(faults=FaultSpec(...))``: every store of the run, in the driver and in
the workers, is wrapped.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

from croupier.errors import ConfigError, TransientStorageError
from croupier.storage.backend import Backend, Buffer, ObjectInfo

T = TypeVar("T")


@dataclass(frozen=True)
class FaultSpec:
    """What to inject: error rate, slow-request rate and factor, extra latency (seconds)."""

    error_rate: float = 0.0
    slow_rate: float = 0.0
    slow_factor: float = 10.0
    min_delay: float = 0.005
    latency: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("error_rate", "slow_rate"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {value}")
        if self.slow_factor < 1.0 or self.latency < 0 or self.min_delay < 0:
            raise ConfigError("slow_factor must be >= 1 and latency, min_delay >= 0")


class FaultyBackend(Backend):
    """``inner`` with the faults of ``spec``; counts what it injected in ``injected``."""

    def __init__(self, inner: Backend, spec: FaultSpec, sleep: Callable[[float], None] = time.sleep) -> None:
        self.inner = inner
        self.location = inner.location
        self.spec = spec
        self.delete_batch = inner.delete_batch
        self._rng = random.Random(spec.seed)
        self._sleep = sleep
        self.injected = {"errors": 0, "slow": 0}

    @property
    def url(self) -> str:
        return self.inner.url

    def _call(self, op: str, key: str, fn: Callable[[], T], write: bool = False) -> T:
        fail = self._rng.random() < self.spec.error_rate
        after = write and fail and self._rng.random() < 0.5
        slow = self._rng.random() < self.spec.slow_rate
        if fail and not after:
            self.injected["errors"] += 1
            raise TransientStorageError(f"injected fault: 503 SlowDown on {op} {self.url}/{key}")
        started = time.perf_counter()
        result = fn()
        took = time.perf_counter() - started
        delay = self.spec.latency
        if slow:
            self.injected["slow"] += 1
            delay += max(self.spec.min_delay, (self.spec.slow_factor - 1) * took)
        if delay:
            self._sleep(delay)
        if after:
            self.injected["errors"] += 1
            raise TransientStorageError(f"injected fault: 503 SlowDown after {op} {self.url}/{key} (the write happened)")
        return result

    def put(self, key: str, parts: Sequence[Buffer]) -> None:
        self._call("PUT", key, lambda: self.inner.put(key, parts), write=True)

    def put_create(self, key: str, parts: Sequence[Buffer]) -> str:
        return self._call("PUT", key, lambda: self.inner.put_create(key, parts), write=True)

    def put_replace(self, key: str, parts: Sequence[Buffer], version: str) -> str:
        return self._call("PUT", key, lambda: self.inner.put_replace(key, parts, version), write=True)

    def get(self, key: str) -> Buffer:
        return self._call("GET", key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, end: int) -> Buffer:
        return self._call("GET_RANGE", key, lambda: self.inner.get_range(key, start, end))

    def head(self, key: str) -> ObjectInfo:
        return self._call("HEAD", key, lambda: self.inner.head(key))

    def list_pages(self, prefix: str) -> list[list[ObjectInfo]]:
        return self._call("LIST", prefix, lambda: self.inner.list_pages(prefix))

    def rename(self, src: str, dst: str) -> None:
        self._call("COPY", src, lambda: self.inner.rename(src, dst), write=True)

    def delete(self, keys: Sequence[str]) -> None:
        self._call("DELETE", keys[0] if keys else "", lambda: self.inner.delete(keys), write=True)

    def purge_partial(self, prefix: str, contains: str = "") -> None:
        self.inner.purge_partial(prefix, contains)

    def subfolders(self, prefix: str) -> list[str]:
        return self.inner.subfolders(prefix)

    def close(self) -> None:
        self.inner.close()
