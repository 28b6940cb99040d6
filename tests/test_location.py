"""Promise 1, names: a URL names exactly one place, literally, on every store; or it is refused."""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from croupier.config import Config
from croupier.errors import ConfigError
from croupier.storage import Location, open_store, parse_location
from croupier.storage.commit import OutputCommit, Part, read_parts

# --- parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, location",
    [
        ("file:///data/out#2", Location("file", "", "/data/out#2")),
        ("file:///data/res?v=2", Location("file", "", "/data/res?v=2")),
        ("file:///a%20b/c%2Fd", Location("file", "", "/a%20b/c%2Fd")),  # no percent-decoding
        ("file://localhost/x/y/", Location("file", "", "/x/y")),
        ("/plain/abs path/ü", Location("file", "", "/plain/abs path/ü")),
        ("file:///", Location("file", "", "/")),
        ("s3://bkt/a b/#/?x=1/+/:*/ü", Location("s3", "bkt", "a b/#/?x=1/+/:*/ü")),
        ("S3://bkt/", Location("s3", "bkt", "")),
        ("s3://my.bucket-1", Location("s3", "my.bucket-1", "")),
    ],
)
def test_names_are_literal(text: str, location: Location) -> None:
    parsed = parse_location(text)
    assert parsed == location
    assert parse_location(str(parsed)) == parsed  # the canonical URL names the same place


def test_plain_paths_and_file_urls_name_the_same_place(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert parse_location("out") == parse_location(f"file://{tmp_path}/out") == parse_location(str(tmp_path / "out"))
    assert parse_location("./out/") == parse_location("out")
    monkeypatch.chdir(tmp_path / "sub")
    assert parse_location("../out") == parse_location(f"{tmp_path}/out")  # leading ../ as in a shell


@pytest.mark.parametrize(
    "text, message",
    [
        ("file://host/x", "not this machine"),
        ("file:/x", "three slashes"),
        ("file://", "no path"),
        ("s3://", "no bucket"),
        ("s3:///x", "no bucket"),
        ("s3:bkt/x", "s3://bucket/prefix"),
        ("s3://Bucket/x", "not a valid bucket name"),
        ("s3://ab/x", "not a valid bucket name"),
        ("s3://a..b/x", "not a valid bucket name"),
        ("s3://10.0.0.1/x", "not a valid bucket name"),
        ("s3://bkt//x", "empty path segment"),
        ("s3://bkt/x//", "empty path segment"),
        ("file:///a//b", "empty path segment"),
        ("/a//b", "empty path segment"),
        ("s3://bkt/a/./b", "'.' segments"),
        ("s3://bkt/a/..", "'..' segments"),
        ("/a/../b", "'..' segments"),
        ("a/../b", "'..' segments"),
        ("s3://bkt/a\\b", "backslashes"),
        ("/tmp/a\x00b", "control character"),
        ("/tmp/a\nb", "control character"),
        ("/tmp/a\x7fb", "control character"),
        ("/tmp/\udcff", "not valid unicode"),
        ("/tmp/" + "x" * 256, "longer than 255 bytes"),
        ("s3://bkt/" + "/".join(["y" * 200] * 6), "longer than 1024 bytes"),
        ("gs://bkt/x", "unsupported store URL scheme 'gs'"),
        ("http://host/x", "use file:///absolute/path, a folder path, or s3://bucket/prefix"),
        ("", "empty store URL"),
        ("   ", "empty store URL"),
    ],
)
def test_bad_names_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        parse_location(text)


def test_children_joins_and_containment() -> None:
    out = parse_location("s3://bkt/data/out")
    assert str(out.child("_SUCCESS")) == "s3://bkt/data/out/_SUCCESS"
    assert out.join("_croupier_tmp", "run-1/") == parse_location("s3://bkt/data/out/_croupier_tmp/run-1")
    assert out.join("a#b/c?d").segments == ("data", "out", "a#b", "c?d")
    assert out.parent == parse_location("s3://bkt/data") and parse_location("s3://bkt").parent == parse_location("s3://bkt")
    assert out.contains(out) and out.contains(parse_location("s3://bkt/data/out/in"))
    assert not out.contains(parse_location("s3://bkt/data/output"))  # segment-wise, not by characters
    assert not out.contains(parse_location("s3://other/data/out/in"))
    assert not parse_location("/data/out").contains(parse_location("s3://bkt/data/out"))
    assert out.key_of(parse_location("s3://bkt/data/out/a/b")) == "a/b"
    for bad in ("a/b", "", ".", ".."):
        with pytest.raises(ConfigError):
            out.child(bad)


def test_every_store_refuses_the_same_keys(store_env: tuple[str, Config]) -> None:
    store = open_store(*store_env)
    for key in ("a//b", "a/../b", "./a", "a\\b", "a\x01b", "", "a/", "x" * 256):
        with pytest.raises(ConfigError):
            store.put(key, b"x")
        with pytest.raises(ConfigError):
            store.get(key)
    assert store.list() == []


# --- fuzzed names round-trip on both stores, or are refused --------------------------------------

ALPHABET = "ab/#?% +*:;=&~@!$'()[],.-_üé€\\\x00\x1f\x7f\t"
NAMES = st.text(alphabet=ALPHABET, min_size=1, max_size=24)


def _refused(name: str) -> bool:
    """The reference rule (README, promise 1) for a name written below a store root."""
    body = name.removesuffix("/")
    segments = body.split("/")
    return any(
        s in ("", ".", "..") or "\\" in s or any(ord(c) < 0x20 or ord(c) == 0x7F for c in s) or len(s.encode()) > 255 for s in segments
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES)
def test_fuzzed_output_names_round_trip_or_are_refused(store_env: tuple[str, Config], name: str) -> None:
    """An output written at ``<root>/<case>/<name>`` through the commit protocol is listed under
    exactly that name, byte for byte, and read back by its manifest; or the name is refused."""
    root, config = store_env
    case = parse_location(root).child(uuid.uuid4().hex[:8])
    url = f"{case}/{name}"
    if _refused(name):
        with pytest.raises(ConfigError):
            parse_location(url)
        return
    location = parse_location(url)
    store = open_store(location, config)
    commit = OutputCommit(store, "20260101T000000Z-abcdef12", overwrite=False, lease=60)
    commit.begin()
    store.put("part-00000-abcdef12", name.encode())
    commit.commit([Part("part-00000-abcdef12", len(name.encode()), 1)], "rows", "csv", {"job": "fuzz"})
    stem = name.removesuffix("/")
    listed = sorted(o.key for o in open_store(case, config).list())
    assert listed == [f"{stem}/_SUCCESS", f"{stem}/part-00000-abcdef12"]
    parts = read_parts(open_store(url, config))
    assert [bytes(open_store(url, config).get(p.key)) for p in parts] == [name.encode()]
    open_store(case, config).delete_prefix()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES)
def test_fuzzed_keys_round_trip_or_are_refused(store_env: tuple[str, Config], name: str) -> None:
    """The same rule for object keys inside a store: stored and listed byte for byte, or refused
    (the same way by both stores)."""
    root, config = store_env
    store = open_store(parse_location(root).child(uuid.uuid4().hex[:8]), config)
    if _refused(name) or name.endswith("/"):
        with pytest.raises(ConfigError):
            store.put(name, b"x")
        return
    store.put(name, name.encode())
    assert [o.key for o in store.list()] == [name]
    assert bytes(store.get(name)) == name.encode()
    store.delete([name])


def test_special_names_through_the_command_line(store_env: tuple[str, Config]) -> None:
    """gensort, sort and valsort through the CLI into names URL syntax treats specially."""
    from click.testing import CliRunner

    from croupier.cli import main

    root, config = store_env
    base = f"{root}/sp ace#frag?q=1%20+:*ü"
    args = ["--s3-endpoint", config.s3.endpoint] if root.startswith("s3://") else []
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "CROUPIER_CONCURRENCY": "2"}
    for command in (["gensort", f"{base}/in", "--size", "200KB", "--parts", "2"], ["sort", f"{base}/in", f"{base}/out", "-p", "2"], ["valsort", f"{base}/out", "--input", f"{base}/in"]):
        result = CliRunner().invoke(main, [*args, *command], env=env)
        assert result.exit_code == 0, result.output
    keys = [o.key for o in open_store(root, config).list()]
    assert all(k.startswith("sp ace#frag?q=1%20+:*ü/") for k in keys) and "sp ace#frag?q=1%20+:*ü/out/_SUCCESS" in keys
    if not root.startswith("s3://"):
        assert os.path.isdir(os.path.join(parse_location(root).path, "sp ace#frag?q=1%20+:*ü", "out"))
