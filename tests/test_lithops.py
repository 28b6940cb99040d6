"""The same jobs on Lithops' localhost backend, with storage on the real SeaweedFS server."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

from croupier.compute import LocalExecutor
from croupier.compute.base import Task
from croupier.compute.speculation import SpeculationPolicy
from croupier.config import Config
from croupier.errors import ConfigError, TaskError
from croupier.exchange.plan import ExchangePlan
from croupier.exchange.topology import Topology
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.storage import open_store
from croupier.testing import failing_task, square_task

from . import helpers, lithops_tasks
from .conftest import BUCKET, leftover_tmp

lithops = pytest.importorskip("lithops")

from croupier.compute.lithops_calls import run_in_function  # noqa: E402 - needs lithops
from croupier.compute.lithops_executor import LithopsExecutor  # noqa: E402

LITHOPS = {"lithops": {"backend": "localhost", "storage": "localhost", "log_level": "WARNING"}, "localhost": {"worker_processes": 2, "runtime": sys.executable}}
NO_BACKUPS = Config(concurrency=2, speculation=None)


@pytest.fixture(scope="module", autouse=True)
def functions_import_the_tests():  # type: ignore[no-untyped-def]
    """Functions run in fresh interpreters: let them import this package's task modules."""
    root = str(Path(__file__).resolve().parent.parent)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        yield


@pytest.fixture(scope="module")
def lithops_executor():  # type: ignore[no-untyped-def]
    """One Lithops executor for the module (its own config sets only limits; runs pass theirs)."""
    executor = LithopsExecutor(NO_BACKUPS, LITHOPS, two_level_from=9)
    yield executor
    executor.close()


class LosesCalls(LithopsExecutor):
    """Sends nothing for the first ``drop[task id]`` submissions of a task: a call that never starts."""

    def __init__(self, *args: Any, drop: dict[str, int] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.drop = dict(drop or {})

    def _send(self, fexec: Any, fn: Callable[..., Any], payloads: list[tuple[Any, ...]], timeout: int) -> list[Any]:
        dropped = []
        for payload in payloads:
            # one-task calls: ((task id, fn, args, config),); invoker calls: (settings, bounds, tasks, config)
            task_id = payload[0][0] if fn is run_in_function else "invoker"
            dropped.append(self.drop.get(task_id, 0) > 0)
            if dropped[-1]:
                self.drop[task_id] -= 1
        kept = [p for p, d in zip(payloads, dropped) if not d]
        sent = iter(super()._send(fexec, fn, kept, timeout) if kept else [])
        return [None if d else next(sent) for d in dropped]


def _requests(report) -> dict[str, dict[str, int]]:  # type: ignore[no-untyped-def]
    return {s.name: {k: v.requests for k, v in s.io.kinds.items()} for s in report.stages if s.name not in ("driver", "lease")}


@pytest.mark.s3
def test_terasort_through_lithops_matches_the_local_executor(s3_config: Config, lithops_executor) -> None:  # type: ignore[no-untyped-def]
    root = f"s3://{BUCKET}/lithops-{uuid.uuid4().hex[:8]}"
    config = lithops_executor.tune(s3_config)
    assert (config.concurrency, config.max_workers) == (2, 2)
    gensort(f"{root}/in", 600_000, 3, config, executor=lithops_executor)
    plan = ExchangePlan(Topology((2, 2)), True)
    reports = {}
    reports["lithops"] = sort(f"{root}/in", f"{root}/out-lithops", 4, config, executor=lithops_executor, plan=plan)
    with LocalExecutor(config) as local:
        reports["local"] = sort(f"{root}/in", f"{root}/out-local", 4, config, executor=local, plan=plan)
    for name in reports:
        result, _ = valsort(f"{root}/out-{name}", config, input_url=f"{root}/in")
        assert result.ok, (name, result)
    assert _requests(reports["lithops"]) == _requests(reports["local"])
    assert all(s.invocations for s in reports["lithops"].stages if s.name not in ("driver", "lease"))
    assert "invocation of map" in reports["lithops"].render()
    assert leftover_tmp(root, config) == []
    open_store(root, config).delete_prefix()


@pytest.mark.s3
def test_a_multi_stage_query_through_lithops(s3_config: Config, lithops_executor, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import numpy as np
    import polars as pl

    import croupier.frame as cf
    from croupier.frame import col, count

    root = f"s3://{BUCKET}/lithops-q-{uuid.uuid4().hex[:8]}"
    config = lithops_executor.tune(s3_config).with_(tmp_url=root)
    rng = np.random.default_rng(0)
    facts = pl.DataFrame({"k": rng.integers(0, 20, 5_000), "x": rng.normal(size=5_000)})
    dims = pl.DataFrame({"k": np.arange(20), "name": [f"n{i % 7}" for i in range(20)]})
    store = open_store(root, config)
    for name, df in (("facts", facts), ("dims", dims)):
        path = tmp_path / f"{name}.parquet"
        df.write_parquet(path)
        store.put(f"{name}/part-0.parquet", path.read_bytes())
    q = (
        cf.scan_parquet(f"{root}/facts/", config=config)
        .join(cf.scan_parquet(f"{root}/dims/", config=config), on="k")
        .group_by("name")
        .agg(col("x").sum().alias("sx"), count().alias("n"))
        .sort("name")
    )
    got = q.collect(executor=lithops_executor)
    lithops_counts = _requests(q.last_run.report)
    with LocalExecutor(config) as local:
        again = q.collect(executor=local)
    # equal up to the order floating-point partial sums were added in
    assert again.select("name", "n").equals(got.select("name", "n"))
    assert np.allclose(again["sx"].to_numpy(), got["sx"].to_numpy(), rtol=1e-12)
    assert _requests(q.last_run.report) == lithops_counts
    expected = facts.join(dims, on="k").group_by("name").agg(pl.col("x").sum().alias("sx"), pl.len().cast(pl.Int64).alias("n")).sort("name")
    assert got["name"].to_list() == expected["name"].to_list() and got["n"].to_list() == expected["n"].to_list()
    assert np.allclose(got["sx"].to_numpy(), expected["sx"].to_numpy(), rtol=1e-9)
    assert leftover_tmp(root, config) == []
    store.delete_prefix()


@pytest.mark.s3
def test_eager_reducers_through_lithops(s3_config: Config, lithops_executor) -> None:  # type: ignore[no-untyped-def]
    """Gated reducers share the two functions with the mappers and poll for their inputs."""
    root = f"s3://{BUCKET}/lithops-eager-{uuid.uuid4().hex[:8]}"
    config = lithops_executor.tune(s3_config).with_(reducers="eager")
    gensort(f"{root}/in", 300_000, 2, config, executor=lithops_executor)
    report = sort(f"{root}/in", f"{root}/out", 4, config, executor=lithops_executor, plan=ExchangePlan(Topology((4,)), False))
    result, _ = valsort(f"{root}/out", config, input_url=f"{root}/in")
    assert result.ok, result
    assert report.summary["reducers"].startswith("eager")
    assert leftover_tmp(root, config) == [], lithops_executor.backups
    open_store(root, config).delete_prefix()


def test_two_level_invocation_and_retries(lithops_executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tasks = [Task(f"t{i}", square_task, (i,)) for i in range(9)] + [Task("t9", helpers.crash_once, (str(tmp_path / "crash"),))]
    results = lithops_executor.map(tasks, NO_BACKUPS)  # >= 9 tasks: invoked through ~3 invokers
    assert lithops_executor.last_invokers == 3, lithops_executor.failures
    assert [r.value for r in results] == [i * i for i in range(9)] + ["survived"]
    assert results[9].attempts == 2  # retried inside its invoker
    assert all(r.requested and r.started >= r.requested - 1 for r in results), [(r.task_id, r.requested, r.started) for r in results]
    with pytest.raises(TaskError, match="boom"):
        lithops_executor.map([Task("bad", failing_task, ("boom",))])
    assert lithops_executor.last_invokers == 0


@pytest.mark.s3
def test_the_cli_runs_a_sort_on_lithops(s3_config: Config, seaweedfs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """--executor lithops: the Lithops configuration's limits reach the selector (P <= 2 here)."""
    import json

    import yaml
    from click.testing import CliRunner

    from croupier.cli import main

    config_file = tmp_path / "lithops.yaml"
    config_file.write_text(yaml.safe_dump(LITHOPS))
    root = f"s3://{BUCKET}/lithops-cli-{uuid.uuid4().hex[:8]}"
    gensort(f"{root}/in", 300_000, 2, s3_config)
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    args = ["--s3-endpoint", seaweedfs.endpoint, "--executor", "lithops", "--lithops-config", str(config_file), "sort", f"{root}/in", f"{root}/out", "--report", str(tmp_path / "r.json")]
    out = CliRunner().invoke(main, args, env=env)
    assert out.exit_code == 0, out.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["workers"] <= 2
    assert any(stage["invocations"] for stage in report["stages"])
    result, _ = valsort(f"{root}/out", s3_config, input_url=f"{root}/in")
    assert result.ok
    open_store(root, s3_config).delete_prefix()


# --- bounded waits, immediate retries, gates, backups ---------------------------------------------------


def test_a_failed_call_is_retried_while_the_rest_of_the_batch_runs(lithops_executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``waiter`` can only finish once the retry of ``flaky`` (whose first call dies) has written
    its marker: the retry must run while the batch is still running, not after it."""
    marker = str(tmp_path / "flaky")
    tasks = [Task("waiter", helpers.wait_for_file, (marker + ".done", 120.0)), Task("flaky", helpers.crash_once_after, (marker, 0.0))]
    waiter, flaky = lithops_executor.map(tasks, NO_BACKUPS)
    assert (waiter.value, flaky.value) == (True, "survived")
    assert (waiter.attempts, flaky.attempts) == (1, 2)  # the waiter's first call saw the retry's marker
    assert flaky.requested < waiter.finished  # the retry was asked for while the waiter still ran
    assert [f.split(":")[0] for f in lithops_executor.failures] == ["flaky"]
    assert "exited with code 9" in lithops_executor.failures[0]  # Lithops' own account of the crash


def test_gated_tasks_take_a_function_only_after_their_share(lithops_executor) -> None:  # type: ignore[no-untyped-def]
    first = [Task(f"m{i}", helpers.sleep_then_square, (0.3, i)) for i in range(4)]
    gated = [Task(f"r{i}", helpers.sleep_then_square, (0.0, i), after=(tuple(t.id for t in first), 0.5)) for i in range(2)]
    results = {r.task_id: r for r in lithops_executor.map(gated + first, NO_BACKUPS)}  # gated first in the queue
    finished = sorted(results[t.id].finished for t in first)
    last_asked = max(results[t.id].requested for t in first)
    for t in gated:
        assert results[t.id].started >= finished[1]  # half of the 4 prerequisites had finished
        assert results[t.id].requested >= last_asked  # no prerequisite was still waiting for a function
    assert [results[t.id].value for t in first + gated] == [0, 1, 4, 9, 0, 1]


def test_a_call_that_never_starts_is_resubmitted_then_fails_clearly() -> None:
    executor = LosesCalls(NO_BACKUPS, LITHOPS, start_timeout=2, drop={"t1": 1})
    try:
        results = executor.map([Task(f"t{i}", square_task, (i,)) for i in range(3)])
        assert [r.value for r in results] == [0, 1, 4]
        assert results[1].attempts >= 2
        assert any(r.startswith("t1: did not start within 2 s of being sent (attempt 1)") for r in executor.resubmitted), executor.resubmitted
        # every attempt of t0 is lost; an honest call gets three chances of 2 s to start (a fresh
        # Lithops executor after each loss starts more slowly on a loaded machine)
        executor.task_attempts, executor.drop = 3, {"t0": 3}
        with pytest.raises(TaskError, match=r"task t0 failed: the function call did not start within 2 s .*\(attempt 3 of 3, Lithops localhost\)"):
            executor.map([Task(f"t{i}", square_task, (i,)) for i in range(2)])
        assert sum(r.startswith("t0:") for r in executor.resubmitted) == 3
        assert [r.value for r in executor.map([Task("after", square_task, (5,))])] == [25]  # still usable
        executor.task_attempts, executor.two_level_from, executor.drop = 3, 4, {"invoker": 1}
        results = executor.map([Task(f"t{i}", square_task, (i,)) for i in range(4)])  # two invokers, one lost
        assert executor.last_invokers == 2 and [r.value for r in results] == [0, 1, 4, 9]
        assert any(r.startswith("invoker of 2 tasks") for r in executor.resubmitted), executor.resubmitted
        assert sum(r.attempts >= 2 for r in results) >= 2  # the lost invoker's share, sent directly
    finally:
        executor.close()


def test_a_straggler_gets_a_backup_call_whose_result_wins(tmp_path: Path) -> None:
    """t3's first call sleeps two minutes; the map returns with the backup's result (the loser is
    stopped when the executor closes, which the localhost backend can do)."""
    policy = SpeculationPolicy(after=0.5, slowness=1.5, budget=0.5, min_seconds=0.1)
    config = Config(concurrency=2, speculation=policy)
    marker = str(tmp_path / "slow-once")
    tasks = [Task(f"t{i}", helpers.slow_first_copy, (marker, i, 0.05, 120.0 if i == 3 else 0.0)) for i in range(4)]
    executor = LithopsExecutor(config, LITHOPS)
    try:
        results = executor.map(tasks)
        assert [r.value for r in results] == [0, 1, 2, 3]
        assert results[3].backup  # the first copy of t3 was still asleep
        assert executor.backups >= 1
    finally:
        executor.close()


# --- the front door: no configuration, and errors that say what happened ------------------------------


def test_with_no_lithops_config_the_localhost_backend_runs_this_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LITHOPS_CONFIG_FILE", raising=False)
    monkeypatch.delenv("LITHOPS_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.lithops/config
    monkeypatch.chdir(tmp_path)  # no .lithops_config
    executor = LithopsExecutor(NO_BACKUPS)
    try:
        assert executor.backend == "localhost"
        [result] = executor.map([Task("where", lithops_tasks.interpreter)])
        assert result.value == sys.executable
    finally:
        executor.close()


def test_a_configuration_lithops_rejects_says_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Lithops could not start its 'no_such_backend' backend: .*Unknown compute backend: no_such_backend.*Lithops configuration"):
        LithopsExecutor(NO_BACKUPS, {"lithops": {"backend": "no_such_backend"}})
    with pytest.raises(ConfigError, match="cannot read the Lithops configuration .*missing.yaml"):
        LithopsExecutor(NO_BACKUPS, str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="croupier.start_timeout: cannot read 'soon' as a duration"):
        LithopsExecutor(NO_BACKUPS, {**LITHOPS, "croupier": {"start_timeout": "soon"}})


def test_the_start_bound_comes_from_the_lithops_configuration() -> None:
    executors = [LithopsExecutor(NO_BACKUPS, LITHOPS), LithopsExecutor(NO_BACKUPS, {**LITHOPS, "croupier": {"start_timeout": "2m"}})]
    try:
        assert [e.start_timeout for e in executors] == [60.0, 120.0]
        assert "croupier" not in executors[1].lithops_config  # Croupier's own section is not Lithops'
    finally:
        for executor in executors:
            executor.close()


def test_a_failing_call_reports_the_error_behind_it(lithops_executor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TaskError, match=r"task dies failed: RuntimeError: The function process exited with code 3 .*\(attempt 3 of 3, Lithops localhost\)"):
        lithops_executor.map([Task("dies", lithops_tasks.die, (3,))], NO_BACKUPS)
    assert len(lithops_executor.failures) == 3
    with pytest.raises(TaskError, match="task bad failed: InputError: part-0: not a Parquet file .*attempt 1 of 3"):
        lithops_executor.map([Task("bad", lithops_tasks.bad_input, ("part-0",))], NO_BACKUPS)  # not retried
    assert len(lithops_executor.failures) == 1
    (tmp_path / "driver_only.py").write_text("def task(ctx):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # importable here, not in the functions
    import driver_only  # type: ignore[import-not-found]

    with pytest.raises(TaskError, match="ModuleNotFoundError: No module named 'driver_only'"):
        lithops_executor.map([Task("unknown", driver_only.task)], NO_BACKUPS)
