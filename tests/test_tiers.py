"""Exchanges through the fast tier (Redis beside the slow store): sort and a group-by query give
the same bytes as through the slow tier, with the plans' request counts on the tier they used, and
nothing left on either tier."""

from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

import croupier.frame as cf
from croupier.compute import LocalExecutor
from croupier.config import Config, RetryPolicy
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


def write_parts(table: pl.DataFrame, folder: Path, rows: int, **options: Any) -> str:
    """``table`` as Parquet files of ``rows`` rows each in ``folder`` (created): a multi-file input,
    so every plan runs in several tasks. ``options``: pyarrow's ``write_table`` options."""
    folder.mkdir()
    for i, part in enumerate(table.iter_slices(rows)):
        pq.write_table(part.to_arrow(), folder / f"part-{i}.parquet", **options)
    return str(folder)


def assert_requests_match_plans(report: Any) -> None:
    """Every exchange of the run ``report`` moved exactly the requests its plan says."""
    for entry in report.exchanges:
        measured = entry["measured_requests"]
        assert measured == {k: entry["predicted_requests"].get(k, 0) for k in measured}, entry


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
    write_parts(table, tmp_path / "facts", 10_000, row_group_size=2_000)
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
        assert_requests_match_plans(report)
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
    with pytest.raises(ConfigError, match="there is none: pass --fast-tier"):
        Config(pipelined=False)
    with pytest.raises(ConfigError, match="must be a Redis store"):
        Config(fast_tier="/tmp/x", tier="fast")
    with pytest.raises(ConfigError, match="tier must be one of"):
        Config(tier="fastest")
    assert Config(fast_tier="redis://127.0.0.1:6379/p").fast_tier == "redis://127.0.0.1:6379/0/p"


class KillingExecutor(LocalExecutor):
    """The real local executor, except that the Redis server is killed (SIGKILL) when the first
    task of ``stage`` is about to run: the fast tier dies mid-run, its objects with it."""

    def __init__(self, config: Config, server: RedisServer, stage: str) -> None:
        super().__init__(config, task_attempts=1)
        self.server, self.stage, self.killed = server, stage, 0

    def map(self, tasks, config=None, on_done=None):  # type: ignore[no-untyped-def,override]
        if any(t.id.startswith(f"{self.stage}-") for t in tasks) and self.server.process.poll() is None:
            self.server.kill()
            self.killed += 1
        return super().map(tasks, config, on_done)


#: Short timeouts and few retries: a dead fast tier is noticed within seconds.
FAULT_CONFIG = Config(concurrency=2, progress=False, request_timeout=3, retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05))


def test_redis_killed_mid_run_loses_nothing(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        server.wait_ready()
        fast = FAULT_CONFIG.with_(fast_tier=server.url("kill"), tier="fast")
        with KillingExecutor(Config(concurrency=2), server, "reduce") as ex:
            gensort((tmp_path / "in").as_uri(), 500_000, parts=2, config=FAULT_CONFIG, executor=ex, seed=11)
            report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), 3, fast, executor=ex)
            assert ex.killed == 1
            result, _ = valsort((tmp_path / "out").as_uri(), FAULT_CONFIG, (tmp_path / "in").as_uri(), executor=ex)
        assert result.ok and result.records == 5_000, result.problems
        fallback = report.summary["fast_tier_fallback"]
        assert "failed" in fallback["reason"] and server.url().split("/0")[0] in fallback["reason"]
        assert fallback["cleanup"] and "could not delete" in fallback["cleanup"][0]  # the dead server could not be emptied
        assert report.summary["tiers"] == {"map": "slow"}
        assert leftover_tmp((tmp_path / "out").as_uri(), FAULT_CONFIG) == []
        server.restart()  # without persistence a killed Redis comes back empty: nothing left there
        assert fast_objects(server.url("kill")) == []


def test_a_full_fast_tier_spills_the_senders_that_do_not_fit_to_the_slow_tier(tmp_path: Path, executor: LocalExecutor) -> None:
    """Redis at 3 MiB cannot hold a 4 MB exchange: the producers whose writes it refuses write to
    the slow tier instead (which ones depends on timing), the consumers read each sender where it wrote."""
    with RedisServer(tmp_path / "redis", maxmemory=3 << 20) as server:
        server.wait_ready()
        fast = FAULT_CONFIG.with_(fast_tier=server.url("full"), tier="fast")
        gensort((tmp_path / "in").as_uri(), 4_000_000, parts=4, config=FAULT_CONFIG, executor=executor, seed=12)
        report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), 4, fast, executor=executor, plan=ExchangePlan.direct(4))
        result, _ = valsort((tmp_path / "out").as_uri(), FAULT_CONFIG, (tmp_path / "in").as_uri(), executor=executor)
        assert result.ok and result.records == 40_000, result.problems
        assert "fast_tier_fallback" not in report.summary  # no re-run: the exchange spilled
        spills = report.summary["fast_tier_spills"]
        assert 1 <= spills["senders"]["map"] <= 4 and "StoreFullError" in spills["first_error"], spills  # how many: timing
        assert report.summary["tiers"] == {"map": "fast"}
        assert report.stage("map").exchange.requests("PUT") >= 16 and report.stage("reduce").exchange.requests("GET") == 16
        assert leftover_tmp((tmp_path / "out").as_uri(), FAULT_CONFIG) == []
        assert fast_objects(server.url()) == []  # nothing left in the server (no lease either)


def test_a_spilled_exchange_writes_its_later_levels_to_the_slow_tier(tmp_path: Path, executor: LocalExecutor) -> None:
    """A 2-level exchange forced onto a 3 MiB Redis: level 1 fills it and some producers spill;
    level 2 then goes to the slow tier (the full Redis would refuse it and fail the run), so the
    sort needs no re-run on the slow tier and is valid, with each level's requests as planned."""
    from croupier.exchange.topology import Topology

    with RedisServer(tmp_path / "redis", maxmemory=3 << 20) as server:
        server.wait_ready()
        fast = FAULT_CONFIG.with_(fast_tier=server.url("two"), tier="fast")
        gensort((tmp_path / "in").as_uri(), 4_000_000, parts=4, config=FAULT_CONFIG, executor=executor, seed=14)
        report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), 4, fast, executor=executor, plan=ExchangePlan(Topology.parse("2x2"), True, 4))
        result, _ = valsort((tmp_path / "out").as_uri(), FAULT_CONFIG, (tmp_path / "in").as_uri(), executor=executor)
        assert result.ok and result.records == 40_000, result.problems
        assert "fast_tier_fallback" not in report.summary, report.summary  # no re-run: level 2 did not need the full Redis
        assert report.summary["fast_tier_spills"]["senders"]["map"] >= 1, report.summary
        assert_requests_match_plans(report)
        assert leftover_tmp((tmp_path / "out").as_uri(), FAULT_CONFIG) == []
        assert fast_objects(server.url()) == []


def test_redis_killed_before_the_producers_write_spills_them_all(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        server.wait_ready()
        fast = FAULT_CONFIG.with_(fast_tier=server.url("dead"), tier="fast")
        with KillingExecutor(Config(concurrency=2), server, "map") as ex:
            gensort((tmp_path / "in").as_uri(), 300_000, parts=2, config=FAULT_CONFIG, executor=ex, seed=13)
            report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), 3, fast, executor=ex)
            assert ex.killed == 1
            result, _ = valsort((tmp_path / "out").as_uri(), FAULT_CONFIG, (tmp_path / "in").as_uri(), executor=ex)
        assert result.ok and result.records == 3_000, result.problems
        assert "fast_tier_fallback" not in report.summary
        assert report.summary["fast_tier_spills"]["senders"] == {"map": report.stage("map").tasks}
        assert report.summary["cleanup"] and "could not delete" in report.summary["cleanup"][0]
        assert leftover_tmp((tmp_path / "out").as_uri(), FAULT_CONFIG) == []
        server.restart()
        assert fast_objects(server.url()) == []


@pytest.mark.s3
def test_auto_puts_an_exchange_on_the_fast_tier_only_where_the_model_and_capacity_say(s3_config: Config, redis_url: str, tmp_path: Path, executor: LocalExecutor) -> None:
    """SeaweedFS as the slow tier: the shipped profiles predict a small exchange faster through
    Redis, so auto takes the fast tier; a server with 2 MiB free cannot hold an 8 MB sort's exchange."""
    root = f"s3://croupier-test/{tmp_path.name}"
    config = s3_config.with_(progress=False, fast_tier=redis_url)
    gensort(f"{root}/in", 400_000, parts=2, config=config, executor=executor, seed=2)
    report = sort(f"{root}/in", f"{root}/out", 3, config, executor=executor)
    (entry,) = report.exchanges
    assert entry["tier"] == "fast" and "auto, time, ~" in entry["tier_why"] and "slow:" in entry["tier_why"] and "fast:" in entry["tier_why"]
    assert valsort(f"{root}/out", config, f"{root}/in", executor=executor)[0].ok
    assert fast_objects(redis_url) == []
    with RedisServer(tmp_path / "small", maxmemory=3 << 20) as server:
        server.wait_ready()
        small = config.with_(fast_tier=server.url("small"))
        gensort(f"{root}/big", 8_000_000, parts=2, config=config, executor=executor, seed=3)
        report = sort(f"{root}/big", f"{root}/big-out", 3, small, executor=executor)
        (entry,) = report.exchanges
        assert entry["tier"] == "slow" and "does not fit" in entry["tier_why"], entry
        assert "fast_tier_fallback" not in report.summary
    open_store(root, config).delete_prefix()


def test_a_query_whose_fast_tier_fills_up_spills_and_gives_the_same_answer(tmp_path: Path) -> None:
    table = _table(300_000).with_columns(pl.int_range(0, 300_000, dtype=pl.Int64).alias("id"))  # every row its own group: the exchange carries them all
    write_parts(table, tmp_path / "facts", 25_000)
    slow = FAULT_CONFIG.with_(tmp_url=(tmp_path / "tmp").as_uri(), workers=3)
    with RedisServer(tmp_path / "redis", maxmemory=3 << 20) as server:
        server.wait_ready()
        fast = slow.with_(fast_tier=server.url("q"), tier="fast")
        frames = {}
        for name, config in (("slow", slow), ("fast", fast)):
            frame = cf.scan_parquet(str(tmp_path / "facts")).group_by("id").agg(col("q").sum().alias("sq"), count().alias("n")).sort("id")
            frames[name] = frame.collect(config=config)
            report = frame.last_run.report
        assert frames["fast"].equals(frames["slow"])
        assert "fast_tier_fallback" not in report.summary and report.summary["fast_tier_spills"]["senders"], report.summary
        assert fast_objects(server.url()) == [] and leftover_tmp((tmp_path / "tmp").as_uri(), slow) == []


def test_a_failed_run_leaves_nothing_on_either_tier(tmp_path: Path, redis_url: str) -> None:
    """A task failure that is not the fast tier's: no re-run, the error as it is, both tiers clean."""
    from croupier.errors import TaskError
    from tests.test_sort import FailingExecutor

    config = Config(concurrency=2, progress=False, fast_tier=redis_url, tier="fast")
    with FailingExecutor(Config(concurrency=2), "reduce-1") as ex:
        gensort((tmp_path / "in").as_uri(), 300_000, parts=2, config=config, executor=ex)
        with pytest.raises(TaskError, match="injected failure in reduce-1"):
            sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), 3, config, executor=ex)
    assert open_store((tmp_path / "out").as_uri(), config).list() == []
    assert fast_objects(redis_url) == []
