"""Conditional writes, the ground the writer lock stands on: create-only and replace-if-version,
on the local folder and on SeaweedFS, from threads and processes, through lost answers."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from croupier.config import Config, RetryPolicy
from croupier.errors import ObjectExists, VersionMismatch
from croupier.storage import Store, open_store
from croupier.storage.faults import FaultSpec
from tests.conftest import ALL_BACKENDS


@pytest.fixture(params=ALL_BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The contract holds on every store: the local folder, SeaweedFS and Redis."""
    return request.param  # type: ignore[no-any-return]


def test_create_only_and_versions(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    version = store.put_create("lock", b"one")
    assert store.head("lock").version == version
    with pytest.raises(ObjectExists, match="lock"):
        store.put_create("lock", b"two")
    assert bytes(store.get("lock")) == b"one"
    newer = store.put_replace("lock", [b"th", b"ree"], version)
    assert newer != version and store.head("lock").version == newer
    assert bytes(store.get("lock")) == b"three"
    with pytest.raises(VersionMismatch):
        store.put_replace("lock", b"four", version)  # stale version
    assert bytes(store.get("lock")) == b"three"
    store.delete(["lock"])
    with pytest.raises(VersionMismatch):
        store.put_replace("lock", b"five", newer)  # the object is gone
    assert not store.exists("lock")
    assert store.stats.requests("PUT") == 5  # every conditional write is one PUT, refused ones too


def test_an_unchanged_rewrite_still_changes_the_local_version(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = open_store(str(tmp_path), Config())
    first = store.put_create("k", b"same")
    second = store.put_replace("k", b"same", first)
    with pytest.raises(VersionMismatch):
        store.put_replace("k", b"same", first)
    assert store.put_replace("k", b"other", second)


def _race_create(store: Store, n: int) -> list[str]:
    barrier = threading.Barrier(n)
    won: list[str] = []

    def one(i: int) -> None:
        barrier.wait()
        try:
            store.put_create("lock", f"writer {i}".encode())
            won.append(f"writer {i}")
        except ObjectExists:
            pass

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won


def test_concurrent_creators_exactly_one_wins(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    for _ in range(5):
        won = _race_create(store, 6)
        assert len(won) == 1
        assert bytes(store.get("lock")).decode() == won[0]
        store.delete(["lock"])


def test_concurrent_replacers_of_one_version_exactly_one_wins(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    for _ in range(5):
        version = store.put_create("lock", b"base")
        barrier = threading.Barrier(6)
        won: list[int] = []

        def one(i: int) -> None:
            barrier.wait()
            try:
                store.put_replace("lock", f"writer {i}".encode(), version)
                won.append(i)
            except VersionMismatch:
                pass

        threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and bytes(store.get("lock")) == f"writer {won[0]}".encode()
        store.delete(["lock"])


def _process_writer(url: str, config: Config, barrier, versions: list[str], results) -> None:  # type: ignore[no-untyped-def]
    """Race the other processes, ``rounds`` times: first to create "lock", then to replace the
    version the round's base object has."""
    store = open_store(url, config)
    name = multiprocessing.current_process().name
    for r, version in enumerate(versions):
        for mode in ("create", "replace"):
            barrier.wait()  # the parent has set the round up
            barrier.wait()  # everybody is ready: go
            try:
                if mode == "create":
                    store.put_create(f"c{r}", name.encode())
                else:
                    store.put_replace(f"r{r}", name.encode(), version)
                results.put((mode, r, name))
            except (ObjectExists, VersionMismatch):
                results.put((mode, r, ""))


def test_concurrent_processes_exactly_one_wins(store_env: tuple[str, Config]) -> None:
    url, config = store_env
    store = open_store(url, config)
    ctx = multiprocessing.get_context("forkserver")
    rounds, n = 3, 4
    barrier, results = ctx.Barrier(n + 1), ctx.Queue()
    versions = [store.put_create(f"r{r}", b"base") for r in range(rounds)]
    procs = [ctx.Process(target=_process_writer, args=(url, config, barrier, versions, results), name=f"p{i}") for i in range(n)]
    for p in procs:
        p.start()
    try:
        outcomes = []
        for _ in range(2 * rounds):
            barrier.wait(timeout=120)
            barrier.wait(timeout=120)
            outcomes += [results.get(timeout=60) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    for mode, key in (("create", "c"), ("replace", "r")):
        for r in range(rounds):
            winners = [name for m, rr, name in outcomes if m == mode and rr == r and name]
            assert len(winners) == 1, (mode, r, outcomes)
            assert bytes(store.get(f"{key}{r}")).decode() == winners[0]


def test_retried_conditional_writes_after_lost_answers_succeed_only_with_our_bytes(store_env: tuple[str, Config]) -> None:
    """A fault injector loses half of the answers of writes that happened: the retry finds the
    object there, and succeeds because the bytes are ours; a real conflict still fails."""
    url, config = store_env
    flaky = open_store(url, config.with_(faults=FaultSpec(error_rate=0.3, seed=3)))
    flaky.retry = RetryPolicy(attempts=40, base_delay=0.001, max_delay=0.01)
    plain = open_store(url, config)
    for i in range(15):
        version = flaky.put_create(f"k{i}", b"mine")
        assert plain.head(f"k{i}").version == version
        newer = flaky.put_replace(f"k{i}", b"mine, renewed", version)
        assert plain.head(f"k{i}").version == newer and bytes(plain.get(f"k{i}")) == b"mine, renewed"
        plain.put(f"k{i}", b"someone else's")
        with pytest.raises(VersionMismatch):
            flaky.put_replace(f"k{i}", b"mine again", newer)
        with pytest.raises(ObjectExists):
            flaky.put_create(f"k{i}", b"mine")
    assert flaky.backend.injected["errors"] > 5  # type: ignore[attr-defined]


def test_create_only_without_hard_links_falls_back_to_an_exclusive_create(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import errno
    import os

    def no_links(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "hard links not supported")

    monkeypatch.setattr(os, "link", no_links)
    store = open_store(str(tmp_path), Config())
    version = store.put_create("lock", b"one")
    assert store.head("lock").version == version and bytes(store.get("lock")) == b"one"
    with pytest.raises(ObjectExists):
        store.put_create("lock", b"two")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock"]  # no temporary file left
