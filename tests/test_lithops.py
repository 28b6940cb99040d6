"""The same jobs on Lithops' localhost backend, with storage on the real SeaweedFS server."""

from __future__ import annotations

import sys
import uuid

import pytest

from croupier.compute import LocalExecutor
from croupier.compute.base import Task
from croupier.config import Config
from croupier.errors import TaskError
from croupier.exchange.plan import ExchangePlan
from croupier.exchange.topology import Topology
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.storage import open_store
from croupier.testing import failing_task, square_task

from .conftest import BUCKET, leftover_tmp

lithops = pytest.importorskip("lithops")

LITHOPS = {"lithops": {"backend": "localhost", "storage": "localhost", "log_level": "WARNING"}, "localhost": {"worker_processes": 2, "runtime": sys.executable}}


@pytest.fixture(scope="module")
def lithops_executor(s3_config: Config):  # type: ignore[no-untyped-def]
    from croupier.compute.lithops_executor import LithopsExecutor

    executor = LithopsExecutor(s3_config, LITHOPS, two_level_from=9)
    yield executor
    executor.close()


def _requests(report) -> dict[str, dict[str, int]]:  # type: ignore[no-untyped-def]
    return {s.name: {k: v.requests for k, v in s.io.kinds.items()} for s in report.stages if s.name != "driver"}


@pytest.mark.s3
def test_terasort_through_lithops_matches_the_local_executor(s3_config: Config, lithops_executor) -> None:  # type: ignore[no-untyped-def]
    root = f"s3://{BUCKET}/lithops-{uuid.uuid4().hex[:8]}"
    config = lithops_executor.tune(s3_config)
    assert (config.concurrency, config.max_workers) == (2, 2)
    gensort(f"{root}/in", 3_000_000, 3, config, executor=lithops_executor)
    plan = ExchangePlan(Topology((2, 2)), True)
    reports = {}
    reports["lithops"] = sort(f"{root}/in", f"{root}/out-lithops", 4, config, executor=lithops_executor, plan=plan)
    with LocalExecutor(config) as local:
        reports["local"] = sort(f"{root}/in", f"{root}/out-local", 4, config, executor=local, plan=plan)
    for name in reports:
        result, _ = valsort(f"{root}/out-{name}", config, input_url=f"{root}/in")
        assert result.ok, (name, result)
    assert _requests(reports["lithops"]) == _requests(reports["local"])
    assert all(s.invocations for s in reports["lithops"].stages if s.name != "driver")
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
        assert q.collect(executor=local).equals(got)
    assert _requests(q.last_run.report) == lithops_counts
    expected = facts.join(dims, on="k").group_by("name").agg(pl.col("x").sum().alias("sx"), pl.len().cast(pl.Int64).alias("n")).sort("name")
    assert got["name"].to_list() == expected["name"].to_list() and got["n"].to_list() == expected["n"].to_list()
    assert np.allclose(got["sx"].to_numpy(), expected["sx"].to_numpy(), rtol=1e-9)
    assert leftover_tmp(root, config) == []
    store.delete_prefix()


def test_two_level_invocation_and_retries(s3_config: Config, lithops_executor) -> None:  # type: ignore[no-untyped-def]
    tasks = [Task(f"t{i}", square_task, (i,)) for i in range(10)]  # >= 9: invoked through ~3 invokers
    results = lithops_executor.map(tasks)
    assert lithops_executor.last_invokers == 3, lithops_executor.failures
    assert [r.value for r in results] == [i * i for i in range(10)]
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
    gensort(f"{root}/in", 1_000_000, 2, s3_config)
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
