"""The discrete-event simulator (croupier.sim.engine) against hand-computed timelines."""

from __future__ import annotations

from dataclasses import replace

import pytest

from croupier.exchange.plan import ExchangePlan
from croupier.model.profile import StorageProfile
from croupier.sim.engine import Batch, NetworkBucket, SimSettings, Simulation, StageSpec, Store, TaskIO, TaskRecord, simulate_sort, sort_stages
from croupier.sim.platform import Invocation, Network, Platform, Speculation, StoreLimits, Stragglers

MiB, GiB = 2**20, 2**30


def quiet_platform(**changes: object) -> Platform:
    """A platform with round numbers: 1 MB/s network, no latency, no stragglers, 10 invocations/s."""
    base = Platform.load("aws-lambda")
    platform = replace(
        base,
        storage=StoreLimits(put_rate=1e9, get_rate=1e9, get_latency=0.0, put_latency=0.0),
        network=Network(burst_bytes_per_second=1e6, burst_bytes=0, sustained_bytes_per_second=1e6),
        invocation=Invocation(driver_rate=10.0, worker_rate=10.0, latency=0.0, cold_start=0.0, two_level_from=10**9),
        stragglers=Stragglers(probability=0.0),
    )
    return replace(platform, **changes)


def test_token_bucket_burst_then_sustained() -> None:
    net = Network(burst_bytes_per_second=1.2 * GiB, burst_bytes=300 * MiB, sustained_bytes_per_second=75 * MiB)
    bucket = NetworkBucket(net)
    # 1 GiB from a full bucket: at 1.2 GiB/s until the 300 MiB of tokens drain at (1.2 GiB - 75 MiB)/s,
    # then the rest at 75 MiB/s
    drain = 300 * MiB / (1.2 * GiB - 75 * MiB)
    at_burst = 1.2 * GiB * drain
    expected = drain + (GiB - at_burst) / (75 * MiB)
    assert bucket.transfer(0.0, GiB) == pytest.approx(expected)
    assert expected == pytest.approx(9.65, abs=0.01)
    # empty now: 75 MiB at the sustained rate take 1 s
    assert bucket.transfer(bucket.free, 75 * MiB) == pytest.approx(expected + 1.0)
    # 4 s idle refill 300 MiB: a 100 MiB transfer goes at the burst rate
    start = bucket.free + 4.0
    assert bucket.transfer(start, 100 * MiB) == pytest.approx(start + 100 * MiB / (1.2 * GiB))


def test_transfers_of_one_function_queue() -> None:
    bucket = NetworkBucket(Network(1e6, 0, 1e6))
    assert bucket.transfer(0.0, 1e6) == pytest.approx(1.0)
    assert bucket.transfer(0.5, 1e6) == pytest.approx(2.0)  # waits for the first


def test_prefix_rate_limit_throttles_then_refills() -> None:
    store = Store("s", StoreLimits(put_rate=10, get_rate=20, initial_partitions=1, max_partitions=1))
    assert all(store.admit(0.0, "k", "PUT", 1) for _ in range(10))
    assert not store.admit(0.0, "k", "PUT", 1)  # the 11th in the same instant: 503
    assert store.throttles == 1
    assert store.admit(0.0, "k", "GET", 20)  # GETs have their own budget
    assert [store.admit(0.5, "k", "PUT", 1) for _ in range(6)] == [True] * 5 + [False]


def test_prefix_scale_up_after_sustained_throttling() -> None:
    store = Store("s", StoreLimits(put_rate=1, initial_partitions=1, max_partitions=4, scale_after_seconds=10))
    t = 0.0
    while t < 35:
        store.admit(t, "k", "PUT", 5)
        t += 0.5
    assert store.partitions == 4  # doubled at 10 s and 20 s of throttling, capped at 4
    quiet = Store("s", StoreLimits(put_rate=100, initial_partitions=1, max_partitions=4, scale_after_seconds=10))
    for i in range(100):
        quiet.admit(i * 0.5, "k", "PUT", 1)
    assert quiet.partitions == 1 and quiet.throttles == 0


def test_small_stages_against_a_hand_timeline() -> None:
    # two tasks: read 1 MB (1 s), compute 0.5 s, write two 0.5 MB objects on one stream (1 s);
    # the driver invokes at 10/s: slot 0 runs at 0.1 s, slot 1 at 0.2 s
    task = TaskIO((Batch("a", 1, 1e6),), "store", 1, 0.5, (Batch("x", 1, 5e5), Batch("y", 1, 5e5)), "store", 1)
    sim = Simulation(quiet_platform(), seed=1, settings=SimSettings(speculation=False))
    result = sim.run([StageSpec("one", (task, task)), StageSpec("two", (task,))])
    assert result.stages["one"] == pytest.approx((0.0, 2.7))
    # stage two: its one task is invoked when stage one ends: 2.7 + 0.1, then 2.5 s of work
    assert result.stages["two"] == pytest.approx((2.7, 5.3))
    assert result.seconds == pytest.approx(5.3)
    first = sorted(r.end for r in result.tasks if r.stage == "one")
    assert first == pytest.approx([2.6, 2.7])
    parts = result.tasks[0].parts
    assert parts["read"] == pytest.approx(1.0) and parts["compute"] == pytest.approx(0.5) and parts["write"] == pytest.approx(1.0)
    assert result.requests["store"] == {"GET": 3.0, "PUT": 6.0}


def test_parallel_streams_share_the_function_network() -> None:
    # 4 reads of 0.5 MB on 4 streams through one 1 MB/s network: 2 s, not 0.5 s
    task = TaskIO(tuple(Batch(f"k{i}", 1, 5e5) for i in range(4)), "store", 4, 0.0, (), "store")
    result = Simulation(quiet_platform(), settings=SimSettings(speculation=False)).run([StageSpec("s", (task,))])
    assert result.seconds == pytest.approx(0.1 + 2.0)


def test_throttled_requests_back_off_and_all_complete() -> None:
    platform = quiet_platform(storage=StoreLimits(put_rate=10, get_rate=10, get_latency=0.0, put_latency=0.0, backoff_base=0.05, backoff_cap=0.2, max_partitions=1))
    task = TaskIO((), "store", 1, 0.0, tuple(Batch("same/prefix", 1, 0.0) for _ in range(30)), "store", 1)
    result = Simulation(platform, seed=3, settings=SimSettings(speculation=False)).run([StageSpec("w", (task,))])
    assert result.requests["store"]["PUT"] == 30  # every request got through in the end
    assert result.throttles["store"] > 0
    assert result.seconds >= 0.1 + 2.0  # 10 at once, then 10 per second for the other 20
    assert result.tasks[0].parts["backoff"] > 0


def test_two_level_invocation_starts_the_last_function_sooner() -> None:
    inv = Invocation(driver_rate=250, worker_rate=250, latency=0.05, cold_start=0.25, two_level_from=256)
    one = Simulation(quiet_platform(invocation=replace(inv, two_level_from=10**9)))._first_wave(400, 1.0, 0.0)
    two = Simulation(quiet_platform(invocation=inv))._first_wave(400, 1.0, 0.0)
    assert one[-1] == pytest.approx(400 / 250 + 0.3)
    # g = 20: the last is the 20th child of the 20th first-generation function
    assert two[-1] == pytest.approx(20 / 250 + 0.3 + 19 / 250 + 0.3)
    assert max(two) < max(one)


def test_speculation_replaces_a_straggler_by_its_backup() -> None:
    sim = Simulation(quiet_platform(speculation=Speculation(after_fraction=0.9, factor=1.5)))
    records = [TaskRecord("s", 0.0, 0.0, 1.0) for _ in range(10)] + [TaskRecord("s", 0.0, 0.0, 10.0)]
    # 90% done at 1.0 s; the median is 1 s; the backup starts at 1.0 and takes latency 0 + 1 s
    assert sim._speculate(records, 10.0) == pytest.approx(2.0)
    assert sim.speculated == 1


def test_sort_stages_use_the_plans_objects() -> None:
    profile = StorageProfile.load("aws-s3")
    plan = ExchangePlan.direct(3)
    stages = sort_stages(plan, 9_000_000, profile)
    assert [s.name for s in stages] == ["map", "reduce"]
    map_task, reduce_task = stages[0].tasks[1], stages[1].tasks[2]
    assert [b.key for b in map_task.writes] == [w.key for w in plan.writes(0, 1)]
    assert [b.key for b in reduce_task.reads] == [r.key for r in plan.reads(0, 2)]
    assert sum(b.nbytes for t in stages[0].tasks for b in t.writes) == pytest.approx(9_000_000)
    two = sort_stages(ExchangePlan(plan.topology.__class__((3, 2)), True), 6_000_000, profile)
    assert [s.name for s in two] == ["map", "level 2", "reduce"]
    assert sum(b.count for t in two[1].tasks for b in t.reads) == sum(c.ranged_gets for c in ExchangePlan(plan.topology.__class__((3, 2)), True).counts()[:1])


def test_simulation_is_deterministic_under_a_seed() -> None:
    platform = replace(Platform.load("aws-lambda"), stragglers=Stragglers(probability=0.3, slowdown=3.0))
    profile = StorageProfile.load("aws-s3")
    plan = ExchangePlan.direct(20)
    a = simulate_sort(plan, 2_000_000_000, platform, profile, seed=7)
    b = simulate_sort(plan, 2_000_000_000, platform, profile, seed=7)
    c = simulate_sort(plan, 2_000_000_000, platform, profile, seed=8)
    assert a.seconds == b.seconds and [t.end for t in a.tasks] == [t.end for t in b.tasks]
    assert [t.straggler for t in a.tasks] != [t.straggler for t in c.tasks]


def test_fast_tier_link_caps_bandwidth() -> None:
    store = Store("fast", StoreLimits(), bandwidth_cap=1e6)
    assert store.link(0.0, 1e6) == pytest.approx(1.0)
    assert store.link(0.0, 1e6) == pytest.approx(2.0)  # the second transfer waits for the link
    assert Store("s3", StoreLimits()).link(5.0, 1e9) == 5.0  # no cap: no wait


def test_store_aggregate_bandwidth_is_shared_by_all_functions() -> None:
    # 4 functions each read 1 MB at 1 MB/s of their own network, through a store that moves 2 MB/s in all:
    # 4 MB take 2 s on the store's link (not 1 s); the driver invokes them at 0.1 .. 0.4 s
    task = TaskIO((Batch("a", 1, 1e6),), "store", 1, 0.0, (), "store")
    limits = StoreLimits(put_rate=1e9, get_rate=1e9, get_latency=0.0, put_latency=0.0, aggregate_bandwidth=2e6)
    result = Simulation(quiet_platform(storage=limits), settings=SimSettings(speculation=False)).run([StageSpec("s", (task,) * 4)])
    assert result.seconds == pytest.approx(0.1 + 2.0)
    free = Simulation(quiet_platform(), settings=SimSettings(speculation=False)).run([StageSpec("s", (task,) * 4)])
    assert free.seconds == pytest.approx(0.4 + 1.0)
