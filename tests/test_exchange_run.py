"""Exchange plans run for real: same output from every algorithm, request counts equal to the formulas.

Runs on the local folder and on SeaweedFS; property-based over topologies, write combining and data
shapes (uniform, skewed, so few records that most partitions are empty).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from croupier.compute import LocalExecutor
from croupier.config import Config
from croupier.errors import TaskError
from croupier.exchange.plan import ExchangePlan, all_plans
from croupier.exchange.topology import Topology
from croupier.jobs import exchange_stats
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.storage import open_store
from tests import data
from tests.conftest import leftover_tmp
from tests.test_sort import FailingExecutor


@pytest.fixture(scope="module")
def executor() -> Iterator[LocalExecutor]:
    with LocalExecutor(Config(concurrency=2)) as ex:
        yield ex


def test_all_plans_of_twelve_agree_and_count_exactly(store_env: tuple[str, Config], executor: LocalExecutor) -> None:
    root, config = store_env
    gensort(f"{root}/in", 600_000, parts=3, config=config, executor=executor)
    plans = all_plans(12) + [ExchangePlan(Topology((3, 4))), ExchangePlan(Topology((2, 2, 3)), combine=True)]
    runs = exchange_stats.run_all(f"{root}/in", f"{root}/work", 12, config, plans, executor)
    assert len({r.digest for r in runs}) == 1
    for run in runs:
        assert exchange_stats.matches(run.levels, run.plan.counts()), (run.plan.name, run.levels)
        for level in run.levels:
            if level.level in getattr(run.plan, "memory", ()):  # a memory level: no objects, no requests
                assert (level.puts, level.gets, level.ranged_gets, level.bytes_written) == (0, 0, 0, 0)
                continue
            assert level.bytes_written == level.bytes_read > 0
            if config.shuffle_encoding(root) == "raw":  # compressed on S3
                assert level.bytes_written >= 600_000
    assert leftover_tmp(f"{root}/work", config) == []
    assert "outputs byte-identical across 12 plans" in exchange_stats.render(runs)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    groups=st.lists(st.integers(2, 3), min_size=1, max_size=3).map(tuple),
    combine=st.booleans(),
    shape=st.sampled_from(["uniform", "skewed", "sparse"]),
)
def test_any_topology_sorts_correctly_with_exact_counts(tmp_path_factory: pytest.TempPathFactory, executor: LocalExecutor, groups: tuple[int, ...], combine: bool, shape: str) -> None:
    root = tmp_path_factory.mktemp("x")
    config = Config(concurrency=2)
    records = {"uniform": data.uniform(3000), "skewed": data.skewed(3000), "sparse": data.uniform(5)}[shape]
    inp, out = (root / "in").as_uri(), (root / "out").as_uri()
    data.write_parts(inp, config, records, parts=2)
    plan = ExchangePlan(Topology(groups), combine)
    report = sort(inp, out, plan.workers, config, plan=plan, executor=executor)
    assert exchange_stats.matches(exchange_stats.measured_levels(report, plan), plan.counts())
    result, _ = valsort(out, config, inp, executor=executor)
    assert result.ok and result.records == len(records)
    assert leftover_tmp(out, config) == []


def test_failure_in_a_middle_level_cleans_up(tmp_path: Path) -> None:
    config = Config(concurrency=2)
    inp, out = (tmp_path / "in").as_uri(), (tmp_path / "out").as_uri()
    data.write_parts(inp, config, data.uniform(2000), parts=2)
    with FailingExecutor(config, "map>reduce-L2-3") as ex:
        with pytest.raises(TaskError, match="injected failure in map>reduce-L2-3"):
            sort(inp, out, 6, config, plan=ExchangePlan(Topology((3, 2)), combine=True), executor=ex)
    assert open_store(out, config).list() == []


def test_exchange_stats_command(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from croupier.cli import main

    result = CliRunner().invoke(main, ["--concurrency", "2", "exchange-stats", "--size", "1MB", "-p", "8", "--store", (tmp_path / f"s{uuid.uuid4().hex[:6]}").as_uri()])
    assert result.exit_code == 0, result.output
    assert "3-level 2x2x2+wc" in result.output and "3-level 2x2x2+wc, level 2 in memory" in result.output and " NO" not in result.output
    assert "outputs byte-identical across 8 plans" in result.output


@pytest.mark.parametrize("buckets,combine", [(128, True), (4, True), (4, False)])
def test_an_object_written_as_one_buffer_holds_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, buckets: int, combine: bool) -> None:
    """A small object's buffers are joined before its write (faster on a local folder); what is
    stored, and the segment bounds reported, are exactly those of writing them one by one."""
    import numpy as np
    import polars as pl

    from croupier.exchange import move
    from croupier.ops import partition
    from croupier.ops.payload import FrameCodec

    store = open_store((tmp_path / "x").as_uri(), Config())
    df = pl.DataFrame({"k": np.arange(5000) * 7919 % 10007, "s": [f"v{i}" for i in range(5000)]})
    chunks = FrameCodec("arrow").encode(df, partition.hash_buckets(df, ["k"], buckets), buckets, 0)
    plan = ExchangePlan(Topology((4,)), combine, 2, buckets if combine else None)
    stored = {}
    for label, limit in (("parts", 0), ("joined", move.GATHER_BYTES)):
        monkeypatch.setattr(move, "GATHER_BYTES", limit)
        written = move.write_level(store, plan, 0, 1, chunks, prefix=f"{label}/")
        stored[label] = (written, {o.key.split("/", 1)[1]: bytes(store.get(o.key)) for o in store.list(f"{label}/")})
    assert stored["parts"] == stored["joined"] and stored["parts"][1]
