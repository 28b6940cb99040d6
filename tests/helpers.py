"""Module-level task functions for executor tests (tasks must be importable by worker processes)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from croupier.compute.context import TaskContext


def square(ctx: TaskContext, x: int) -> int:
    return x * x


def whoami(ctx: TaskContext) -> tuple[str, int]:
    return ctx.task_id, os.getpid()


def fail_with(ctx: TaskContext, message: str) -> None:
    raise ValueError(message)


def hog_memory(ctx: TaskContext, nbytes: int) -> int:
    block = bytearray(nbytes)
    block[:: 4096] = b"\x01" * len(block[:: 4096])
    return len(block)


def sleep_for(ctx: TaskContext, seconds: float) -> None:
    time.sleep(seconds)


def crash_once(ctx: TaskContext, marker: str) -> str:
    """Kill the worker process the first time (marker file absent), succeed the second time."""
    path = Path(marker)
    if not path.exists():
        path.write_text("crashed")
        os._exit(9)
    return "survived"


def big_result(ctx: TaskContext) -> bytes:
    return b"x" * (8 << 20)


def write_and_count(ctx: TaskContext, url: str, key: str) -> int:
    store = ctx.store(url)
    store.put(key, b"abc")
    return len(bytes(store.get(key)))


def sleep_then_square(ctx: TaskContext, seconds: float, x: int) -> int:
    time.sleep(seconds)
    return x * x


def slow_first_copy(ctx: TaskContext, marker: str, value: int, seconds: float, first_copy_seconds: float) -> int:
    """Sleep ``first_copy_seconds`` in the first copy to start (a straggler), ``seconds`` otherwise;
    a first copy that slept it all out says so in ``<marker>-<value>.slept``."""
    path = Path(f"{marker}-{value}")
    if first_copy_seconds and not path.exists():
        path.write_text("first")
        time.sleep(first_copy_seconds)
        Path(f"{path}.slept").write_text("done")
    else:
        time.sleep(seconds)
    return value


def crash_once_after(ctx: TaskContext, marker: str, seconds: float) -> str:
    """Crash the worker after ``seconds`` the first time; the retry writes ``marker``.done."""
    path = Path(marker)
    if not path.exists():
        path.write_text("crashed")
        time.sleep(seconds)
        os._exit(9)
    Path(marker + ".done").write_text("done")
    return "survived"


def wait_for_file(ctx: TaskContext, path: str, seconds: float) -> bool:
    """Poll for ``path`` (what an eager reducer does for its inputs)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if Path(path).exists():
            return True
        time.sleep(0.02)
    raise TimeoutError(f"{path} never appeared")


def output_parts(url: str, config) -> list[str]:  # type: ignore[no-untyped-def]
    """The part names a committed Croupier output's ``_SUCCESS`` manifest lists, in order."""
    import json

    from croupier.storage import open_store

    manifest = json.loads(bytes(open_store(url, config).get("_SUCCESS")))
    return [p["key"] for p in manifest["parts"]]


def polars_scratch(ctx: TaskContext, nbytes: int) -> int:
    """Fill and drop a Polars column of about ``nbytes``; return this worker's pid."""
    import polars as pl

    column = pl.int_range(0, nbytes // 8, eager=True, dtype=pl.Int64) * 3  # two columns of nbytes
    assert column.len() == nbytes // 8
    del column
    return os.getpid()


def kept_side_urls(ctx: TaskContext) -> list[str]:
    """The store URLs of the broadcast sides this worker keeps (see croupier.dag.task.read_shared)."""
    from croupier.dag.task import _SHARED

    return sorted({key[0] for key in _SHARED})


def assert_delivered(plan, inputs, got) -> None:  # type: ignore[no-untyped-def]
    """Every input chunk (``inputs``: per producer) reached the worker of its bucket's partition,
    in (bucket, origin) order, with its payload ``"<origin>:<bucket>;"`` (``got``: per worker)."""
    sent: dict[int, list[tuple[int, int]]] = {}  # each input chunk by its bucket's partition, in one pass
    for chunks in inputs:
        for c in chunks:
            sent.setdefault(plan.partition_of(c.bucket), []).append((c.bucket, c.origin))
    for w, chunks in enumerate(got):
        assert [(c.bucket, c.origin) for c in chunks] == sorted(sent.get(w, []))
        assert all(bytes(c.parts[0]) == f"{c.origin}:{c.bucket};".encode() for c in chunks)
