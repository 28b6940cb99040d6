"""Profiles, calibration, models, selector and explain."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from croupier.cli import main
from croupier.config import Config
from croupier.errors import ConfigError
from croupier.exchange.plan import ExchangePlan, all_plans
from croupier.exchange.topology import Topology
from croupier.jobs import calibrate as cal
from croupier.model.fit import fit_curve
from croupier.model.perf import Prediction, cost, predict
from croupier.model.profile import Curve, Prices, StorageProfile, shipped_names
from croupier.model.selector import choose, search_range
from croupier.model.stage import StagePrediction, Term


def toy_profile(**changes: object) -> StorageProfile:
    """A store with a hard request ceiling, so request counts matter."""
    base = dict(
        name="toy", source="test",
        read=Curve((1e3, 1e6, 1e8), (100.0, 50.0, 1.0), (2000.0, 1000.0, 50.0)),
        write=Curve((1e3, 1e6, 1e8), (50.0, 25.0, 0.5), (1000.0, 500.0, 25.0)),
        read_bandwidth=100e6, write_bandwidth=50e6, startup_seconds=0.5, wave_seconds=0.1,
        compute={"write:exchange-records": 1e-9, "records_sort": 2e-9, "regroup": 5e-10, "read:": 0.0},
        concurrency=1000, function_memory=2 << 30,
        prices=Prices(1.7e-5, 0.2e-6, 4e-7, 5e-6, 8.9e-9, "SEER Table 7 AWS"),
    )
    base.update(changes)
    return StorageProfile(**base)  # type: ignore[arg-type]


def test_curve_is_linear_then_flat_and_interpolates() -> None:
    curve = Curve((1e3, 1e5), (100.0, 10.0), (1000.0, 50.0))
    assert curve.q(1e3, 2) == 200 and curve.q(1e3, 50) == 1000
    assert curve.q(1e4, 1) == pytest.approx(math.sqrt(100 * 10))  # log-log between sizes
    assert curve.q(1e6, 1000) == pytest.approx(50 * 1e5 / 1e6)  # beyond the largest size: bandwidth-like


def test_fit_recovers_a_known_curve() -> None:
    points = {(s, p): min(a * p, q) for s, a, q in ((4096, 100.0, 350.0), (65536, 40.0, 100.0)) for p in (1, 2, 4, 8)}
    curve, error = fit_curve(points, [4096, 65536])
    assert curve.per_worker == (100.0, 40.0) and curve.ceiling == (350.0, 100.0)
    assert error == 0


def test_prediction_terms_follow_eq_1_and_name_the_dominant_one() -> None:
    profile = toy_profile(compute={"": 0.0}, startup_seconds=0, wave_seconds=0)
    d, p = 10**9, 100
    direct = predict(ExchangePlan.direct(p), d, profile)
    map_stage = direct.stages[0]
    write = [t for t in map_stage.terms if t.name.startswith("write")][0]
    s = d / p**2
    assert write.seconds == pytest.approx(max(d / (50e6 * p), p * p / profile.write.q(s, p)))
    assert direct.dominant().name == "write throughput" and "10,000 writes" in direct.dominant().why
    two = predict(ExchangePlan(Topology((10, 10)), combine=True), d, profile)
    assert two.seconds < direct.seconds  # far fewer requests under a request ceiling
    assert len(two.stages) == 3 and "dominant" in two.explain()


def test_cost_follows_eq_4() -> None:
    profile = toy_profile()
    pred = predict(ExchangePlan.direct(10), 10**8, profile)
    prices = profile.prices
    # each stage's 10 functions (2 GiB) for that stage's time, and one invocation per task
    functions = sum(prices.function_gb_second * s.seconds * 2 * 10 for s in pred.stages) + prices.invocation * 10 * 2
    requests = prices.read_request * 110 + prices.write_request * 110
    storage = prices.storage_gb_second * pred.seconds * 0.1
    assert pred.cost == pytest.approx(functions + requests + storage)


def test_cost_bills_each_stage_once_for_its_own_time() -> None:
    """A 3-stage plan with hand-set stage times: 2 + 5 + 3 s; P = 9 functions of 1 GiB, 4 at
    once: each stage bills 4 running functions for its time (not P for the whole plan, per stage)."""
    profile = toy_profile(function_memory=1 << 30, concurrency=4, prices=Prices(1e-3, 1e-4, 0.0, 0.0, 0.0, "test"))
    plan = ExchangePlan(Topology((3, 3)))
    stages = tuple(StagePrediction(n, (Term("write bandwidth", t),)) for n, t in (("map", 2.0), ("level-2", 5.0), ("reduce", 3.0)))
    pred = Prediction(plan, 10**6, stages, {})
    assert cost(pred, profile) == pytest.approx(1e-3 * 4 * (2 + 5 + 3) + 1e-4 * 27)
    assert cost(Prediction(plan, 10**6, stages[1:], {}), profile) == pytest.approx(1e-3 * 4 * 8 + 1e-4 * 18)  # producers left out
    assert cost(pred, profile, concurrency=100) == pytest.approx(1e-3 * 9 * 10 + 1e-4 * 27)


def test_selector_searches_from_the_memory_bound_and_can_fix_p() -> None:
    profile = toy_profile(function_memory=1 << 30, concurrency=200)
    d = 100 * 2**30
    assert search_range(d, profile).start == math.ceil(d / (((1 << 30) - (128 << 20)) * 0.25))  # the function baseline is not data
    choice = choose(d, profile)
    assert choice.best.workers >= 400 and choice.best.seconds == min(c.seconds for c in choice.candidates)
    fixed = choose(d, profile, workers=36)
    assert {c.workers for c in fixed.candidates} == {36} and len(fixed.candidates) == len(all_plans(36, 3, memory=False))  # (a memory level's group of 100 GiB / 12 does not fit a function)
    text = choice.explain(5)
    assert "choice:" in text and "dominated by" in text and "topology" in text


def test_coarse_set_keeps_the_small_p_the_steps_the_largest_and_the_balanced_shapes() -> None:
    from croupier.model import selector

    sizes = list(range(40, 1001))
    coarse = selector._coarse(sizes)
    assert coarse[: selector.EVERY_P] == sizes[: selector.EVERY_P] and coarse[-1] == 1000
    assert {506, 529, 625, 729, 992} <= set(coarse)  # 23x22, 23^2, 25^2, 9^3, 32x31
    assert len(coarse) < len(sizes) / 3
    assert all(b / a <= selector.COARSE_STEP + 0.01 for a, b in zip(coarse[selector.EVERY_P - 1 :], coarse[selector.EVERY_P :]))


@pytest.mark.parametrize(("name", "memory", "size", "objective"), [("aws-s3", 3 << 30, 100 * 10**9, "time"), ("ibm-cos", 1 << 30, 20 * 10**9, "cost")])
def test_coarse_to_fine_search_picks_what_trying_every_p_picks(name: str, memory: int, size: int, objective: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With hundreds of P to try, the selector searches coarse to fine; it picks the plan that
    trying every P picks (a 100 GB sort's was 2-level 23x22 at P = 506, between coarse steps),
    at a fraction of the candidates."""
    from dataclasses import replace

    from croupier.model import selector

    profile = replace(StorageProfile.load(name), function_memory=memory)
    searched, threshold = choose(size, profile, objective=objective, max_workers=600), selector.EVERY_P
    monkeypatch.setattr(selector, "EVERY_P", 10**6)
    every = choose(size, profile, objective=objective, max_workers=600)
    assert len({c.workers for c in every.candidates}) > 2 * threshold  # hundreds of P to try: the search ran
    assert len(searched.candidates) < len(every.candidates) / 2
    assert (searched.best.plan, searched.best.seconds, searched.best.cost) == (every.best.plan, every.best.seconds, every.best.cost)


def test_the_chosen_candidate_is_always_in_the_table() -> None:
    """When the robust choice is not among the best point estimates, the table still lists it,
    marked, so the table shows what runs."""
    from dataclasses import replace

    from croupier.model.selector import Choice

    choice = choose(10**9, toy_profile(concurrency=64))
    ranked = sorted(choice.candidates, key=lambda c: c.seconds)
    last = ranked[-1]
    moved = replace(choice, best=last, point=ranked[0])
    assert moved.ranked(3)[-1] is last and len(moved.ranked(3)) == 4
    marked = [line for line in moved.explain(3).splitlines() if line.startswith("*")]
    assert len(marked) == 1 and f"{last.workers:>5}" in marked[0]
    assert isinstance(choice, Choice) and len(choice.ranked(3)) == 3


def test_cost_objective_and_budget() -> None:
    profile = toy_profile(concurrency=64)
    fast = choose(10**9, profile, "time")
    cheap = choose(10**9, profile, "cost")
    assert cheap.best.cost <= fast.best.cost and fast.best.seconds <= cheap.best.seconds
    budget = (cheap.best.cost + fast.best.cost) / 2
    within = choose(10**9, profile, "time", budget=budget)
    assert within.best.cost <= budget
    with pytest.raises(ConfigError, match="no configuration fits the budget"):
        choose(10**9, profile, "time", budget=cheap.best.cost / 10)


def test_shipped_profiles_load_and_say_where_numbers_come_from() -> None:
    assert {"aws-s3", "ibm-cos", "local", "seaweedfs-loopback"} <= set(shipped_names())
    aws = StorageProfile.load("aws-s3")
    assert "Optimizing performance" in aws.source and aws.prices.write_request == 5e-6
    assert set(aws.write.ceiling) == {3500} and set(aws.read.ceiling) == {5500}  # S3's per-prefix rates at every size
    locus = StorageProfile.load("aws-s3-2018")
    assert "Locus Table 1" in locus.source and locus.read.ceiling[0] == 5986 and locus.write.q(2.25e6, 1e6) == pytest.approx(3210)  # by size bucket
    assert "SEER Table 7" in StorageProfile.load("ibm-cos").prices.source
    with pytest.raises(ConfigError, match="shipped: "):
        StorageProfile.load("nope")


def test_profile_roundtrip_and_version_check(tmp_path: Path) -> None:
    profile = toy_profile()
    profile.save(tmp_path / "p.json")
    assert StorageProfile.load(tmp_path / "p.json") == profile
    data = json.loads((tmp_path / "p.json").read_text())
    data["version"] = 99
    (tmp_path / "old.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="recalibrate"):
        StorageProfile.load(tmp_path / "old.json")


def test_a_cached_profile_of_another_calibration_workload_is_recalibrated(tmp_path: Path) -> None:
    """Cached stages measured by another calibration workload, and coefficients that meant other
    things (an imbalance on all the work), are not reused: the entry reads as missing, so the next
    run calibrates again and writes over it."""
    from croupier.model.cache import Entry, ProfileCache

    cache = ProfileCache(tmp_path)
    path = cache.save(Entry(toy_profile()), "m", "s", 2)
    assert cache.load("m", "s", 2) is not None
    data = json.loads(path.read_text())
    del data["workload"]  # as written before the workload had a number
    path.write_text(json.dumps(data))
    assert cache.load("m", "s", 2) is None


def test_calibration_grid_measures_a_real_store(store_env: tuple[str, Config]) -> None:
    """A small request grid on the local folder and on SeaweedFS: curves fitted, fit reported, JSON saved."""
    from croupier.compute.local import LocalExecutor
    from croupier.dag import calibration

    root, config = store_env
    with LocalExecutor(config) as executor:
        points, streams = calibration.grid_points(executor, config, f"{root}/cal", calibration.TEST)
    profile = calibration.grid_profile("under-test", points, streams, config, calibration.TEST)
    assert profile.read.sizes == (4096.0, 262144.0) and streams == 2 * config.concurrency
    assert {p for _, p in points["read"]} == {1, config.concurrency, 2 * config.concurrency}
    assert all(q > 0 for q in profile.read.per_worker + profile.write.ceiling)
    assert profile.read_bandwidth > 0 and profile.fit["read_mape_percent"] >= 0
    assert "req/s per stream" in cal.describe(profile)
    assert StorageProfile.from_dict(json.loads(profile.to_json())) == profile


def test_late_binding_sort_chooses_and_reports(tmp_path: Path) -> None:
    from croupier.jobs.gensort import gensort
    from croupier.jobs.sort import sort
    from croupier.jobs.valsort import valsort

    config = Config(concurrency=2, profile="seaweedfs-loopback", max_workers=64)
    inp, out = (tmp_path / "in").as_uri(), (tmp_path / "out").as_uri()
    gensort(inp, 200_000, parts=2, config=config)
    report = sort(inp, out, None, config)
    assert report.summary["measured_data_bytes"] == 200_000
    assert "choice:" in report.summary["selector"] and "predicted/measured s" in report.summary
    assert valsort(out, config, inp)[0].ok


def test_explain_and_calibrate_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["explain", "--size", "10GB", "--profile", "aws-s3", "--rows", "4"])
    assert result.exit_code == 0, result.output
    assert "choice:" in result.output and "dominant:" in result.output
    result = runner.invoke(main, ["explain"])
    assert result.exit_code != 0 and "give IN" in result.output


def test_first_touch_term_favours_smaller_tasks() -> None:
    profile = toy_profile(first_touch_seconds_per_byte=1e-9, concurrency=2)
    small, large = (predict(ExchangePlan.direct(p), 10**9, profile) for p in (16, 2))
    touch = lambda pred: sum(t.seconds for s in pred.stages for t in s.terms if t.name == "first-touch memory")  # noqa: E731
    assert touch(large) == pytest.approx(2 * 10**9 / 2 * 1e-9)  # D/P per stage, two stages
    assert touch(small) == pytest.approx(touch(large) / 8)


def test_selector_can_be_held_to_one_algorithm() -> None:
    profile = toy_profile()
    choice = choose(400_000_000, profile, algorithm="2-level+wc", max_workers=64)
    assert {c.plan.family for c in choice.candidates} == {"2-level+wc"}
    assert choice.best.plan.family == "2-level+wc"
    with pytest.raises(ConfigError, match="no '4-level' exchange"):
        choose(400_000_000, profile, algorithm="4-level", max_workers=64)


def test_a_late_bound_exchange_considers_only_p_that_split_its_buckets_evenly() -> None:
    """Its partitions are runs of whole fine buckets: with B = 32, P = 13 would give runs of 3
    and 2 (the largest 1.22 of an even share), so it is no candidate; P = 12 (1.125) is. A forced
    P is taken as it is."""
    profile = StorageProfile.load("local")
    choice = choose(64 << 20, profile, concurrency=2, max_workers=32, senders=4, buckets=32, producers_done=True)
    assert {c.workers for c in choice.candidates} == {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 16, 17, 18, 32}
    unbound = choose(64 << 20, profile, concurrency=2, max_workers=32, senders=4)
    assert {c.workers for c in unbound.candidates} == set(range(1, 33)), "P bound before the producers write: any"
    assert {c.workers for c in choose(64 << 20, profile, workers=13, senders=4, buckets=32, producers_done=True).candidates} == {13}


def test_p_outside_the_even_ones_where_memory_needs_it_and_a_hybrid_p_rounded_up_to_an_even_one() -> None:
    """Where memory needs a P that splits B unevenly (B = 64, P >= 40: runs of 2 and 1), the
    selector still finds one instead of failing; a P bound outside its search (a hybrid
    exchange's) is rounded up to the next even one, never down (memory)."""
    from croupier.model.selector import even_workers, usable_memory

    assert [even_workers(p, 32) for p in (1, 4, 10, 13, 40)] == [1, 4, 11, 16, 32]
    profile = StorageProfile.load("local")
    data = 40 * usable_memory(profile.function_memory) - 1  # P >= 40
    choice = choose(int(data), profile, concurrency=2, max_workers=60, senders=4, buckets=64, producers_done=True)
    assert 40 <= choice.best.workers <= 60
    assert min(c.workers for c in choice.candidates) == 40


def test_late_binding_prices_the_consumers_on_the_decoded_rows_and_storage_on_the_stored_bytes() -> None:
    """Producers that compressed or condensed their rows wrote a third of what their consumers
    decode and work through: the consumers' compute is priced on the decoded bytes, the exchange's
    reads on the stored ones; the binder passes what the producers measured."""
    from croupier.dag.binding import Binder

    profile = toy_profile(compute={"hash_aggregate": 4e-9, "read:": 1e-9}, startup_seconds=0, wave_seconds=0)
    phases = {"reduce": ("read:exchange-frames-arrow", "hash_aggregate")}
    plan = ExchangePlan(Topology((8,)), True, 8, 64)
    stored, decoded = 100 << 20, 300 << 20

    def terms(prediction: Prediction) -> dict[str, float]:
        return {t.name: t.seconds for t in prediction.stages[-1].terms}

    as_stored = terms(predict(plan, stored, profile, producers_done=True, phases=phases))
    as_decoded = terms(predict(plan, decoded, profile, producers_done=True, phases=phases))
    measured = terms(predict(plan, decoded, profile, producers_done=True, phases=phases, stored=stored / decoded))
    assert measured["compute"] == pytest.approx(as_decoded["compute"]) and measured["compute"] == pytest.approx(3 * as_stored["compute"])
    reads = [k for k in measured if k.startswith("read")]
    assert reads and all(measured[k] == pytest.approx(as_stored[k]) for k in reads)
    binder = Binder(Config(concurrency=2, calibration="off"), "file:///tmp/x", profile)
    told = binder.late(stored, 8, 64, phases=phases, decoded=decoded)
    assert told.choice is not None and told.choice.data_bytes == decoded and "on 300.0 MiB decoded: " in told.how
    assert told.choice.best.seconds == pytest.approx(predict(told.plan, decoded, profile, 2, True, phases, stored=stored / decoded).seconds)
    untold = binder.late(stored, 8, 64, phases=phases)
    assert untold.choice is not None and untold.choice.data_bytes == stored and "decoded" not in untold.how
