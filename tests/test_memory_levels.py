"""Memory levels (MinFlow): a middle level of a multi-level exchange happens inside one task per
group of workers. The plan (pure), the executor on a real store, sort and queries through the one
engine, the selector's candidates, and a memory-level plan on the Redis fast tier."""

from __future__ import annotations

from collections import Counter
from math import prod
from pathlib import Path
from typing import Iterator

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import croupier.frame as cf
from croupier.compute import LocalExecutor
from croupier.config import Config
from croupier.errors import ConfigError
from croupier.exchange import move, segments
from croupier.exchange.levels import LevelsPlan, memory_plans
from croupier.exchange.plan import ExchangePlan, all_plans
from croupier.exchange.segments import Chunk
from croupier.exchange.topology import Topology
from croupier.frame import col, count
from croupier.jobs.exchange_stats import measured_levels
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.model.profile import StorageProfile
from croupier.model.selector import choose, usable_memory
from croupier.storage import open_store
from croupier.testing import RedisServer
from tests.helpers import assert_delivered
from tests.conftest import leftover_tmp
from tests.test_tiers import FAULT_CONFIG, assert_requests_match_plans, fast_objects, same_output, write_parts


@st.composite
def memory_level_plans(draw: st.DrawFn) -> LevelsPlan:
    """3 or 4 levels of groups 2..4, or 5 levels of 2s and 3s (two memory levels: 2 and 4)."""
    groups = tuple(draw(st.one_of(st.lists(st.integers(2, 4), min_size=3, max_size=4), st.lists(st.integers(2, 3), min_size=5, max_size=5).filter(lambda g: prod(g) <= 48))))
    p = prod(groups)
    senders = draw(st.one_of(st.none(), st.integers(1, p + 3)))
    buckets = draw(st.one_of(st.none(), st.integers(p, 2 * p)))
    plan = LevelsPlan.alternate(ExchangePlan(Topology(groups), draw(st.booleans()), senders, buckets))
    assert plan is not None
    return plan


# --- the plan ---------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(plan=memory_level_plans())
def test_groups_cover_the_workers_and_counts_drop_only_the_memory_levels(plan: LevelsPlan) -> None:
    base = plan.base()
    for level in plan.memory:
        groups = [plan.members(level, t) for t in range(plan.group_count(level))]
        assert sorted(w for g in groups for w in g) == list(range(plan.workers))
        for g in groups:  # one complete bipartite subgraph of the level: workers differing only in its digit
            assert g == plan.topology.group(g[0], level)
    for mine, theirs in zip(plan.counts(1000), base.counts(1000)):
        expected = (0, 0, 0, 0) if mine.level in plan.memory else (theirs.puts, theirs.gets, theirs.ranged_gets, theirs.objects)
        assert (mine.puts, mine.gets, mine.ranged_gets, mine.objects) == expected
    assert plan.stored_levels == sum(1 for c in plan.counts() if c.objects) == base.stored_levels - len(plan.memory)
    stages = plan.stages()
    assert sum(1 for s in stages if s.memory is not None) == len(plan.memory)
    assert len(stages) == len(base.stages()) - len(plan.memory)
    for s in stages:
        if s.memory is not None:
            assert (s.reads, s.writes, s.tasks) == (s.memory - 1, s.memory + 1, plan.workers // plan.topology.groups[s.memory])


def run_plan(store_url: str, plan: ExchangePlan, inputs: list[list[Chunk]]) -> tuple[list[list[Chunk]], Counter[str]]:
    """Every stage of ``plan`` through a real store, a memory level's group tasks included; each
    consumer's chunks and the store's request counts."""
    store = open_store(store_url, Config())
    written: list[move.Written] = [move.write_level(store, plan, 0, s, chunks)[0] for s, chunks in enumerate(inputs)]
    for stage in plan.stages()[1:-1]:
        assert stage.reads is not None
        fresh: list[move.Written] = [None] * plan.workers
        for t in range(stage.tasks):
            if stage.memory is None:
                fresh[t] = move.pass_level(store, plan, stage.reads + 1, t, move.fetches_for(plan, stage.reads, t, written), 1.0)[0]
                continue
            assert isinstance(plan, LevelsPlan)
            members = plan.members(stage.memory, t)
            reads = [move.fetches_for(plan, stage.reads, w, written) for w in members]
            for w, (got, _) in zip(members, move.pass_memory_level(store, plan, stage.memory, t, reads, 1.0)):
                fresh[w] = got
        written = fresh
    got = [segments.ordered(move.fetch(store, move.fetches_for(plan, plan.levels - 1, w, written), 1.0)) for w in range(plan.workers)]
    return got, Counter({k: v.requests for k, v in store.stats.kinds.items()})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=memory_level_plans())
def test_the_executor_delivers_what_the_storage_levels_deliver_with_fewer_requests(tmp_path_factory: pytest.TempPathFactory, plan: LevelsPlan) -> None:
    """Each consumer gets every chunk of its partitions in (bucket, producer) order, as through the
    base plan; the store counts exactly the plan's requests, the base plan's less its memory levels'."""
    inputs = [[Chunk(b, s, 1, (f"{s}:{b};".encode(),)) for b in range(plan.bucket_count) if (b + s) % 5 != 3] for s in range(plan.producers)]
    got, counts = run_plan(tmp_path_factory.mktemp("mem").as_uri(), plan, inputs)
    assert_delivered(plan, inputs, got)
    predicted = plan.predicted_requests()
    assert {k: counts.get(k, 0) for k in predicted} == predicted
    base = plan.base().predicted_requests()
    assert sum(predicted.values()) < sum(base.values())


def test_only_middle_levels_alternating_may_be_in_memory() -> None:
    assert LevelsPlan.alternate(ExchangePlan(Topology((4, 4)))) is None  # 2 levels: no middle level
    assert LevelsPlan.alternate(ExchangePlan(Topology((2, 2, 2, 2, 2)))).memory == (1, 3)  # type: ignore[union-attr]
    plan = LevelsPlan.alternate(ExchangePlan(Topology((2, 2, 2, 2)), True))
    assert plan is not None and plan.memory == (1,) and plan.name == "4-level 2x2x2x2+wc, level 2 in memory" and plan.family == "4-level+wc+mem"
    with pytest.raises(ValueError, match="middle levels"):
        LevelsPlan(Topology((2, 2, 2)), False, None, None, (0,))
    with pytest.raises(ValueError, match="middle levels"):
        LevelsPlan(Topology((2, 2, 2)), False, None, None, (2,))
    with pytest.raises(ValueError, match="alternate"):
        LevelsPlan(Topology((2, 2, 2, 2, 2)), False, None, None, (1, 2))
    with pytest.raises(ValueError, match="not a memory level"):
        plan.members(2, 0)
    assert [p.name for p in memory_plans(all_plans(8, 3, memory=False))] == ["3-level 2x2x2, level 2 in memory", "3-level 2x2x2+wc, level 2 in memory"]
    assert not any(isinstance(p, LevelsPlan) for p in all_plans(16, 2))  # --max-levels 2: no 3-level memory plan either


def test_the_selector_weighs_memory_levels_and_keeps_groups_within_a_function() -> None:
    profile = StorageProfile.load("local")
    choice = choose(256 << 20, profile, workers=16)
    names = [c.plan.name for c in choice.candidates]
    assert "3-level 4x2x2+wc, level 2 in memory" in names and "3-level 4x2x2+wc" in names
    mem = next(c for c in choice.candidates if c.plan.name == "3-level 4x2x2+wc, level 2 in memory")
    slow = next(c for c in choice.candidates if c.plan.name == "3-level 4x2x2+wc")
    assert len(mem.stages) == len(slow.stages) - 1 and mem.requests["PUT"] < slow.requests["PUT"]
    assert "in memory" in choice.explain(40)
    # a group of 2 workers of 16 holding more than a function may: no memory-level candidate
    big = int(usable_memory(profile.function_memory) * 16 / 2 * 1.1)
    assert not any(isinstance(c.plan, LevelsPlan) for c in choose(big, profile, workers=16).candidates)
    with pytest.raises(ConfigError, match=r"\+mem"):
        choose(big, profile, workers=16, algorithm="3-level+wc+mem")
    # a forced topology is that plan; with a +mem algorithm, that plan with its middle level in memory
    assert not any(isinstance(c.plan, LevelsPlan) for c in choose(256 << 20, profile, topology=Topology((16,))).candidates)
    forced = choose(256 << 20, profile, topology=Topology((4, 2, 2)), algorithm="3-level+wc+mem")
    assert [c.plan.name for c in forced.candidates] == ["3-level 4x2x2+wc, level 2 in memory"]


def test_a_forced_memory_level_algorithm_binds_late_as_every_write_combined_one() -> None:
    """'3-level+wc+mem' writes level 1 combined, so its P is bound after the producers wrote, like
    '3-level+wc' (a plain forced algorithm binds early); each stage counts its own tasks."""
    from croupier.dag.binding import Binder
    from croupier.exchange.hybrid import HybridPlan
    from croupier.model.perf import predict, stage_tasks

    needs = {a: Binder(Config(algorithm=a), "file:///tmp/x").needs_early() for a in ("3-level+wc+mem", "3-level+mem", "3-level+wc", "3-level")}
    assert needs == {"3-level+wc+mem": False, "3-level+mem": True, "3-level+wc": False, "3-level": True}
    profile = StorageProfile.load("local")
    hybrid = HybridPlan.build(16, 32, 8)
    assert stage_tasks(predict(hybrid, 1 << 30, profile)) == [32, 4 * 16, 16]  # M producers, R * P combiners, P consumers
    mem = LevelsPlan(Topology((4, 2, 2)), True, 12, None, (1,))
    assert stage_tasks(predict(mem, 1 << 30, profile)) == [12, 8, 16]


# --- through the one engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def executor() -> Iterator[LocalExecutor]:
    with LocalExecutor(Config(concurrency=2)) as ex:
        yield ex


@pytest.mark.parametrize("combine", [False, True])
def test_sort_with_a_memory_level_is_byte_identical_and_counts_the_plan(tmp_path: Path, executor: LocalExecutor, combine: bool) -> None:
    config = FAULT_CONFIG
    gensort((tmp_path / "in").as_uri(), 2_000_000, parts=4, config=config, executor=executor, seed=31)
    base = ExchangePlan(Topology((2, 2, 2)), combine)
    plan = LevelsPlan.alternate(base)
    assert plan is not None
    reports = {}
    for name, chosen in (("base", base), ("mem", plan)):
        out = (tmp_path / name).as_uri()
        reports[name] = sort((tmp_path / "in").as_uri(), out, 8, config, executor=executor, plan=chosen)
        result, _ = valsort(out, config, (tmp_path / "in").as_uri(), executor=executor)
        assert result.ok and result.records == 20_000, result.problems
        assert leftover_tmp(out, config) == []
    same_output(tmp_path / "base", tmp_path / "mem", config)
    report = reports["mem"]
    stages = {s.name: s.tasks for s in report.stages}
    assert stages["reduce level 2 in memory, level 3"] == 4 and "reduce level 2" not in stages and "reduce level 3" not in stages, stages
    measured = [(m.puts, m.gets, m.ranged_gets) for m in measured_levels(report, plan)]
    assert measured == [(c.puts, c.gets, c.ranged_gets) for c in plan.counts()]
    (entry,) = report.exchanges
    assert entry["plan"] == plan.name and entry["measured_requests"] == entry["predicted_requests"], entry


def test_a_sort_the_selector_plans_with_a_memory_level_compares_every_stage(tmp_path: Path, executor: LocalExecutor) -> None:
    """Forced '3-level+wc+mem', the selector picks P and the groups: the sort is right and the run
    report puts a measured time beside every predicted stage, the memory level's included."""
    config = FAULT_CONFIG.with_(algorithm="3-level+wc+mem")
    gensort((tmp_path / "in").as_uri(), 2_000_000, parts=4, config=config, executor=executor, seed=33)
    report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), None, config, executor=executor)
    assert valsort((tmp_path / "out").as_uri(), config, (tmp_path / "in").as_uri(), executor=executor)[0].ok
    (entry,) = report.exchanges
    assert entry["plan"].endswith("level 2 in memory") and entry["measured_requests"] == entry["predicted_requests"], entry
    compared = report.summary["predicted/measured s"]
    assert "nan" not in compared and "level-3" in compared, compared


def _facts(n: int) -> pl.DataFrame:
    rng = np.random.default_rng(8)
    return pl.DataFrame({"k": rng.integers(0, 500, n).astype(np.int64), "q": rng.integers(1, 9, n), "s": [("a", "b", None)[i] for i in rng.integers(0, 3, n)]})


def test_queries_with_memory_levels_answer_like_polars(tmp_path: Path) -> None:
    """A group-by and a partition-wise join, every exchange 3-level with level 2 in memory, over
    multi-file inputs: the answers equal Polars', and each exchange moved its plan's requests."""
    facts = _facts(60_000)
    dims = pl.DataFrame({"k": np.arange(500, dtype=np.int64), "name": [f"n{i % 37}" for i in range(500)]})
    write_parts(facts, tmp_path / "facts", 15_000)
    write_parts(dims, tmp_path / "dims", 125)
    config = FAULT_CONFIG.with_(tmp_url=(tmp_path / "tmp").as_uri(), workers=8, algorithm="3-level+wc+mem", broadcast_limit=0)
    grouped = cf.scan_parquet(str(tmp_path / "facts")).group_by("k", "s").agg(col("q").sum().alias("sq"), count().alias("n")).sort("k", "s")
    expected = facts.lazy().group_by("k", "s").agg(pl.col("q").sum().alias("sq"), pl.len().alias("n")).sort("k", "s").collect()
    assert grouped.collect(config=config).equals(expected)
    report = grouped.last_run.report
    partitioned = [e for e in report.exchanges if e["workers"] == 8]
    assert partitioned and all(e["plan"].endswith("level 2 in memory") for e in partitioned), report.exchanges
    assert_requests_match_plans(report)
    joined = cf.scan_parquet(str(tmp_path / "facts")).join(cf.scan_parquet(str(tmp_path / "dims")), on="k").group_by("name").agg(col("q").sum().alias("sq")).sort("name")
    expected = facts.lazy().join(dims.lazy(), on="k").group_by("name").agg(pl.col("q").sum().alias("sq")).sort("name").collect()
    assert joined.collect(config=config).equals(expected)
    report = joined.last_run.report
    assert sum(1 for e in report.exchanges if e["plan"].endswith("level 2 in memory")) >= 2, report.exchanges
    assert_requests_match_plans(report)
    assert leftover_tmp((tmp_path / "tmp").as_uri(), config) == []


def test_late_bound_exchanges_carry_their_memory_levels_to_every_joined_side(tmp_path: Path) -> None:
    """No P forced: every exchange is bound after its producers wrote B > P fine buckets, and the
    selector picks P among '3-level+wc+mem' plans; a partition-wise join's two sides get the same
    memory-level plan; the answers equal Polars'."""
    facts = _facts(60_000)
    dims = pl.DataFrame({"k": np.arange(500, dtype=np.int64), "name": [f"n{i % 37}" for i in range(500)]})
    write_parts(facts, tmp_path / "facts", 15_000)
    write_parts(dims, tmp_path / "dims", 125)
    config = FAULT_CONFIG.with_(tmp_url=(tmp_path / "tmp").as_uri(), algorithm="3-level+wc+mem", broadcast_limit=0)
    joined = cf.scan_parquet(str(tmp_path / "facts")).join(cf.scan_parquet(str(tmp_path / "dims")), on="k").group_by("name").agg(col("q").sum().alias("sq")).sort("name")
    expected = facts.lazy().join(dims.lazy(), on="k").group_by("name").agg(pl.col("q").sum().alias("sq")).sort("name").collect()
    assert joined.collect(config=config).equals(expected)
    report = joined.last_run.report
    sides = [e for e in report.exchanges if e["consumer"] == report.exchanges[0]["consumer"]]
    assert len(sides) == 2 and sides[0]["plan"] == sides[1]["plan"] and sides[0]["plan"].endswith("level 2 in memory"), report.exchanges
    assert "bound before" not in sides[0]["how"], sides[0]["how"]  # late, from the measured bytes
    assert_requests_match_plans(report)
    assert leftover_tmp((tmp_path / "tmp").as_uri(), config) == []


def test_a_memory_level_plan_on_the_fast_tier(tmp_path: Path, executor: LocalExecutor) -> None:
    """tier="fast" with a memory-level plan: its storage levels on Redis, the memory level nowhere;
    the sort is byte-identical to the slow tier's and Redis is empty afterwards."""
    plan = LevelsPlan.alternate(ExchangePlan(Topology((2, 2, 2)), True))
    assert plan is not None
    gensort((tmp_path / "in").as_uri(), 1_000_000, parts=4, config=FAULT_CONFIG, executor=executor, seed=32)
    sort((tmp_path / "in").as_uri(), (tmp_path / "slow").as_uri(), 8, FAULT_CONFIG, executor=executor, plan=plan)
    with RedisServer(tmp_path / "redis", maxmemory=32 << 20) as server:
        server.wait_ready()
        report = sort((tmp_path / "in").as_uri(), (tmp_path / "fast").as_uri(), 8, FAULT_CONFIG.with_(fast_tier=server.url("m"), tier="fast"), executor=executor, plan=plan)
        assert report.summary["tiers"] == {"map": "fast"} and "fast_tier_spills" not in report.summary
        (entry,) = report.exchanges
        assert entry["plan"] == plan.name and entry["measured_requests"] == entry["predicted_requests"], entry
        assert fast_objects(server.url()) == []
    same_output(tmp_path / "slow", tmp_path / "fast", FAULT_CONFIG)


def test_the_simulator_runs_a_memory_level_as_its_group_tasks() -> None:
    """The simulator's stages of a memory-level sort: P / g group tasks reading and writing their
    members' objects, and in all exactly the plan's requests."""
    from croupier.sim.engine import sort_stages

    plan = LevelsPlan(Topology((4, 2, 2)), True, None, None, (1,))
    stages = sort_stages(plan, 100_000_000, StorageProfile.load("local"))
    assert [(s.name, len(s.tasks)) for s in stages] == [("map", 16), ("level 3", 8), ("reduce", 16)]
    exchange_writes = sum(b.count for s in stages[:-1] for t in s.tasks for b in t.writes)
    exchange_reads = sum(b.count for s in stages[1:] for t in s.tasks for b in t.reads)
    assert exchange_writes == plan.predicted_requests()["PUT"]
    assert exchange_reads == plan.predicted_requests()["GET_RANGE"]


def test_killed_group_tasks_and_a_faulty_store_still_sort_right(tmp_path: Path) -> None:
    """Chaos through a memory level: workers killed at random (the group tasks among them) and 5%
    of requests failing. A killed group task runs again from level 1, which stays in storage until
    the run ends; the sort is right and nothing is left behind."""
    from croupier.config import RetryPolicy
    from croupier.storage.faults import FaultSpec

    plan = LevelsPlan.alternate(ExchangePlan(Topology((2, 2, 2)), True))
    assert plan is not None
    with LocalExecutor(Config(concurrency=2)) as plain:
        gensort((tmp_path / "in").as_uri(), 2_000_000, parts=4, config=FAULT_CONFIG, executor=plain, seed=34)
    chaos = FAULT_CONFIG.with_(faults=FaultSpec(error_rate=0.05, seed=7), retry=RetryPolicy(attempts=10, base_delay=0.001, max_delay=0.01))
    with LocalExecutor(chaos, kill_rate=0.3, task_attempts=6, seed=11) as executor:
        report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), 8, chaos, executor=executor, plan=plan)
        assert executor.kills > 0
    result, _ = valsort((tmp_path / "out").as_uri(), FAULT_CONFIG, (tmp_path / "in").as_uri())
    assert result.ok and result.records == 20_000, result.problems
    assert report.stage("reduce level 2 in memory, level 3").retried_tasks > 0, [(s.name, s.retried_tasks) for s in report.stages]
    assert report.io.retries > 0
    assert leftover_tmp((tmp_path / "out").as_uri(), FAULT_CONFIG) == []


def test_an_empty_exchange_through_a_memory_level_answers_like_polars(tmp_path: Path) -> None:
    """A filter that keeps no row, then a group-by through a memory level: every group task
    receives nothing and writes empty objects; the (empty) answer has Polars' columns and dtypes."""
    facts = _facts(20_000)
    write_parts(facts, tmp_path / "facts", 5_000)
    config = FAULT_CONFIG.with_(tmp_url=(tmp_path / "tmp").as_uri(), workers=8, algorithm="3-level+wc+mem")
    frame = cf.scan_parquet(str(tmp_path / "facts")).filter(col("q") > 100).group_by("k", "s").agg(col("q").sum().alias("sq"), count().alias("n")).sort("k", "s")
    expected = facts.lazy().filter(pl.col("q") > 100).group_by("k", "s").agg(pl.col("q").sum().alias("sq"), pl.len().alias("n")).sort("k", "s").collect()
    got = frame.collect(config=config)
    assert got.is_empty() and got.equals(expected) and got.schema == expected.schema, (got.schema, expected.schema)
    report = frame.last_run.report
    assert any(e["plan"].endswith("level 2 in memory") for e in report.exchanges), report.exchanges
    assert_requests_match_plans(report)
    assert leftover_tmp((tmp_path / "tmp").as_uri(), config) == []
