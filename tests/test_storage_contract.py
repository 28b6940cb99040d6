"""One contract, three backends: every Store behaviour holds on the local folder, on SeaweedFS and on Redis."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace

import pytest

from croupier.config import Config
from croupier.errors import ConfigError, ObjectNotFound, StorageError
from croupier.storage import Location, open_store, parse_location
from tests.conftest import ALL_BACKENDS, BUCKET


@pytest.fixture(params=ALL_BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The contract holds on every store: the local folder, SeaweedFS and Redis."""
    return request.param  # type: ignore[no-any-return]


def test_put_get_roundtrip_and_parts(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    store.put("a/b/c.bin", b"hello world")
    store.put("joined", [b"ab", memoryview(b"cd"), bytearray(b"ef")])
    assert bytes(store.get("a/b/c.bin")) == b"hello world"
    assert bytes(store.get("joined")) == b"abcdef"
    store.put("empty", b"")
    assert bytes(store.get("empty")) == b""
    assert store.head("empty").size == 0


def test_overwrite_replaces_whole_object(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    store.put("k", b"x" * 1000)
    store.put("k", b"short")
    assert bytes(store.get("k")) == b"short"


def test_ranges_single_and_several(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    data = bytes(range(256)) * 40
    store.put("r", data)
    assert bytes(store.get_range("r", 10, 20)) == data[10:20]
    assert bytes(store.get_range("r", 5000, 5000)) == b""
    ranges = [(0, 1), (100, 300), (10239, 10240), (4000, 4100), (7, 9)]
    got = store.get_ranges("r", ranges)
    assert [bytes(g) for g in got] == [data[a:b] for a, b in ranges]
    with pytest.raises(StorageError, match="invalid byte range"):
        store.get_range("r", 20, 10)


def test_head_list_by_prefix_and_order(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    for key in ["p/2", "p/10", "p/1", "px", "q/1"]:
        store.put(key, key.encode())
    assert store.head("p/10").size == 4
    assert [o.key for o in store.list("p/")] == ["p/1", "p/10", "p/2"]
    assert [o.key for o in store.list("p")] == ["p/1", "p/10", "p/2", "px"]
    assert [o.key for o in store.list()] == ["p/1", "p/10", "p/2", "px", "q/1"]
    assert store.list("nothing-here/") == []
    assert {o.key: o.size for o in store.list("q")} == {"q/1": 3}


def test_sub_view_shares_counters_and_prefixes_keys(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    sub = store.sub("run/42")
    sub.put("x", b"1")
    assert [o.key for o in store.list()] == ["run/42/x"]
    assert [o.key for o in sub.list()] == ["x"]
    assert store.stats.requests("PUT") == 1


def test_delete_and_delete_prefix_batches(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    keys = [f"d/{i:04d}" for i in range(1005)]
    for key in keys:
        store.put(key, b"")
    store.put("keep", b"k")
    store.delete(["d/0000", "d/does-not-exist"])
    assert not store.exists("d/0000")
    before = store.stats.requests("DELETE")
    assert store.delete_prefix("d/") == 1004
    assert store.stats.requests("DELETE") - before == 2  # 1004 keys = batches of 1000 + 4
    assert [o.key for o in store.list()] == ["keep"]


def test_missing_objects_raise_clear_errors(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    for call in (lambda: store.get("no/such"), lambda: store.get_range("no/such", 0, 5), lambda: store.head("no/such")):
        with pytest.raises(ObjectNotFound, match="no/such"):
            call()
    assert not store.exists("no/such")


def test_put_is_atomic_for_concurrent_readers(store_env: tuple[str, Config]) -> None:
    """A reader sees the old or the new object in full, never a part."""
    store = open_store(*store_env)
    versions = [bytes([v]) * (1 << 20) for v in range(4)]
    store.put("atomic", versions[0])
    seen: list[bytes] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.append(bytes(store.get("atomic")))

    thread = threading.Thread(target=reader)
    thread.start()
    for v in versions[1:] * 3:
        store.put("atomic", v)
    stop.set()
    thread.join()
    assert seen, "the reader never ran"
    assert all(s in versions for s in seen)


def test_every_request_is_counted(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    store.put("c/1", b"12345")
    store.put("c/2", b"678")
    store.get("c/1")
    store.get_ranges("c/1", [(0, 2), (2, 4), (4, 5)])
    store.head("c/2")
    store.list("c/")
    store.delete_prefix("c/")
    stats = store.stats
    assert (stats.requests("PUT"), stats.bytes("PUT")) == (2, 8)
    assert (stats.requests("GET"), stats.bytes("GET")) == (1, 5)
    assert (stats.requests("GET_RANGE"), stats.bytes("GET_RANGE")) == (3, 5)
    assert stats.requests("HEAD") == 1
    assert stats.requests("LIST") == 2
    assert stats.requests("DELETE") == 1


@pytest.mark.parametrize(
    "url, message",
    [
        ("ftp://host/x", "unsupported store URL scheme 'ftp'"),
        ("s3://", "no bucket"),
        ("file://host/x", "three slashes"),
        ("", "empty store URL"),
        ("redis://host/x", "the port is required"),
        ("redis://h:6379/a//b", "empty path segment"),
    ],
)
def test_bad_urls_are_rejected(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_location(url)


def test_url_forms(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    assert parse_location("s3://bucket/a/b/") == Location("s3", "bucket", "a/b")
    assert parse_location("file:///tmp/x") == Location("file", "", "/tmp/x")
    assert parse_location("redis://h:6379/a/b") == Location("redis", "h:6379/0", "a/b")
    assert parse_location("redis://h:6379/3/a") == Location("redis", "h:6379/3", "a")
    assert str(parse_location("redis://h:6379/0/12/x")) == "redis://h:6379/0/12/x"
    assert parse_location(str(parse_location("redis://h:1/7"))) == Location("redis", "h:1/7", "")
    assert parse_location("relative/dir") == Location("file", "", f"{tmp_path}/relative/dir")  # resolved once, now


def test_local_keys_cannot_escape_the_root(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = open_store(str(tmp_path / "root"), Config())
    with pytest.raises(ConfigError, match="'..' segments are not allowed"):
        store.put("../outside", b"x")


def test_delete_prefix_also_removes_partial_writes_of_killed_writers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from croupier.config import Config
    from croupier.storage import open_store

    store = open_store(tmp_path.as_uri(), Config())
    store.put("run/a/x", b"1")
    (tmp_path / "run" / "a" / ".croupier-partial-y.0123").write_bytes(b"half")  # what a SIGKILL mid-put leaves
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / ".croupier-partial-z.1").write_bytes(b"other")
    assert [o.key for o in store.list("run/")] == ["run/a/x"]
    assert store.delete_prefix("run/") == 1
    assert not (tmp_path / "run").exists()
    assert (tmp_path / "keep" / ".croupier-partial-z.1").exists()


@pytest.mark.s3
def test_s3_stores_of_one_endpoint_share_one_client_and_keep_to_their_prefixes(s3_config: Config) -> None:
    """Making an obstore client costs about 6 ms (every run's temporaries and every output opened
    one, in the driver and in each worker): stores of one bucket and settings share one, and each
    still sees only its own prefix, and a store of the whole bucket every key in full."""
    from croupier.storage.s3 import S3Backend

    root = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
    a, b, whole = (open_store(url, s3_config) for url in (f"{root}/a", f"{root}/ab", f"s3://{BUCKET}"))
    assert isinstance(a.backend, S3Backend) and isinstance(b.backend, S3Backend)
    assert a.backend._store is b.backend._store
    other = replace(s3_config, request_timeout=s3_config.request_timeout + 1)
    assert open_store(f"{root}/a", other).backend._store is not a.backend._store  # type: ignore[attr-defined]
    a.put("x/1", b"a")
    b.put("x/1", b"bb")
    assert [(o.key, o.size) for o in a.list()] == [("x/1", 1)] and [(o.key, o.size) for o in b.list("x/")] == [("x/1", 2)]
    assert bytes(a.get("x/1")) == b"a" and a.head("x/1").size == 1 and bytes(a.get_range("x/1", 0, 1)) == b"a"
    a.rename("x/1", "y")
    assert [o.key for o in a.list()] == ["y"]
    root_path = root.removeprefix(f"s3://{BUCKET}/")
    assert [o.key for o in whole.list(f"{root_path}/")] == [f"{root_path}/a/y", f"{root_path}/ab/x/1"]
    a.delete_prefix()
    b.delete_prefix()
    assert whole.list(f"{root_path}/") == []
