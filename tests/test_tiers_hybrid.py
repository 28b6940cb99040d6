"""The hybrid multi-round exchange (Locus §3.4): the plan's objects and counts without storage, and
sort and a group-by through a Redis too small for the exchange, byte-identical/equal to the slow
tier, with each tier's requests equal to the plan's formula and nothing left on either tier."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import polars as pl
import pytest

import croupier.frame as cf
from croupier.compute import LocalExecutor
from croupier.config import Config
from croupier.errors import StoreFullError, TaskError
from croupier.exchange.hybrid import HybridPlan, per_round_for
from croupier.exchange.plan import ExchangePlan
from croupier.frame import col, count
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.model.profile import StorageProfile
from croupier.model.tier import FastTierProfile, best, compare, hybrid_candidate
from croupier.storage import open_store
from croupier.testing import RedisServer
from tests.conftest import leftover_tmp
from tests.test_tiers import FAULT_CONFIG, assert_requests_match_plans, fast_objects, same_output, write_parts


# --- the plan, without storage ------------------------------------------------------------------------


def test_every_combiner_reads_its_round_and_every_consumer_every_round() -> None:
    plan = HybridPlan.build(workers=3, senders=7, per_round=3, buckets=12, round_bytes=256 << 20)
    assert plan.name == "hybrid r=256MiB" and plan.rounds == 3 and plan.levels == 2
    assert [list(plan.round_producers(j)) for j in range(3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert (plan.tier(0), plan.tier(1)) == ("fast", "slow")
    # every (producer, bucket) reaches exactly one combiner, of the producer's round and the bucket's partition
    seen = set()
    for c in range(plan.level_senders(1)):
        for read in plan.reads(0, c):
            assert plan.round_of(read.sender) == c // 3
            for bucket in range(read.segment, read.segment_end):
                assert plan.partition_of(bucket) == c % 3
                seen.add((read.sender, bucket))
    assert seen == {(s, b) for s in range(7) for b in range(12)}
    # every consumer reads the run of its partition from every round, whole
    for p in range(3):
        reads = plan.reads(1, p)
        assert [r.sender for r in reads] == [p, 3 + p, 6 + p] and not any(r.ranged for r in reads)
        assert {r.key for r in reads} == {o.key for s in (p, 3 + p, 6 + p) for o in plan.writes(1, s)}
    assert plan.round_keys(1) == ["l0/s00003", "l0/s00004", "l0/s00005"]


@pytest.mark.parametrize("pipelined", [False, True])
def test_the_counts_are_the_formula_on_each_tier(pipelined: bool) -> None:
    for m_all, m, p in ((7, 3, 3), (16, 4, 8), (5, 5, 2), (9, 1, 4)):
        plan = HybridPlan.build(p, m_all, m, pipelined=pipelined)
        r = -(-m_all // m)
        fast = {"PUT": m_all * p, "GET": m_all * p, "GET_RANGE": 0} if pipelined else {"PUT": m_all, "GET": 0, "GET_RANGE": m_all * p}
        assert plan.requests_by_tier() == {"fast": fast, "slow": {"PUT": r * p, "GET": r * p, "GET_RANGE": 0}}
        assert plan.predicted_requests() == {k: fast[k] + {"PUT": r * p, "GET": r * p, "GET_RANGE": 0}[k] for k in fast}
        assert plan.delete_requests(1000) == r and plan.delete_requests(2) == sum(-(-len(plan.round_keys(j)) // 2) for j in range(r))
        # every object written is read, once per reader that the plan names
        written = {o.key for lv in (0, 1) for s in range(plan.level_senders(lv)) for o in plan.writes(lv, s)}
        read = {x.key for lv, n in ((0, plan.level_senders(1)), (1, p)) for w in range(n) for x in plan.reads(lv, w)}
        assert written == read


def test_a_pipelined_round_names_every_object_before_it_is_written() -> None:
    """Combiners of a pipelined round read plain objects whose names the plan alone gives (no
    producer's segment boundaries), one per (producer of the round, partition); every object's
    receiver is the combiner that reads it, and a producer's chunks go to its partition's object."""
    plan = HybridPlan.build(workers=3, senders=7, per_round=3, buckets=12, round_bytes=256 << 20, pipelined=True)
    assert plan.name == "hybrid r=256MiB pipelined" and plan.pipelined and not plan.combined(0)
    for c in range(plan.level_senders(1)):
        reads = plan.reads(0, c)
        assert not any(r.ranged for r in reads) and [r.sender for r in reads] == list(plan.round_producers(c // 3))
        for read in reads:
            (obj,) = [o for o in plan.writes(0, read.sender) if o.key == read.key]
            assert obj.receivers == (c,) and plan.route(0, c) == c % 3
    assert all(plan.route(0, plan.partition_of(b)) == plan.partition_of(b) for b in range(12))
    assert plan.round_keys(2) == ["l0/s00006/r00000", "l0/s00006/r00001", "l0/s00006/r00002"]


def test_the_round_is_the_fast_capacity_in_whole_producers() -> None:
    assert per_round_for(256e6, 1e9, 40) == 10 and per_round_for(10e6, 1e9, 40) == 0 and per_round_for(2e9, 1e9, 40) == 40
    assert per_round_for(256e6, 1e9, 40, writers=2) == 8  # a share in flight per concurrent writer
    slow = StorageProfile.load("seaweedfs-loopback")
    fast = FastTierProfile.load("redis-loopback")
    candidate, plan = hybrid_candidate(4e9, 8, 64, slow, fast, free=512 << 20)
    assert plan is not None and candidate.fits and candidate.round_bytes * 1.3 <= 512 << 20
    assert plan.per_round == candidate.per_round and plan.rounds == -(-64 // plan.per_round)
    assert candidate.label.startswith("hybrid r=") and candidate.dominant
    assert candidate.seconds > 0 and candidate.cost >= 0
    candidates = {c.tier: c for c in compare(4e9, 8, slow, fast, free=512 << 20, senders=64)}
    assert set(candidates) == {"slow", "fast", "hybrid"} and not candidates["fast"].fits
    assert best(list(candidates.values()), "time", None).tier in ("slow", "hybrid")  # fast does not fit
    # a fast tier that is fast enough and a slow store that is request-bound: the hybrid wins
    s3, elasticache = StorageProfile.load("aws-s3"), FastTierProfile.load("aws-elasticache")
    tight = compare(50e9, 64, s3, elasticache, free=8 << 30, senders=2000)
    assert {c.tier for c in tight if c.fits} == {"slow", "hybrid"}
    small, _ = hybrid_candidate(4e9, 8, 4, slow, fast, free=100 << 20)  # one producer's share (1 GB) does not fit
    assert not small.fits


# --- on a real Redis too small for the exchange ----------------------------------------------------------


@pytest.fixture(scope="module")
def executor() -> Iterator[LocalExecutor]:
    with LocalExecutor(Config(concurrency=2)) as ex:
        yield ex


@pytest.fixture
def small_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """Redis capped at 6 MiB: a 4 MB exchange does not fit (with Redis' overheads), a round of it does."""
    with RedisServer(tmp_path / "redis", maxmemory=6 << 20) as server:
        server.wait_ready()
        yield server


@pytest.fixture
def smaller_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """Redis capped at 5.5 MiB, for a forced hybrid: a 4 MB exchange needs 5.2 MB with Redis'
    overheads, which 6 MiB beside Redis' own megabyte sometimes had free (5.28 MB)."""
    with RedisServer(tmp_path / "redis", maxmemory=11 << 19) as server:
        server.wait_ready()
        yield server


def starved_profile(tmp_path: Path) -> str:
    """The local store's profile, but request-bound at 5 requests/s (a throttled slow store, where
    few slow requests win), saved in ``tmp_path``; its path."""
    from dataclasses import replace

    from croupier.model.profile import Curve

    crawl = Curve((1.0, 1e12), (5.0, 5.0), (5.0, 5.0))
    replace(StorageProfile.load("local"), read=crawl, write=crawl).save(tmp_path / "starved.json")
    return str(tmp_path / "starved.json")


def join_on_both(tmp_path: Path, configs: dict[str, Config]) -> tuple[dict[str, pl.DataFrame], Any]:
    """The partition-wise join of ``tmp_path``/left and /right, grouped by y, under each config;
    the results by name and the last run's report."""
    got = {}
    for name, config in configs.items():
        frame = cf.scan_parquet(str(tmp_path / "left")).join(cf.scan_parquet(str(tmp_path / "right")), on="k").group_by("y").agg(col("x").sum().alias("sx")).sort("y")
        got[name] = frame.collect(config=config)
        report = frame.last_run.report
    return got, report


def tier_requests(report, stage: str) -> dict[str, dict[str, int]]:  # type: ignore[no-untyped-def]
    """Requests on each tier, from the stage reports: the producer rounds and the combiners' reads
    are on the fast tier, the combiners' writes and the consumers' reads on the slow one."""
    fast = {"PUT": 0, "GET": 0, "GET_RANGE": 0}
    slow = dict(fast)
    for s in report.stages:
        x = s.exchange
        if s.name.startswith(f"{stage} round "):
            fast["PUT"] += x.requests("PUT")
        elif s.name.startswith(f"{stage} combine "):
            fast["GET_RANGE"] += x.requests("GET_RANGE")
            fast["GET"] += x.requests("GET")
            slow["PUT"] += x.requests("PUT")
        elif x.requests("GET") or x.requests("GET_RANGE"):
            slow["GET"] += x.requests("GET")
            slow["GET_RANGE"] += x.requests("GET_RANGE")
    return {"fast": fast, "slow": slow}


#: A forced hybrid takes the variant the model prefers (on the test's Redis: pipelined) unless
#: ``Config.pipelined`` forces one.
UNPIPELINED = {"pipelined": False}


@pytest.mark.parametrize("pipelined", [True, False])
def test_sort_through_the_hybrid_is_byte_identical_and_counts_the_plan(tmp_path: Path, smaller_redis: RedisServer, executor: LocalExecutor, pipelined: bool) -> None:
    small_redis = smaller_redis
    slow = FAULT_CONFIG
    hybrid = slow.with_(fast_tier=small_redis.url("h"), tier="hybrid", **({} if pipelined else UNPIPELINED))
    gensort((tmp_path / "in").as_uri(), 4_000_000, parts=4, config=slow, executor=executor, seed=21)
    reports = {}
    for name, config in (("slow", slow), ("hybrid", hybrid)):
        out = (tmp_path / name).as_uri()
        reports[name] = sort((tmp_path / "in").as_uri(), out, 8, config, executor=executor, plan=ExchangePlan.direct(8))
        result, _ = valsort(out, slow, (tmp_path / "in").as_uri(), executor=executor)
        assert result.ok and result.records == 40_000, result.problems
        assert leftover_tmp(out, slow) == []
    same_output(tmp_path / "slow", tmp_path / "hybrid", slow)
    report = reports["hybrid"]
    free = open_store(small_redis.url(), slow).backend.free_memory()
    assert free is not None and not FastTierProfile.load("redis-loopback").fits(4_000_000, free)  # fast-only would not fit
    (entry,) = report.exchanges
    assert entry["plan"].startswith("hybrid r=") and report.summary["tiers"]["map"].startswith("hybrid r="), entry
    assert entry["plan"].endswith(" pipelined") == pipelined and report.summary["tiers"]["map"].endswith(" pipelined") == pipelined, entry
    assert "fast_tier_spills" not in report.summary and "fast_tier_fallback" not in report.summary, report.summary
    assert entry["rounds"] >= 2
    # pipelined: each round's combiners ran in its producers' executor call; else in a call of their own
    combines = [s for s in report.stages if s.name.startswith("map combine ")]
    assert len(combines) == entry["rounds"] and all((s.name.replace("combine", "round") in s.shared) == pipelined for s in combines)
    assert tier_requests(report, "map") == entry["predicted_requests_by_tier"]
    assert entry["measured_requests"] == entry["predicted_requests"]
    assert fast_objects(small_redis.url()) == []


def _table(n: int) -> pl.DataFrame:
    rng = np.random.default_rng(5)
    return pl.DataFrame({"id": np.arange(n, dtype=np.int64), "k": rng.integers(0, 97, n).astype(np.int64), "q": rng.integers(1, 9, n)})


@pytest.mark.parametrize("pipelined", [True, False])
def test_group_by_through_the_hybrid_equals_the_slow_tier(tmp_path: Path, small_redis: RedisServer, pipelined: bool) -> None:
    """The group-by through the hybrid (8 files, so several tasks per stage; nulls in the summed
    column) equals the slow tier's and Polars' on the same files."""
    table = _table(200_000).with_columns(pl.when(pl.col("id") % 7 == 0).then(None).otherwise(pl.col("q")).alias("q"))
    write_parts(table, tmp_path / "facts", 25_000)
    expected = pl.scan_parquet(str(tmp_path / "facts" / "*.parquet")).group_by("id").agg(pl.col("q").sum().alias("sq"), pl.len().alias("n")).sort("id").collect()
    slow = FAULT_CONFIG.with_(tmp_url=(tmp_path / "tmp").as_uri(), workers=3)
    hybrid = slow.with_(fast_tier=small_redis.url("q"), tier="hybrid", pipelined=pipelined)
    got = {}
    for name, config in (("slow", slow), ("hybrid", hybrid)):
        frame = cf.scan_parquet(str(tmp_path / "facts")).group_by("id").agg(col("q").sum().alias("sq"), count().alias("n")).sort("id")
        got[name] = frame.collect(config=config)
        report = frame.last_run.report
        assert_requests_match_plans(report)
    assert got["hybrid"].equals(got["slow"]) and got["hybrid"].equals(expected)
    hybrids = [e for e in report.exchanges if e["plan"].startswith("hybrid")]
    assert hybrids and all(e["rounds"] >= 2 and e["plan"].endswith(" pipelined") == pipelined for e in hybrids), report.exchanges
    assert "fast_tier_fallback" not in report.summary
    assert fast_objects(small_redis.url()) == [] and leftover_tmp((tmp_path / "tmp").as_uri(), slow) == []


@pytest.mark.parametrize(("fail_task", "pipelined"), [("reduce-1", True), ("reduce-1", False), ("map-C2-1", True), ("map-C2-1", False), ("map-2", True)])
def test_a_failed_hybrid_run_leaves_nothing_on_either_tier(tmp_path: Path, small_redis: RedisServer, fail_task: str, pipelined: bool) -> None:
    """A task that fails (not the fast tier) fails the run, after every round or in the middle of
    one (a combiner, a producer), pipelined or not, and the run leaves nothing on either tier."""
    from tests.test_sort import FailingExecutor

    config = FAULT_CONFIG.with_(fast_tier=small_redis.url("f"), tier="hybrid", pipelined=pipelined)
    with FailingExecutor(Config(concurrency=2), fail_task) as ex:
        gensort((tmp_path / "in").as_uri(), 2_000_000, parts=4, config=FAULT_CONFIG, executor=ex)
        with pytest.raises(TaskError, match=f"injected failure in {fail_task}"):
            sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), 4, config, executor=ex, plan=ExchangePlan.direct(4))
    assert leftover_tmp((tmp_path / "out").as_uri(), config) == []
    assert fast_objects(small_redis.url()) == []


# --- the tier in the selector's search ------------------------------------------------------------------


def test_the_selector_compares_tier_x_algorithm_x_p_in_one_stage_model() -> None:
    from dataclasses import replace

    from croupier.model.profile import Curve
    from croupier.model.selector import choose
    from croupier.model.tier import TierOptions

    slow = StorageProfile.load("seaweedfs-loopback")
    fast = FastTierProfile.load("redis-loopback")
    choice = choose(int(2e9), slow, concurrency=2, senders=16, buckets=64, tiers=TierOptions(fast, 512 << 20, writers=2))
    tiers = {c.tier for c in choice.candidates}
    assert tiers == {"slow", "fast", "hybrid"}
    for c in choice.candidates:  # 2 GB does not fit 512 MiB whole: on the fast tier, some producers spill
        if c.tier == "fast":
            assert 0 < c.fast_share < 1
            names = {t.name for t in c.stages[0].terms}
            assert any(n.startswith("fast-tier write") for n in names) and any(n.startswith("write") for n in names), names
    for c in choice.candidates:
        if c.tier == "hybrid":
            assert isinstance(c.plan, HybridPlan) and c.plan.rounds >= 2 and c.plan.round_bytes * 1.3 <= 512 << 20
            names = {t.name for s in c.stages for t in s.terms}
            assert {"fast-tier write bandwidth", "rounds start-up"} <= names or "fast-tier write throughput" in names, names
    small = choose(int(50e6), slow, concurrency=2, senders=4, buckets=16, tiers=TierOptions(fast, 512 << 20, writers=2))
    assert {c.tier for c in small.candidates} == {"slow", "fast"}  # fits: fast; one round: no hybrid
    for c in small.candidates:
        if c.tier == "fast" and "in memory" in c.plan.name:  # memory-level plans on the fast tier: their storage levels there
            assert any(t.name.startswith("fast-tier") for s in c.stages for t in s.terms)
    assert any(c.tier == "fast" and "in memory" in c.plan.name for c in small.candidates)
    fast_pred = next(c for c in small.candidates if c.tier == "fast")
    slow_pred = next(c for c in small.candidates if c.tier == "slow" and c.plan == fast_pred.plan)
    assert fast_pred.stages[0].terms[:3] == slow_pred.stages[0].terms[:3]  # start-up, memory, compute: the same stage model
    # a request-bound slow store (5 requests/s): few slow requests win, and the hybrid has the fewest
    crawl = Curve((1.0, 1e12), (5.0, 5.0), (5.0, 5.0))
    starved = replace(slow, read=crawl, write=crawl)
    choice = choose(int(200e6), starved, concurrency=2, workers=8, senders=64, buckets=64, tiers=TierOptions(fast, 100 << 20, writers=2))
    assert choice.best.tier == "hybrid" and choice.best.plan.rounds >= 2, choice.explain()
    assert "hybrid r=" in choice.explain()


def test_rounds_of_fewer_producers_than_functions_leave_functions_idle() -> None:
    """A round of m producers keeps only m of the c functions busy when m < c: on 2 functions,
    rounds of one producer take the producers' compute twice as long as rounds of two (the same
    total bytes). Every round is a call of its own, its waves its own: the start-up beyond the
    stage's (one call, a wave per c of all its tasks) is a call per round more and the waves the
    rounds' split adds (rounds of 3, 3, 2 on 2 functions: 5 waves, not 4)."""
    from croupier.model.tier import predict_on_tier

    slow, fast = StorageProfile.load("seaweedfs-loopback"), FastTierProfile.load("redis-loopback")
    slow = replace(slow, startup_seconds=0.5, wave_seconds=0.1)

    def producers(m: int, c: int) -> dict[str, float]:
        plan = HybridPlan.build(8, 8, m, pipelined=True)
        return {t.name: t.seconds for t in predict_on_tier(plan, int(2e9), slow, fast, "hybrid", c).stages[0].terms}

    one, two = producers(1, 2), producers(2, 2)
    assert one["compute"] == pytest.approx(2 * two["compute"]) and one["compute"] > 0
    assert one["rounds start-up"] == pytest.approx(7 * 0.5)  # 8 rounds: 7 more call start-ups; 8 waves' t1 in "start-up"
    assert one["start-up"] == pytest.approx(0.5 + 8 * 0.1)
    assert two["rounds start-up"] == pytest.approx(3 * 0.5)  # 4 rounds of one wave each: the stage's 4 waves
    assert producers(3, 2)["rounds start-up"] == pytest.approx(2 * 0.5 + 0.1)  # 3 rounds, 2 + 2 + 1 waves against 4
    assert producers(2, 1)["compute"] == pytest.approx(producers(1, 1)["compute"])  # one function: no round leaves any idle


def test_every_round_of_a_hybrid_waits_out_its_own_last_task() -> None:
    """The imbalance of unequal tasks is one last task's tail (a share of one task's work); a
    hybrid's rounds are calls of their own, so its producers (unpipelined) and its combiners wait
    out one tail per round. Pipelined, the producers' tails are the combiners' time."""
    from croupier.model.tier import predict_on_tier

    slow, fast = replace(StorageProfile.load("seaweedfs-loopback"), imbalance=0.1), FastTierProfile.load("redis-loopback")
    for pipelined in (False, True):
        plan = HybridPlan.build(8, 8, 2, pipelined=pipelined)
        assert plan.rounds == 4
        for stage, role in zip(predict_on_tier(plan, int(2e9), slow, fast, "hybrid", 2).stages, ("producers", "combiners")):
            terms = {t.name: t.seconds for t in stage.terms}
            if pipelined and role == "producers":
                assert not {"imbalance", "fast-tier imbalance", "rounds imbalance"} & set(terms)
                continue
            tail = terms.get("imbalance", 0.0) + terms.get("fast-tier imbalance", 0.0)
            assert tail > 0 and terms["rounds imbalance"] == pytest.approx(3 * tail), (pipelined, role)


def test_the_selector_weighs_a_pipelined_round_against_fewer_fast_requests() -> None:
    """Per P, the hybrid comes pipelined and not: the same exchange, the pipelined one without the
    producers' imbalance and the combiners' start-ups (time), with M * P fast requests instead of
    M (cost). It wins on time; on cost, it depends on what the requests cost beside the time saved
    (free functions beside S3 Express: not pipelined; S3 Express beside Lambda, whose combiners
    are billed while they wait: a near tie, either way), and a forced hybrid takes whichever the
    same model prefers at the P and round it assumes."""
    from croupier.model.selector import choose
    from croupier.model.tier import TierOptions, forced_hybrid

    for slow_name, fast_name, objective in (("aws-s3", "aws-elasticache", "time"), ("aws-s3", "s3-express", "time"), ("aws-s3", "s3-express", "cost"), ("local", "s3-express", "cost")):
        slow, fast = StorageProfile.load(slow_name), FastTierProfile.load(fast_name)
        choice = choose(int(40e9), slow, objective, concurrency=64, senders=400, buckets=512, tiers=TierOptions(fast, 4 << 30, ("hybrid",), writers=2))
        pairs: dict[tuple[int, int], dict[bool, object]] = {}
        hybrids = [c for c in choice.candidates if c.tier == "hybrid"]
        for c in hybrids:
            assert isinstance(c.plan, HybridPlan)
            pairs.setdefault((c.workers, c.plan.per_round), {})[c.plan.pipelined] = c
        assert pairs and all(set(v) == {True, False} for v in pairs.values())
        for v in pairs.values():
            piped, plain = v[True], v[False]
            assert piped.seconds < plain.seconds  # type: ignore[attr-defined]
            assert "imbalance" not in {t.name for t in piped.stages[0].terms}  # type: ignore[attr-defined]
            assert not {"start-up", "rounds start-up"} & {t.name for t in piped.stages[1].terms}  # type: ignore[attr-defined]
            assert "start-up" in {t.name for t in piped.stages[2].terms}  # the consumers run after every round  # type: ignore[attr-defined]
            fast_requests = {p: sum(c.plan.requests_by_tier()["fast"].values()) for p, c in v.items()}  # type: ignore[attr-defined]
            assert fast_requests[True] > fast_requests[False]
        best_hybrid = min(hybrids, key=lambda c: c.seconds if objective == "time" else c.cost)
        if objective == "time" or slow_name == "local":
            assert best_hybrid.plan.pipelined == (objective == "time"), choice.explain()
        forced = forced_hybrid(int(40e9), Config(fast_tier="redis://127.0.0.1:1/0/x", fast_profile=fast_name, profile=slow_name, objective=objective, calibration="off"), 400)
        assert forced.label.endswith(" pipelined") == forced.pipelined and ("not pipelined" in forced.why) != forced.pipelined and objective in forced.why
        if objective == "time" or slow_name == "local":  # at its own P and round; with Lambda beside S3 Express the cost is a near tie there
            assert forced.pipelined == best_hybrid.plan.pipelined, forced.why
    # the combiners that wait, billed, for their round's last producers: one producer's time each
    from croupier.model.tier import _waiting_combiners

    plan = HybridPlan.build(8, 40, 10, pipelined=True)  # 4 rounds, 10 producers on 4 functions: 3 waves
    lam = StorageProfile.load("aws-s3")
    per_second = lam.prices.function_gb_second * lam.function_memory / (1 << 30)
    assert _waiting_combiners(plan, 12.0, lam, 4) == pytest.approx(4 * 4 * 12.0 / 4 / 3 * per_second)
    assert _waiting_combiners(plan, 12.0, StorageProfile.load("local"), 4) == 0.0


def test_auto_picks_the_hybrid_when_the_selector_says_so_and_the_sort_is_right(tmp_path: Path, small_redis: RedisServer, executor: LocalExecutor) -> None:
    """A slow store profiled as request-bound (5 requests/s), a 6 MiB Redis and a direct exchange
    of 16 producers of which about half fit Redis: auto's search over tier x algorithm x P picks
    the hybrid (2 rounds: 64 slow requests) over the fast tier with the other half spilling
    (about 8 x 17 slow requests); the sort is valid and leaves nothing behind."""
    starved = starved_profile(tmp_path)
    config = FAULT_CONFIG.with_(fast_tier=small_redis.url("a"), profile=starved, workers=16, algorithm="direct+wc")
    gensort((tmp_path / "in").as_uri(), 6_000_000, parts=16, config=FAULT_CONFIG, executor=executor, seed=22)
    report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), None, config, executor=executor)
    (entry,) = report.exchanges
    assert entry["tier"].startswith("hybrid r=") and "the selector over tier x algorithm x P" in entry["tier_why"], report.summary.get("fast_tier_fallback")
    assert "slow:" in entry["tier_why"] and "hybrid:" in entry["tier_why"]
    assert "fast: direct+wc P=16 with 56% of its producers' objects there, the others spilling" in entry["tier_why"], entry["tier_why"]  # 9 of 16
    assert entry["measured_requests"] == entry["predicted_requests"]
    result, _ = valsort((tmp_path / "out").as_uri(), FAULT_CONFIG, (tmp_path / "in").as_uri(), executor=executor)
    assert result.ok and result.records == 60_000, result.problems
    assert leftover_tmp((tmp_path / "out").as_uri(), FAULT_CONFIG) == [] and fast_objects(small_redis.url()) == []


def test_auto_takes_a_fast_tier_that_holds_most_of_the_exchange_and_spills_the_rest(tmp_path: Path, small_redis: RedisServer, executor: LocalExecutor) -> None:
    """The request-bound slow store, 6 MiB of Redis, a 4 MB sort whose plan (3-level with level 2
    in memory, TeraSort's, fixed before it runs) is the one priced: the model expects seven of
    its eight producers' objects to fit Redis, so auto takes the fast tier with the rest
    spilling, over the hybrid and the slow tier. Level 3 goes to the slow tier (Redis was not
    expected to hold it; how many producers really spill depends on Redis' own overheads), so the
    run needs no re-run on the slow tier; the sort is valid and nothing is left behind."""
    starved = starved_profile(tmp_path)
    config = FAULT_CONFIG.with_(fast_tier=small_redis.url("s"), profile=starved, workers=8)
    gensort((tmp_path / "in").as_uri(), 4_000_000, parts=4, config=FAULT_CONFIG, executor=executor, seed=23)
    report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), None, config, executor=executor)
    (entry,) = report.exchanges
    assert entry["tier"] == "fast" and "fast: 3-level 2x2x2+wc, level 2 in memory P=8 with 88% of its producers' objects there" in entry["tier_why"], entry["tier_why"]
    assert "hybrid:" in entry["tier_why"] and "slow:" in entry["tier_why"]
    assert "fast_tier_fallback" not in report.summary, report.summary
    assert entry["measured_requests"] == entry["predicted_requests"]
    result, _ = valsort((tmp_path / "out").as_uri(), FAULT_CONFIG, (tmp_path / "in").as_uri(), executor=executor)
    assert result.ok and result.records == 40_000, result.problems
    assert leftover_tmp((tmp_path / "out").as_uri(), FAULT_CONFIG) == [] and fast_objects(small_redis.url()) == []


def _sort_killing_redis(tmp_path: Path, server: RedisServer, config: Config, size: int, parts: int, workers: int, seed: int):  # type: ignore[no-untyped-def]
    """Sort ``size`` bytes of records through ``config``, Redis killed as round 2's combiners are
    about to run; return the run's report and the output's validation."""
    from tests.test_tiers import KillingExecutor

    with KillingExecutor(Config(concurrency=2), server, "map-C2") as ex:
        gensort((tmp_path / "in").as_uri(), size, parts=parts, config=FAULT_CONFIG, executor=ex, seed=seed)
        report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), workers, config, executor=ex, plan=ExchangePlan.direct(workers))
        assert ex.killed == 1
        result, _ = valsort((tmp_path / "out").as_uri(), FAULT_CONFIG, (tmp_path / "in").as_uri(), executor=ex)
    assert result.ok and result.records == size // 100, result.problems
    return report


def test_redis_killed_between_rounds_reruns_only_the_lost_round(tmp_path: Path) -> None:
    """Unpipelined: Redis dies as round 2's combiners start: round 2's objects are gone, so only
    round 2's producers run again (to the slow tier); later rounds spill; the sort is right,
    nothing is left on the slow tier (the fast one died with its objects)."""
    with RedisServer(tmp_path / "redis", maxmemory=6 << 20) as server:
        server.wait_ready()
        config = FAULT_CONFIG.with_(fast_tier=server.url("k"), tier="hybrid", pipelined=False)
        report = _sort_killing_redis(tmp_path, server, config, 2_000_000, 4, 8, 23)
        assert "fast_tier_fallback" not in report.summary  # not the whole job again
        (entry,) = report.exchanges
        (lost,) = report.summary["fast_tier_reruns"]["map"]
        assert lost.startswith("round 2:") and "ran again" in lost
        rounds = [s.name for s in report.stages if s.name.startswith("map round")]
        assert "map round 2/%d again" % entry["rounds"] in rounds and not any(r.startswith("map round 1/") and r.endswith("again") for r in rounds)
        again = report.stage("map round 2/%d again" % entry["rounds"])
        assert again.tasks == len(HybridPlan.build(8, 8, -(-8 // entry["rounds"])).round_producers(1))
        assert leftover_tmp((tmp_path / "out").as_uri(), FAULT_CONFIG) == []


def test_redis_killed_in_a_pipelined_run_sends_that_round_and_the_later_ones_to_the_slow_tier(tmp_path: Path) -> None:
    """A pipelined round's producers cannot spill one by one (its combiners read beside them): Redis
    dies as round 2 starts, round 2 runs again through the slow tier, and the later rounds go
    there without trying the dead server; the sort is right and nothing is left on the slow tier
    (the fast one died with its objects)."""
    with RedisServer(tmp_path / "redis", maxmemory=3 << 20) as server:
        server.wait_ready()
        config = FAULT_CONFIG.with_(fast_tier=server.url("p"), tier="hybrid", pipelined=True)
        report = _sort_killing_redis(tmp_path, server, config, 4_000_000, 8, 4, 29)
        (entry,) = report.exchanges
        assert entry["plan"].endswith(" pipelined") and entry["rounds"] >= 3, entry
        assert "fast_tier_fallback" not in report.summary  # not the whole job again
        lost = report.summary["fast_tier_reruns"]["map"]
        assert [x.split(":")[0] for x in lost] == [f"round {j}" for j in range(2, entry["rounds"] + 1)], lost
        assert "ran again" in lost[0] and all("not tried on the fast tier" in x for x in lost[1:]), lost
        names = {s.name for s in report.stages}
        assert "map round 1/%d" % entry["rounds"] in names and "map round 1/%d again" % entry["rounds"] not in names
        assert leftover_tmp((tmp_path / "out").as_uri(), FAULT_CONFIG) == []


class FillingExecutor(LocalExecutor):
    """The real local executor, except that another client fills the Redis server to the brim as
    round 2's pipelined call starts, and frees it again as that round's combiners run again."""

    def __init__(self, config: Config, server: RedisServer) -> None:
        super().__init__(config, task_attempts=1)
        self.junk = open_store(server.url("junk"), config)
        self.filled = self.freed = 0

    def map(self, tasks, config=None, on_done=None):  # type: ignore[no-untyped-def,override]
        ids = [t.id for t in tasks]
        if not self.filled and any(i.startswith("map-C2-") for i in ids):
            self.filled = 1
            while (self.junk.backend.free_memory() or 0) > 96 << 10:  # small writes: Redis also counts a request's input buffer
                try:
                    self.junk.put(f"brim-{self.filled:04d}", bytes(32 << 10))
                except StoreFullError:
                    break
                self.filled += 1
        if self.filled and not self.freed and any(i.startswith("map-C2a-") for i in ids):
            self.junk.delete([o.key for o in self.junk.list()])
            self.freed = 1
        return super().map(tasks, config, on_done)


def test_redis_full_in_a_pipelined_round_reruns_that_round_and_the_next_ones_use_it_again(tmp_path: Path) -> None:
    """A full fast tier is not a dead one: the round it refused runs again through the slow tier,
    its objects on the fast tier are deleted, and the next rounds use the fast tier again."""
    with RedisServer(tmp_path / "redis", maxmemory=3 << 20) as server:
        server.wait_ready()
        config = FAULT_CONFIG.with_(fast_tier=server.url("f"), tier="hybrid", pipelined=True)
        with FillingExecutor(Config(concurrency=2), server) as ex:
            gensort((tmp_path / "in").as_uri(), 4_000_000, parts=8, config=FAULT_CONFIG, executor=ex, seed=31)
            report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), 4, config, executor=ex, plan=ExchangePlan.direct(4))
            assert ex.filled > 1 and ex.freed == 1
            result, _ = valsort((tmp_path / "out").as_uri(), FAULT_CONFIG, (tmp_path / "in").as_uri(), executor=ex)
        assert result.ok and result.records == 40_000, result.problems
        (entry,) = report.exchanges
        assert entry["rounds"] >= 3, entry
        (lost,) = report.summary["fast_tier_reruns"]["map"]
        assert lost.startswith("round 2:") and "is full" in lost and "ran again" in lost, lost
        names = {s.name for s in report.stages}
        assert "map round 3/%d" % entry["rounds"] in names and "map round 3/%d again" % entry["rounds"] not in names
        assert leftover_tmp((tmp_path / "out").as_uri(), FAULT_CONFIG) == []
        assert fast_objects(server.url()) == []


def test_the_cli_forces_the_hybrid_variant_after_the_subcommand_too(tmp_path: Path, small_redis: RedisServer) -> None:
    import json

    from tests.test_guards_flags import invoke

    inp = str(tmp_path / "in")
    assert invoke("--concurrency", "2", "gensort", inp, "--size", "2MB", "--parts", "4")[0] == 0
    for flag, pipelined in (("--no-pipelined", False), ("--pipelined", True)):
        report = tmp_path / f"{flag}.json"
        code, text = invoke("sort", inp, str(tmp_path / f"out{flag}"), "--workers", "4", "--concurrency", "2", "--fast-tier", small_redis.url("c"), "--tier", "hybrid", flag, "--report", str(report))
        assert code == 0, text
        (entry,) = json.loads(report.read_text())["exchanges"]
        assert entry["plan"].startswith("hybrid") and entry["plan"].endswith(" pipelined") == pipelined, entry
        assert "(forced)" in entry["tier_why"], entry["tier_why"]


def test_a_join_with_both_sides_hybrid_equals_the_slow_tier(tmp_path: Path, small_redis: RedisServer) -> None:
    """Both inputs of a partition-wise join go through hybrid exchanges: they share one P."""
    rng = np.random.default_rng(9)
    left = pl.DataFrame({"k": rng.integers(0, 5_000, 80_000).astype(np.int64), "x": rng.integers(0, 100, 80_000)})
    right = pl.DataFrame({"k": np.arange(5_000, dtype=np.int64), "y": rng.integers(0, 100, 5_000)})
    for name, table, parts in (("left", left, 4), ("right", right, 2)):
        write_parts(table, tmp_path / name, len(table) // parts)
    slow = FAULT_CONFIG.with_(tmp_url=(tmp_path / "tmp").as_uri(), workers=3, broadcast_limit=0)  # a partition-wise join
    hybrid = slow.with_(fast_tier=small_redis.url("j"), tier="hybrid")
    got, report = join_on_both(tmp_path, {"slow": slow, "hybrid": hybrid})
    assert got["hybrid"].equals(got["slow"])
    plans = [e["plan"] for e in report.exchanges]
    joined = [e for e in report.exchanges if e["consumer"] == next(x["consumer"] for x in report.exchanges if x["producer"].startswith("s0") and x["plan"].startswith("hybrid"))]
    assert len(joined) == 2 and all(e["plan"].startswith("hybrid") for e in joined) and joined[0]["workers"] == joined[1]["workers"], plans
    assert fast_objects(small_redis.url()) == [] and leftover_tmp((tmp_path / "tmp").as_uri(), slow) == []


def test_an_auto_join_whose_build_side_goes_hybrid_gives_the_same_answer(tmp_path: Path, small_redis: RedisServer) -> None:
    """Auto on a request-bound slow store: the join's build side goes through the hybrid (its plan,
    bound early, fixes P for the probe side too); the probe side's tier is still the search's to
    choose (a hybrid plan is not one it can price as fixed), and the answer is the slow tier's."""
    starved = starved_profile(tmp_path)
    rng = np.random.default_rng(10)
    n = 1_200_000  # 19 MB through each exchange: more than the 6 MiB Redis holds, in rounds of whole producers
    left = pl.DataFrame({"k": rng.integers(0, n, n).astype(np.int64), "x": rng.integers(0, 100, n)})
    right = pl.DataFrame({"k": rng.permutation(n).astype(np.int64), "y": rng.integers(0, 100, n)})
    for name, table in (("left", left), ("right", right)):
        write_parts(table, tmp_path / name, n // 16)
    slow = FAULT_CONFIG.with_(tmp_url=(tmp_path / "tmp").as_uri(), workers=3, broadcast_limit=0)  # a partition-wise join
    auto = slow.with_(fast_tier=small_redis.url("a"), profile=starved)
    got, report = join_on_both(tmp_path, {"slow": slow, "auto": auto})
    assert got["auto"].equals(got["slow"])
    assert "fast_tier_fallback" not in report.summary, report.summary
    plans = {e["producer"]: e["plan"] for e in report.exchanges}
    assert next(p for s, p in plans.items() if s.endswith("-build")).startswith("hybrid"), plans
    assert fast_objects(small_redis.url()) == [] and leftover_tmp((tmp_path / "tmp").as_uri(), slow) == []


def test_explain_lists_the_tier_candidates_beside_the_algorithms(tmp_path: Path) -> None:
    """A fast tier of 6 MiB and ~4 MB of input in 8 files: explain shows slow and hybrid candidates
    of the selector's search with their dominant terms, and the fast tier's as not fitting whole
    (the share of producers it holds, the others spilling)."""
    from dataclasses import replace

    rng = np.random.default_rng(1)
    (tmp_path / "t").mkdir()
    for i in range(8):
        pl.DataFrame({"k": rng.integers(0, 1 << 40, 40_000), "x": rng.normal(size=40_000)}).write_parquet(tmp_path / "t" / f"{i}.parquet")
    replace(FastTierProfile.load("redis-loopback"), capacity=6 << 20).save(tmp_path / "tiny.json")
    config = Config(fast_tier="redis://127.0.0.1:1/p", fast_profile=str(tmp_path / "tiny.json"), tmp_url=(tmp_path / "tmp").as_uri(), concurrency=2)
    text = cf.scan_parquet(str(tmp_path / "t"), config=config).group_by("k").agg(col("x").sum()).explain()
    assert "    tier: " in text and "the selector over tier x algorithm x P" in text, text
    assert "tier slow" in text and "tier hybrid" in text and "hybrid r=" in text, text
    import re

    assert re.search(r"fast: \S+ P=\d+ with \d+% of its producers' objects there, the others spilling to the slow tier", text), text
    assert re.search(r"@fast \d+% +P=", text), text
