"""The discrete-event simulator (croupier.sim.engine) against hand-computed timelines."""

from __future__ import annotations

from dataclasses import replace

import pytest

from croupier.errors import ConfigError
from croupier.exchange.plan import ExchangePlan, all_plans
from croupier.model.perf import predict, stage_facts
from croupier.model.profile import Curve, StorageProfile
from croupier.model.stage import kind_seconds
from croupier.sim.engine import Batch, NetworkBucket, ProfileIO, SimSettings, Simulation, StageSpec, Store, TaskIO, TaskRecord, simulate_sort, sort_stages
from croupier.sim.platform import WRITE_STREAMS, Invocation, Network, Platform, Speculation, StoreLimits, Stragglers, platform_of_profile

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


# --- a store this machine calibrated: the simulator on the model's terms -------------------------
def calibrated_profile(**changes: object) -> StorageProfile:
    """A calibrated-store-like profile with round numbers: reads 10 req/s per stream (ceiling 40),
    writes 5 req/s per stream (ceiling 10), at every size; bandwidths 100 MB/s read, 10 MB/s write."""
    profile = StorageProfile(
        name="round",
        source="test",
        read=Curve((1e3, 1e6), (10.0, 10.0), (40.0, 40.0)),
        write=Curve((1e3, 1e6), (5.0, 5.0), (10.0, 10.0)),
        read_bandwidth=100e6,
        write_bandwidth=10e6,
        startup_seconds=0.0,
        wave_seconds=0.0,
        concurrency=2,
    )
    return replace(profile, **changes)


def test_profile_io_reads_and_writes_at_their_own_curve_bandwidth_and_multiplier() -> None:
    io = ProfileIO(calibrated_profile(read_scale=2.0, write_scale=3.0))
    # 1 kB: the curve's 1 / a(s) dominates (0.1 s read, 0.2 s write), times the multiplier; the
    # store's share is scale / qmax(s)
    assert io.seconds("GET", 1e3) == pytest.approx((2 * 0.1, 2 / 40))
    assert io.seconds("PUT", 1e3) == pytest.approx((3 * 0.2, 3 / 10))
    # 1 MB: 1 MB / 10 MB/s = 0.1 s per write against 1 / a = 0.2 s: the slower one counts
    assert io.seconds("PUT", 1e6)[0] == pytest.approx(3 * max(0.2, 0.1))
    # 10 MB (beyond the grid: a(s) falls as 1/s past the largest size): reads at 100 MB/s vs 1 / a
    a = Curve((1e3, 1e6), (10.0, 10.0), (40.0, 40.0)).q(1e7, 1.0)
    assert io.seconds("GET", 1e7)[0] == pytest.approx(2 * max(1 / a, 0.1))


def test_derived_platform_streams_add_up_until_the_store_ceiling() -> None:
    profile = calibrated_profile()
    platform = platform_of_profile(profile)
    assert platform.io_from_profile and platform.write_streams == 1
    # one task fetching 8 small objects on 8 streams: each stream busy 0.1 s, the store serves 40/s: 0.2 s
    reads = tuple(Batch(f"k{i}", 1, 1e3) for i in range(8))
    task = TaskIO(reads, "store", 8, 0.0, (), "store")
    result = Simulation(platform, settings=SimSettings(speculation=False), profile=profile).run([StageSpec("s", (task,))])
    assert result.seconds == pytest.approx(8 / 40)
    # on 2 streams the streams are the limit: 4 requests of 0.1 s each
    task2 = replace(task, read_streams=2)
    result2 = Simulation(platform, settings=SimSettings(speculation=False), profile=profile).run([StageSpec("s", (task2,))])
    assert result2.seconds == pytest.approx(0.4)


def test_derived_platform_needs_its_profile() -> None:
    with pytest.raises(ConfigError, match="pass the profile"):
        Simulation(platform_of_profile(calibrated_profile()))


def test_start_up_is_t0_plus_t1_per_wave_and_first_touch_once_per_function() -> None:
    profile = calibrated_profile(startup_seconds=0.5, wave_seconds=0.1, concurrency=1)
    platform = platform_of_profile(profile)
    task = TaskIO((), "store", 1, 1.0, (), "store", first_touch=0.25)
    result = Simulation(platform, settings=SimSettings(speculation=False), profile=profile).run([StageSpec("s", (task,) * 3)])
    # one function, 3 waves: t0 + 3 t1 of start-up, 3 s of compute, first touch once
    assert result.seconds == pytest.approx(0.5 + 3 * 0.1 + 3 * 1.0 + 0.25)
    assert [t.parts["compute"] for t in result.tasks] == pytest.approx([1.25, 1.0, 1.0])


@pytest.mark.parametrize("speculation", [False, True])
def test_unequal_tasks_end_a_stage_imbalance_times_one_task_s_work_later(speculation: bool) -> None:
    # the model's imbalance term g * (compute + storage) / waves, first touch aside: simulated
    # tasks are equal, real ones are not; speculation (no straggler to back up here) keeps it
    profile = calibrated_profile(startup_seconds=0.5, wave_seconds=0.1, concurrency=2, imbalance=0.1)
    platform = platform_of_profile(profile)
    task = TaskIO((), "store", 1, 1.0, (), "store", first_touch=0.25)
    result = Simulation(platform, settings=SimSettings(speculation=speculation), profile=profile).run([StageSpec("s", (task,) * 6)])
    # two functions, 3 waves: t0 + 3 t1, 3 s of compute and 0.25 s of first touch per function,
    # then 10% of one task's 1 s
    assert result.seconds == pytest.approx(0.5 + 3 * 0.1 + 3.0 + 0.25 + 0.1 * 1.0)


def test_cloud_platforms_leave_unequal_tasks_to_their_stragglers() -> None:
    profile = calibrated_profile(imbalance=0.1)
    task = TaskIO((), "store", 1, 1.0, (), "store")
    quiet = Simulation(quiet_platform(), settings=SimSettings(speculation=False), profile=profile).run([StageSpec("s", (task,) * 4)])
    assert quiet.seconds == pytest.approx(Simulation(quiet_platform(), settings=SimSettings(speculation=False)).run([StageSpec("s", (task,) * 4)]).seconds)


def test_sort_stages_compute_is_the_models() -> None:
    # per-call cost of exchange reads is paid per fetched object, as the model's phase_calls does
    profile = calibrated_profile(compute={"": 1e-9}, call_seconds={"read:exchange": 0.01}, first_touch_seconds_per_byte=1e-9)
    plan = ExchangePlan.direct(4)
    stages = sort_stages(plan, 8_000_000, profile, write_streams=1)
    facts = stage_facts(plan, 8_000_000)
    for stage, fact in zip(stages, facts):
        per_byte, per_call = kind_seconds(fact, profile)
        assert stage.tasks[0].compute_seconds == pytest.approx((sum(per_byte.values()) + sum(per_call.values())) / fact.tasks)
        assert stage.tasks[0].first_touch == pytest.approx(2_000_000 * 1e-9)
        assert all(t.write_streams == 1 for t in stage.tasks)
    reduce_calls = kind_seconds(facts[1], profile)[1]["read:exchange-records"]
    assert reduce_calls == pytest.approx(0.01 * 16)  # 4 consumers fetch 4 objects each


def seaweedfs_calibrated() -> StorageProfile:
    """A SeaweedFS profile as a 2-core machine calibrated it (rounded): reads 4x the write bandwidth,
    writes slowed by their multiplier, per-object call costs, first touch."""
    return StorageProfile(
        name="seaweedfs-calibrated",
        source="test: a calibration on 2 cores",
        read=Curve((4096.0, 65536.0, 1048576.0, 4194304.0), (1310.0, 1330.0, 479.0, 108.0), (3880.0, 3160.0, 849.0, 323.0)),
        write=Curve((4096.0, 65536.0, 1048576.0, 4194304.0), (924.0, 609.0, 100.0, 27.1), (2300.0, 1630.0, 218.0, 59.6)),
        read_bandwidth=453e6,
        write_bandwidth=114e6,
        startup_seconds=0.00059,
        wave_seconds=0.0,
        compute={"read:exchange-records": 1.57e-09, "read:records-gensort": 1.06e-11, "records_sort": 1.18e-09, "regroup": 0.0, "write:exchange-records": 4.27e-09, "write:output-records-gensort": 4.44e-13},
        call_seconds={"read:exchange-records": 0.00103, "regroup": 0.00157, "write:exchange-records": 0.00861, "write:output-records-gensort": 9.03e-05},
        read_scale=1.02,
        write_scale=1.31,
        first_touch_seconds_per_byte=6.26e-10,
        concurrency=2,
        max_streams=8,
    )


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_simulated_sort_on_a_derived_platform_agrees_with_the_model(workers: int) -> None:
    # both from one profile, on the same terms: they agree (the simulator used to take twice the
    # model's time: reads at the write bandwidth, 8 writes in flight sharing one network bucket)
    profile = seaweedfs_calibrated()
    platform = platform_of_profile(profile)
    for plan in all_plans(workers, 2):
        simulated = simulate_sort(plan, 100_000_000, platform, profile, settings=SimSettings(speculation=False)).seconds
        assert simulated == pytest.approx(predict(plan, 100_000_000, profile).seconds, rel=0.15), plan.name


@pytest.mark.parametrize("workers", [2, 8])
def test_imbalance_adds_the_same_to_simulation_and_model(workers: int) -> None:
    # what g = 0.08 adds is g times the work in both (the work itself agrees within 15%): a
    # simulator ignoring it would add nothing, one counting it twice twice as much
    plain, unequal = seaweedfs_calibrated(), replace(seaweedfs_calibrated(), imbalance=0.08)
    for plan in all_plans(workers, 2):
        added = [
            simulate_sort(plan, 100_000_000, platform_of_profile(p), p, settings=SimSettings(speculation=False)).seconds for p in (unequal, plain)
        ]
        modelled = predict(plan, 100_000_000, unequal).seconds - predict(plan, 100_000_000, plain).seconds
        assert modelled > 0 and added[0] - added[1] == pytest.approx(modelled, rel=0.15), plan.name


def test_cloud_platforms_keep_their_network_and_writer_threads() -> None:
    platform = Platform.load("aws-lambda")
    assert not platform.io_from_profile and platform.write_streams == WRITE_STREAMS
    stages = sort_stages(ExchangePlan.direct(16), 16_000_000, StorageProfile.load("aws-s3"))
    assert stages[0].tasks[0].write_streams == WRITE_STREAMS
