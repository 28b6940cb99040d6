"""The body of one local worker process ("function").

Protocol over a duplex pipe with the driver:

    driver -> worker: (task_id, fn, args, config, next_task_id, next_inputs)   or None to stop
                      (config None: the same config as this worker's previous task — the driver
                      sends a run's config once per worker, not with every task)
    worker -> driver: ("ok", task_id, value, {channel: io_dict}, seconds, peak_rss)
                      ("error", task_id, cause, traceback_text)

A watchdog thread reads the kernel's peak resident memory (VmHWM, reset at each task start) every
few milliseconds, and once more when the task ends; above the function's memory budget it ends the
process with :data:`MEMORY_EXIT_CODE`, which the driver reports as a memory failure (the way a
serverless platform kills a function that exceeds its memory). Because VmHWM is the kernel's own
high-water mark, short spikes between two looks are not missed.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, Mapping

from croupier.compute.base import MAX_RESULT_BYTES
from croupier.compute.context import TaskContext
from croupier.compute.orphan import guard_worker
from croupier.storage.prefetch import PrefetchCache
from croupier.storage import open_backend
from croupier.storage.backend import Backend

MEMORY_EXIT_CODE = 86

#: Modules every worker imports when it starts, before its first task: the task bodies (query
#: stages, exchange levels) and what they use (Polars, Arrow, Parquet). Named, not imported here,
#: because they sit in layers above this one; a missing one is skipped (the task imports it later).
PRELOAD = (
    "polars", "pyarrow", "pyarrow.parquet", "pyarrow.compute", "numpy",
    "croupier.dag.task", "croupier.dag.operators", "croupier.dag.exchanges", "croupier.exchange.move",
    "croupier.ops.payload", "croupier.storage.local", "croupier.storage.s3",
)  # fmt: skip


def preload(modules: tuple[str, ...] = PRELOAD) -> None:
    """Import ``modules`` now, so the first task does not pay for them (about a second with Polars)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
_WATCH_INTERVAL = 0.02


def peak_rss_bytes() -> int:
    """Peak resident memory of this process since the last reset, bytes (0 where unavailable)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


def reset_peak_rss() -> None:
    """Reset the kernel's peak-RSS mark so the next reading covers only the next task."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # not Linux, or not allowed: peaks then cover the worker's whole life


class _MemoryWatch(threading.Thread):
    """Stops the process once its peak RSS exceeds the budget."""

    def __init__(self, budget: int) -> None:
        super().__init__(daemon=True, name="croupier-memory-watch")
        self.budget = budget

    def check(self) -> int:
        """Return the current peak; end the process if it is over the budget."""
        peak = peak_rss_bytes()
        if peak > self.budget:
            os._exit(MEMORY_EXIT_CODE)
        return peak

    def run(self) -> None:
        while True:
            self.check()
            time.sleep(_WATCH_INTERVAL)


#: glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4


def retain_freed_memory() -> None:
    """Keep memory a task frees for the next task of this function (glibc only; else a no-op).

    By default glibc serves every allocation above 32 MB with a fresh mmap and unmaps it on free,
    so each task of a warm function touches all its memory anew; on this kind of VM page faults
    made a TeraSort map task 1.9x slower than the same work on reused memory. Serving large
    allocations from the heap and never trimming it is what a warm serverless function does
    anyway: its memory stays its own until the platform reclaims it.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_MAX, 0)
        libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
        libc.mallopt(_M_TOP_PAD, 64 << 20)
    except (OSError, AttributeError):
        pass


#: Environment of every worker: the allocators inside Polars (jemalloc) and Arrow (mimalloc) keep
#: the pages a task frees for the next task, as glibc does after :func:`retain_freed_memory`. By
#: default both hand freed pages back to the system within milliseconds to seconds, so each task
#: faults its memory in anew; on this kind of VM that made hash-partitioning a million query rows
#: 75 ms instead of 43, and encoding a final stage's 180 MB result 0.45 s instead of 0.05.
#: Neither allocator can then give pages back (with a purge delay of -1, mimalloc ignores even
#: Arrow's ``release_unused``; a finite delay let it, and the 180 MB encode took 0.16-0.75 s
#: again), and memory one allocator keeps cannot serve another, so a worker whose memory stays
#: above RETIRE_SHARE of its budget after a task (and after glibc gave back what it can) retires,
#: and a fresh worker takes its place
#: (:func:`settle_memory`): a later task always has at least half its budget beyond what earlier
#: ones kept (and Polars reuses what they kept). A worker that still went over would be stopped
#: by the memory watch and its task retried on a fresh worker. Settings the user makes win (see
#: :func:`worker_environment`).
ALLOCATOR_ENV = {"_RJEM_MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1", "MIMALLOC_PURGE_DELAY": "-1"}
#: The jemalloc settings Polars' ``__init__`` puts into the environment of any process importing
#: it (before ours: a later setting wins), so their presence is not a user's choice.
_POLARS_DEFAULT_DECAY = "dirty_decay_ms:500,muzzy_decay_ms:1000"


def worker_environment(environ: Mapping[str, str], threads: int) -> dict[str, str]:
    """The variables workers start with: Polars' thread count and :data:`ALLOCATOR_ENV`, each
    unless ``environ`` (the driver's) sets it. Polars' own jemalloc default does not count as a
    setting: importing Polars writes it into the environment, so ours is appended after it."""
    out = {} if "POLARS_MAX_THREADS" in environ else {"POLARS_MAX_THREADS": str(threads)}
    jemalloc = environ.get("_RJEM_MALLOC_CONF")
    if jemalloc is None:
        out["_RJEM_MALLOC_CONF"] = ALLOCATOR_ENV["_RJEM_MALLOC_CONF"]
    elif jemalloc.startswith(_POLARS_DEFAULT_DECAY) and jemalloc.count("decay_ms") == 2:
        out["_RJEM_MALLOC_CONF"] = f"{jemalloc},{ALLOCATOR_ENV['_RJEM_MALLOC_CONF']}"
    if "MIMALLOC_PURGE_DELAY" not in environ:
        out["MIMALLOC_PURGE_DELAY"] = ALLOCATOR_ENV["MIMALLOC_PURGE_DELAY"]
    return out


#: Share of the memory budget a function may keep from earlier tasks before giving it back.
RETAIN_SHARE = 0.25
#: Share of the memory budget a function may still hold after giving back what it can, before it
#: retires. Not RETAIN_SHARE: retiring loses all the kept memory, and a final aggregation of
#: 10M rows keeps 1.3 GB of a 4 GiB budget, which the next query's tasks reuse.
RETIRE_SHARE = 0.5


def settle_memory(budget: int, baseline: int) -> bool:
    """After a task: give kept memory back once it exceeds RETAIN_SHARE of the budget (beyond the
    ``baseline`` an idle worker holds: its interpreter and libraries), so memory kept for reuse
    (and the heap fragmentation it brings) never crowds out the next task. Return True when it is
    then still above RETIRE_SHARE (Polars' and Arrow's allocators keep their pages): the worker
    retires after its reply, and the executor starts a fresh one in its place."""
    if _current_rss() <= baseline + budget * RETAIN_SHARE:
        return False
    import pyarrow

    pyarrow.default_memory_pool().release_unused()  # gives back only under a user's finite purge delay
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return _current_rss() > baseline + budget * RETIRE_SHARE


def _current_rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def worker_main(conn: Connection, worker_id: int, memory_budget: int, threads: int, spawned: bool = False) -> None:
    """Serve tasks from ``conn`` until told to stop (``spawned``: see :func:`guard_worker`)."""
    guard_worker(spawned=spawned)  # exit quietly when the driver dies; leave Ctrl-C to the driver
    os.environ.setdefault("POLARS_MAX_THREADS", str(threads))
    import pyarrow

    pyarrow.set_cpu_count(threads)
    preload()
    retain_freed_memory()
    baseline = _current_rss()
    watch = _MemoryWatch(memory_budget)
    watch.start()
    try:  # started: a task's time limit counts from here, not from the process start
        conn.send(("ready",))
    except ConnectionError:  # the driver is gone: exit quietly (issue 12, promise 6)
        return
    backends: dict[str, Backend] = {}
    upcoming: PrefetchCache | None = None
    last_config: Any = None
    while True:
        try:
            message = conn.recv()
        except (EOFError, ConnectionError):  # the driver is gone: exit quietly (issue 12, promise 6)
            return
        if message is None:
            return
        task_id, fn, args, config, next_id, next_inputs = message
        if config is None:
            config = last_config
        last_config = config
        current = upcoming if upcoming is not None and upcoming.task_id == task_id else None
        upcoming = None
        if next_id is not None and next_inputs:
            upcoming = PrefetchCache(memory_budget // 4)
            upcoming.prepare(next_id, next_inputs, lambda url, config=config: _backend(backends, url, config))
        reply = _run_task((task_id, fn, args, config), watch, backends, current)
        retire = settle_memory(memory_budget, baseline)
        try:
            conn.send(reply + (retire,) if reply[0] == "ok" else reply)
        except ConnectionError:  # the driver is gone: exit quietly (issue 12, promise 6)
            return
        if retire:
            return


def _backend(backends: dict[str, Backend], url: str, config: Any) -> Backend:
    backend = backends.get(url)
    if backend is None:
        backend = backends[url] = open_backend(url, config)
    return backend


def _run_task(message: tuple[Any, ...], watch: _MemoryWatch | None, backends: dict[str, Backend], prefetch: PrefetchCache | None = None) -> tuple[Any, ...]:
    """Run one task and build the reply; exceptions become an "error" reply with the traceback."""
    task_id, fn, args, config = message
    ctx = TaskContext(task_id, config, backends=backends, prefetch=prefetch)
    reset_peak_rss()
    started = time.perf_counter()
    try:
        value = fn(ctx, *args)
        if len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)) > MAX_RESULT_BYTES:
            raise ValueError(
                f"task returned more than {MAX_RESULT_BYTES} bytes of metadata; put data in storage"
            )
    except Exception as exc:  # noqa: BLE001 - the task boundary: every failure goes to the driver
        cause = f"{type(exc).__name__}: {exc}"
        return ("error", task_id, cause, traceback.format_exc(), type(exc).__name__)
    seconds = time.perf_counter() - started
    channels = {name: stats.to_dict() for name, stats in ctx.channels.items()}
    return ("ok", task_id, value, channels, seconds, watch.check() if watch is not None else peak_rss_bytes())
