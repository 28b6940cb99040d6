"""The Redis store's own behaviour beyond the shared contract: a full server refuses writes with a
clear, non-retried error and keeps every object it had; a dead server fails requests within the
timeout and retry budget instead of hanging."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from croupier.config import Config, RetryPolicy
from croupier.errors import StorageError, StoreFullError
from croupier.storage import open_store
from croupier.testing import RedisServer

pytestmark = pytest.mark.redis


def test_a_full_server_refuses_writes_and_keeps_what_it_has(tmp_path: Path) -> None:
    with RedisServer(tmp_path, maxmemory=4 << 20) as server:
        server.wait_ready()
        store = open_store(server.url("full"), Config())
        written = []
        with pytest.raises(StoreFullError, match="maxmemory"):
            for i in range(64):
                store.put(f"o/{i}", bytes([i]) * (256 << 10))
                written.append(i)
        assert 0 < len(written) < 64
        assert store.stats.retries == 0  # full is not transient
        assert [o.key for o in store.list("o/")] == sorted(f"o/{i}" for i in written)
        for i in written:  # every read works on the full server
            assert bytes(store.get(f"o/{i}")) == bytes([i]) * (256 << 10)
            assert bytes(store.get_range(f"o/{i}", 10, 20)) == bytes([i]) * 10
            assert store.head(f"o/{i}").size == 256 << 10
        store.delete_prefix()  # deletes work on a full server and free it again
        store.put("again", b"x" * (256 << 10))
        assert store.head("again").size == 256 << 10


def test_a_dead_server_fails_requests_within_the_retry_budget(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        server.wait_ready()
        config = Config(request_timeout=2, retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05))
        store = open_store(server.url("dead"), config)
        store.put("k", b"v")
        server.kill()
        started = time.monotonic()
        with pytest.raises(StorageError, match="still failing after 3 attempts"):
            store.get("k")
        assert time.monotonic() - started < 30
        assert store.stats.retries == 2


def test_a_redis_that_is_not_running_is_named_as_such_not_as_overloaded() -> None:
    """A request to an address where nothing listens fails, after its retries, with advice to check
    the server and the URL (not to lower the concurrency, as for an overloaded store)."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = Config(request_timeout=2, retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02))
    with pytest.raises(StorageError, match="nothing answers at that address: check that the store is running") as caught:
        open_store(f"redis://127.0.0.1:{port}/0/x", config).put("k", b"v")
    assert "overloaded" not in str(caught.value) and str(port) in str(caught.value)
