"""The local executor: results, failures with task id and traceback, memory budget, time limit, retries."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from croupier.compute import LocalExecutor, Task
from croupier.config import Config
from croupier.errors import TaskError
from croupier.units import parse_size
from tests import helpers


@pytest.fixture(scope="module")
def executor():  # type: ignore[no-untyped-def]
    with LocalExecutor(Config(concurrency=2, function_memory=512 << 20, task_timeout=20), task_attempts=1) as ex:
        yield ex


def test_results_in_task_order_from_separate_processes(executor: LocalExecutor) -> None:
    import os

    results = executor.map([Task(f"t{i}", helpers.square, (i,)) for i in range(20)])
    assert [r.value for r in results] == [i * i for i in range(20)]
    pids = {r.value[1] for r in executor.map([Task(f"w{i}", helpers.whoami) for i in range(6)])}
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 2  # never more processes than the concurrency limit


def test_exception_reaches_caller_with_task_id_and_traceback(executor: LocalExecutor) -> None:
    with pytest.raises(TaskError) as info:
        executor.map([Task("ok", helpers.square, (2,)), Task("bad-7", helpers.fail_with, ("kaboom",))])
    err = info.value
    assert err.task_id == "bad-7"
    assert "ValueError: kaboom" in err.cause
    assert "fail_with" in err.worker_traceback and "Traceback" in err.worker_traceback
    # the executor is still usable afterwards
    assert executor.map([Task("after", helpers.square, (3,))])[0].value == 9


def test_memory_budget_stops_the_function(executor: LocalExecutor) -> None:
    with pytest.raises(TaskError, match="memory budget of 512.0 MiB"):
        executor.map([Task("hog", helpers.hog_memory, (700 << 20,))])
    assert executor.map([Task("fine", helpers.hog_memory, (50 << 20,))])[0].value == 50 << 20


def test_time_limit_fails_the_task() -> None:
    with LocalExecutor(Config(concurrency=1, task_timeout=1), task_attempts=1) as ex:
        with pytest.raises(TaskError, match="time limit of 1s"):
            ex.map([Task("sleepy", helpers.sleep_for, (30,))])
        assert ex.map([Task("next", helpers.square, (4,))])[0].value == 16


def test_crashed_task_is_retried_alone(tmp_path: Path) -> None:
    with LocalExecutor(Config(concurrency=2), task_attempts=2) as ex:
        results = ex.map([Task("a", helpers.square, (5,)), Task("crash", helpers.crash_once, (str(tmp_path / "m"),))])
    assert [r.value for r in results] == [25, "survived"]
    assert [r.attempts for r in results] == [1, 2]


def test_process_death_is_reported_when_retries_run_out(tmp_path: Path) -> None:
    with LocalExecutor(Config(concurrency=1), task_attempts=1) as ex:
        with pytest.raises(TaskError, match="worker process died"):
            ex.map([Task("crash", helpers.crash_once, (str(tmp_path / "m2"),))])


def test_large_results_are_refused(executor: LocalExecutor) -> None:
    with pytest.raises(TaskError, match="put data in storage"):
        executor.map([Task("big", helpers.big_result)])


def test_task_requests_are_counted_and_returned(executor: LocalExecutor, tmp_path: Path) -> None:
    result = executor.map([Task("io", helpers.write_and_count, (tmp_path.as_uri(), "k"))])[0]
    assert result.value == 3
    assert result.io.requests("PUT") == 1 and result.io.requests("GET") == 1
    assert result.io.bytes_written == 3 and result.io.bytes_read == 3
    assert result.peak_rss > 0


POOL_TASK = """
def pool(ctx):
    import os
    import polars
    return (polars.thread_pool_size(), os.environ.get("_RJEM_MALLOC_CONF"), os.environ.get("MIMALLOC_PURGE_DELAY"))
"""

POOL_SCRIPT = """
import os, sys
import polars  # imported first, as a user's script does
from croupier.compute import LocalExecutor
from croupier.compute.base import Task
from croupier.config import Config
from pooltask import pool

if __name__ == "__main__":
    config = Config(concurrency=int(sys.argv[1]), progress=False)
    before = os.environ.get("_RJEM_MALLOC_CONF")
    executor = LocalExecutor(config)
    try:
        sizes = sorted({r.value for r in executor.map([Task(f"t{i}", pool, ()) for i in range(4)], config)})
    finally:
        executor.close()
    print([size for size, _, _ in sizes], os.environ.get("POLARS_MAX_THREADS"), os.environ.get("_RJEM_MALLOC_CONF") == before)
    print(sorted({(tuple(jemalloc.split(",")[-2:]), mimalloc) for _, jemalloc, mimalloc in sizes}))
"""


def test_workers_run_polars_with_their_share_of_the_cores(tmp_path: Path) -> None:
    """Each worker's Polars runs cores / concurrency threads (C workers with a thread per core
    each would run C x cores threads; the fork server imports Polars before any worker could set
    its pool size); the allocators of Polars and Arrow keep freed pages for the next task
    (ALLOCATOR_ENV); the driver's own environment is left as it was."""
    from croupier.compute.worker import ALLOCATOR_ENV

    import subprocess
    import sys

    script = tmp_path / "pool.py"
    script.write_text(POOL_SCRIPT)
    (tmp_path / "pooltask.py").write_text(POOL_TASK)
    cores = os.cpu_count() or 1
    env = {k: v for k, v in os.environ.items() if k not in ("POLARS_MAX_THREADS", *ALLOCATOR_ENV)}
    for concurrency in (cores, 1):
        out = subprocess.run([sys.executable, str(script), str(concurrency)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.split("\n")
        assert lines[0] == f"[{max(1, cores // concurrency)}] None True"
        assert lines[1] == str([(tuple(ALLOCATOR_ENV["_RJEM_MALLOC_CONF"].split(",")), ALLOCATOR_ENV["MIMALLOC_PURGE_DELAY"])])  # ours last: they win


SHAPES_SCRIPT = """
import os, sys, threading
from croupier.compute import LocalExecutor
from croupier.compute.base import Task
from croupier.config import Config
from pooltask import pool

if __name__ == "__main__":
    for concurrency in map(int, sys.argv[1:]):
        config = Config(concurrency=concurrency, progress=False)
        with LocalExecutor(config) as executor:
            tasks = [Task(f"t{i}", pool, ()) for i in range(2)]
            # first from a thread that then ends (a run's stage threads start workers), then again
            first = threading.Thread(target=executor.map, args=(tasks, config))
            first.start()
            first.join()
            pids = executor.worker_pids()
            found = {r.value for r in executor.map(tasks, config)}
            same = pids == executor.worker_pids()
        print(concurrency, executor._spawned, same, os.environ.get("POLARS_MAX_THREADS"), sorted(found))
"""


def test_executors_of_another_concurrency_in_one_process_give_each_worker_its_share(tmp_path: Path) -> None:
    """One fork server serves a process, and Polars in it sized its pool for the executor that
    started it: a later executor of another concurrency starts its workers fresh, so that each
    still runs cores / concurrency threads (it had the first executor's count) and keeps freed
    pages as every worker does."""
    from croupier.compute.worker import ALLOCATOR_ENV

    import subprocess
    import sys

    cores = os.cpu_count() or 1
    if cores < 2:
        pytest.skip("needs two cores: with one, every concurrency gives a worker one thread")
    (tmp_path / "shapes.py").write_text(SHAPES_SCRIPT)
    (tmp_path / "pooltask.py").write_text(POOL_TASK)
    env = {k: v for k, v in os.environ.items() if k not in ("POLARS_MAX_THREADS", *ALLOCATOR_ENV)}
    out = subprocess.run([sys.executable, str(tmp_path / "shapes.py"), str(cores), "1", str(cores), "1"], capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = [line.split(" ", 4) for line in out.stdout.strip().split("\n")]
    settings = (ALLOCATOR_ENV["_RJEM_MALLOC_CONF"], ALLOCATOR_ENV["MIMALLOC_PURGE_DELAY"])
    assert len(seen) == 4, out.stdout
    for (concurrency, spawned, same, driver_threads, found), expected in zip(seen, (cores, 1, cores, 1)):
        values = eval(found)  # noqa: S307 - our own script's print of tuples of numbers and strings
        assert int(concurrency) == expected
        assert spawned == str(expected != cores), "only the executors of another shape than the fork server's spawn"
        assert same == "True", "a worker outlives the thread that started it"
        assert driver_threads == "None", "the driver's environment is left as it was"
        assert [size for size, _, _ in values] == [max(1, cores // expected)], out.stdout
        assert all(jemalloc.endswith(settings[0]) and mimalloc == settings[1] for _, jemalloc, mimalloc in values), out.stdout


def test_a_users_allocator_settings_win_over_the_workers_defaults() -> None:
    """Workers keep freed pages unless the user set the allocators up otherwise; Polars' own
    jemalloc default (written into the environment when it is imported) is not a user's choice."""
    from croupier.compute.worker import ALLOCATOR_ENV, worker_environment

    ours = ALLOCATOR_ENV["_RJEM_MALLOC_CONF"]
    assert worker_environment({}, 2) == {"POLARS_MAX_THREADS": "2", **ALLOCATOR_ENV}
    polars_default = {"_RJEM_MALLOC_CONF": "dirty_decay_ms:500,muzzy_decay_ms:1000"}
    assert worker_environment(polars_default, 1)["_RJEM_MALLOC_CONF"] == f"dirty_decay_ms:500,muzzy_decay_ms:1000,{ours}"
    users = {"_RJEM_MALLOC_CONF": "dirty_decay_ms:500,muzzy_decay_ms:1000,dirty_decay_ms:0", "MIMALLOC_PURGE_DELAY": "10", "POLARS_MAX_THREADS": "8"}
    assert worker_environment(users, 1) == {}
    assert worker_environment({"_RJEM_MALLOC_CONF": "narenas:2"}, 1) == {"POLARS_MAX_THREADS": "1", "MIMALLOC_PURGE_DELAY": "-1"}


def test_a_worker_that_keeps_too_much_memory_retires_and_a_fresh_one_takes_its_place() -> None:
    """Workers keep freed memory for their next task, but Polars' allocator never gives it back:
    a worker holding more than RETIRE_SHARE of its budget beyond an idle worker's after a task
    retires (its result counts), and a fresh process runs the next task; small tasks keep theirs."""
    config = Config(concurrency=1, function_memory=parse_size("2GiB"), speculation=None)
    with LocalExecutor(config) as executor:
        small = executor.map([Task(f"s{i}", helpers.polars_scratch, (1 << 20,)) for i in range(3)])
        assert len({r.value for r in small}) == 1 and executor.retired == 0
        big = executor.map([Task(f"b{i}", helpers.polars_scratch, (700 << 20,)) for i in range(2)])
        assert executor.retired == 2
        after = executor.map([Task("after", helpers.polars_scratch, (1 << 20,))])
    pids = [r.value for r in small + big + after]
    assert len(set(pids)) == 3, pids  # the first worker ran s0-s2 and b0, the second b1, the third "after"
    assert all(r.attempts == 1 for r in small + big + after)
