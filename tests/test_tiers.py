"""Exchanges through the fast tier (Redis beside the slow store): sort and a group-by query give
the same bytes as through the slow tier, with the plans' request counts on the tier they used, and
nothing left on either tier."""

from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Iterator

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

import croupier.frame as cf
from croupier.compute import LocalExecutor
from croupier.config import Config
from croupier.errors import ConfigError
from croupier.exchange.plan import ExchangePlan
from croupier.frame import col, count
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.storage import open_store
from croupier.testing import RedisServer
from tests.conftest import leftover_tmp
from tests.helpers import output_parts

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def executor() -> Iterator[LocalExecutor]:
    with LocalExecutor(Config(concurrency=2)) as ex:
        yield ex


def fast_objects(redis_url: str) -> list[str]:
    """Every object under the test's Redis prefix (the run's fast-tier temporaries included)."""
    return [o.key for o in open_store(redis_url, Config()).list()]


def same_output(a: Path, b: Path, config: Config) -> None:
    """Two outputs hold byte-identical parts, in the same order."""
    pa, pb = output_parts(a.as_uri(), config), output_parts(b.as_uri(), config)
    assert len(pa) == len(pb)
    for x, y in zip(pa, pb):
        assert filecmp.cmp(a / x, b / y, shallow=False), (x, y)


def test_sort_through_the_fast_tier_is_byte_identical_and_counts_the_plan(tmp_path: Path, redis_url: str, executor: LocalExecutor) -> None:
    slow = Config(concurrency=2, progress=False)
    fast = slow.with_(fast_tier=redis_url, tier="fast")
    gensort((tmp_path / "in").as_uri(), 600_000, parts=3, config=slow, executor=executor, seed=7)
    p = 4
    reports = {}
    for name, config in (("slow", slow), ("fast", fast)):
        out = (tmp_path / name).as_uri()
        reports[name] = sort((tmp_path / "in").as_uri(), out, p, config, executor=executor, plan=ExchangePlan.direct(p))
        result, _ = valsort(out, slow, (tmp_path / "in").as_uri(), executor=executor)
        assert result.ok and result.records == 6_000, result.problems
        assert leftover_tmp(out, slow) == []
    same_output(tmp_path / "slow", tmp_path / "fast", slow)
    for report in reports.values():  # the direct plan's formula: P² objects written, P² read
        assert report.stage("map").exchange.requests("PUT") == p * p
        assert report.stage("reduce").exchange.requests("GET") == p * p
    assert fast_objects(redis_url) == []  # the run's fast-tier temporaries are gone, lease too
    notes = " ".join(n for e in reports["fast"].exchanges for n in [e["how"]])
    assert notes  # the exchange was recorded
    assert reports["fast"].summary["tiers"] == {"map": "fast"} and reports["slow"].summary["tiers"] == {"map": "slow"}


def _table(n: int = 30_000) -> pl.DataFrame:
    rng = np.random.default_rng(3)
    return pl.DataFrame({"k": rng.integers(0, 97, n).astype(np.int64), "x": rng.normal(10, 3, n), "q": rng.integers(1, 9, n)})


def test_group_by_through_the_fast_tier_equals_the_slow_tier(tmp_path: Path, redis_url: str) -> None:
    table = _table()
    (tmp_path / "facts").mkdir()
    for i, part in enumerate(table.iter_slices(10_000)):
        pq.write_table(part.to_arrow(), tmp_path / "facts" / f"part-{i}.parquet", row_group_size=2_000)
    slow = Config(concurrency=2, progress=False, tmp_url=(tmp_path / "tmp").as_uri(), workers=3)
    fast = slow.with_(fast_tier=redis_url, tier="fast")

    def query() -> cf.LazyFrame:
        return cf.scan_parquet(str(tmp_path / "facts")).group_by("k").agg(col("q").sum().alias("sq"), col("x").max().alias("mx"), count().alias("n")).sort("k")

    got = {}
    for name, config in (("slow", slow), ("fast", fast)):
        frame = query()
        got[name] = frame.collect(config=config)
        report = frame.last_run.report
        tiers = report.summary["tiers"]
        assert tiers and set(tiers.values()) == {name}, tiers
        for entry in report.exchanges:  # every exchange moved exactly what its plan says
            measured = {k: v for k, v in entry["measured_requests"].items()}
            assert measured == {k: entry["predicted_requests"].get(k, 0) for k in measured}, entry
        frame.sink_parquet(tmp_path / f"out-{name}", config=config)
    assert got["fast"].equals(got["slow"])
    expected = table.group_by("k").agg(pl.col("q").sum().alias("sq"), pl.col("x").max().alias("mx"), pl.len().alias("n")).sort("k")
    for name in ("k", "sq", "mx", "n"):  # (order-independent aggregates: float sums are not, on either tier)
        assert got["fast"][name].to_list() == expected[name].cast(got["fast"][name].dtype).to_list()
    same_output(tmp_path / "out-slow", tmp_path / "out-fast", slow)
    assert fast_objects(redis_url) == [] and leftover_tmp((tmp_path / "tmp").as_uri(), slow) == []


def test_tier_options_are_checked_before_any_work() -> None:
    with pytest.raises(ConfigError, match="needs a fast tier"):
        Config(tier="fast")
    with pytest.raises(ConfigError, match="must be a Redis store"):
        Config(fast_tier="/tmp/x", tier="fast")
    with pytest.raises(ConfigError, match="tier must be one of"):
        Config(tier="fastest")
    assert Config(fast_tier="redis://127.0.0.1:6379/p").fast_tier == "redis://127.0.0.1:6379/0/p"
