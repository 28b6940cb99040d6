"""`croupier plan`: output pinned by golden files for the shipped profiles, JSON contract, costs."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from croupier.cli import main
from croupier.plan.cloud import PlanOptions, plan_sort, smooth_sizes, steady_partitions
from croupier.model.profile import StorageProfile
from croupier.sim.platform import Platform

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "plan_ibm_100gb_direct100.txt": ["--profile", "ibm-cos", "--size", "100GB", "--workers", "100", "--algorithm", "direct"],
    "plan_aws_1tb.txt": ["--size", "1TB"],
    "plan_aws_100tb_elasticache_cost.txt": ["--size", "100TB", "--fast-tier", "elasticache", "--objective", "cost"],
    "plan_aws_100gb_simulate.txt": ["--size", "100GB", "--memory", "3GiB", "--simulate", "--runs", "2", "--seed", "4"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_output_is_pinned(name: str) -> None:
    result = CliRunner().invoke(main, ["plan", *CASES[name]])
    assert result.exit_code == 0, result.output
    path = GOLDEN / name
    if os.environ.get("CROUPIER_UPDATE_GOLDEN"):
        path.write_text(result.output)
    assert result.output == path.read_text()


def test_plan_json_has_seconds_and_cost_parts() -> None:
    result = CliRunner().invoke(main, ["plan", "--size", "100GB", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    cost = data["cost"]
    parts = cost["functions"] + cost["invocation"] + sum(cost["request_cost"].values()) + cost["storage"] + cost["fast_tier"]
    assert cost["total"] == pytest.approx(parts, abs=1e-5)
    assert data["seconds"] == pytest.approx(sum(s["seconds"] for s in data["stages"].values()), rel=1e-3)
    assert data["exchanges"][0]["runners_up"]
    assert sum(cost["requests"].values()) > 0 and cost["function_gb_seconds"] > 0


def test_plan_prices_name_their_source_and_date() -> None:
    for name in ("aws-lambda", "ibm-cf"):
        platform = Platform.load(name)
        assert any(str(year) in platform.prices.source for year in (2022, 2023, 2024, 2025))
        for tier in platform.fast_tiers.values():
            assert "20" in tier.source and "pricing" in tier.source


def test_plan_respects_fixed_choices_and_budget() -> None:
    plan = plan_sort(100 * 10**9, PlanOptions(profile="ibm-cos", workers=225, algorithm="2-level"))
    best = plan.exchanges[0].choice.best
    assert best.workers == 225 and best.plan.family == "2-level"
    result = CliRunner().invoke(main, ["plan", "--size", "1TB", "--budget", "0.0001"])
    assert result.exit_code != 0 and "budget" in result.output
    result = CliRunner().invoke(main, ["plan", "--size", "1TB", "--fast-tier", "nope"])
    assert result.exit_code != 0 and "elasticache" in result.output


def test_cost_objective_is_not_dearer_than_time_objective() -> None:
    fast = plan_sort(10**12, PlanOptions(objective="time"))
    cheap = plan_sort(10**12, PlanOptions(objective="cost"))
    assert cheap.exchanges[0].choice.best.cost <= fast.exchanges[0].choice.best.cost


def test_smooth_sizes_and_partitions() -> None:
    sizes = smooth_sizes(186_265)
    assert sizes[0] == 186_265 and all(186_265 <= s <= 1.25 * 186_265 for s in sizes)
    assert 187_500 in sizes  # 2^2 x 3 x 5^6
    platform = Platform.load("aws-lambda")
    assert steady_partitions(platform, 1.0) == 1
    assert steady_partitions(platform, 10**6) == platform.storage.max_partitions


def test_query_plan_sizes_exchanges_from_the_tables() -> None:
    result = CliRunner().invoke(main, ["plan", "--query", "q3", "--table", "lineitem=600GB", "--table", "orders=150GB", "--table", "customer=25GB", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    sizes = sorted(e["bytes"] for e in data["exchanges"] if e["how"] == "from scanned table sizes")
    # q3 keeps 2 of customer's 8 columns, 4 of orders' 9, 4 of lineitem's 16
    assert sizes == [6_250_000_000, 66_666_666_666, 150_000_000_000]
    assert data["seconds"] > 0 and data["cost"]["total"] > 0
    bad = CliRunner().invoke(main, ["plan", "--query", "select 1 from t", "--table", "t=5GB"])
    assert bad.exit_code != 0 and "only TPC-H tables" in bad.output


def test_network_by_memory_interpolates_and_resolves_per_platform() -> None:
    platform = Platform.load("aws-lambda-2018")
    net = platform.network
    assert net.at_memory(2**30).sustained_bytes_per_second == pytest.approx(40.0e6)
    assert net.at_memory(0.75 * 2**30).sustained_bytes_per_second == pytest.approx((22.2e6 + 40.0e6) / 2)  # linear between points
    assert net.at_memory(128 << 20).sustained_bytes_per_second == pytest.approx(13.9e6)  # flat beyond the table
    resolved = platform.at_memory(2**30).network
    assert resolved.burst_bytes == 0 and resolved.by_memory == ()
    assert Platform.load("aws-lambda").at_memory(2**30).network == Platform.load("aws-lambda").network  # no table: unchanged


def test_locus_accounting_is_locus_slow_storage_model() -> None:
    """Locus §3.3 by hand: 200 GB on 1 GiB workers, P = 200, b = 40 MB/s, one bucket at 3,210 req/s
    (5 MB objects fall in Table 1's 1 MB bucket): T = 2 max(P^2 / q, S / (b P)) = 2 x 25 s; billed
    4 S w / b GB-s (four transfers of every byte at b)."""
    s, p, b = 200e9, 200, 40e6
    plan = plan_sort(int(s), PlanOptions("aws-s3-2018", 2**30, p, "direct", prefixes=1, accounting="locus"))
    assert plan.seconds == pytest.approx(2 * max(p * p / 3210, s / (b * p)))
    assert plan.cost.function_gb_seconds == pytest.approx(4 * s / b * 1.0)
    assert any("Locus' accounting" in n for n in plan.notes)
    throttled = plan_sort(int(4e12), PlanOptions("aws-s3-2018", 2**30, 4000, "direct", prefixes=1, accounting="locus"))
    assert throttled.seconds == pytest.approx(2 * 4000**2 / 4400)  # 250 KB objects: the 100 KB bucket's rate; request-bound
    assert throttled.cost.function_gb_seconds == pytest.approx(4 * 4e12 / b)  # not billed while throttled
    usual = plan_sort(int(s), PlanOptions("aws-s3-2018", 2**30, p, "direct", prefixes=1))
    assert usual.seconds > plan.seconds  # Croupier's own accounting adds start-up, compute, and reads after writes


def test_cloud_function_bandwidth_is_shared_by_its_requests_in_flight() -> None:
    """On a cloud platform the network is a function's token bucket: 8 fetches in flight do not
    move 8x the bytes (the simulator's transfers share it too); a calibrated profile's bandwidth is
    per stream."""
    from croupier.model.stage import io_term
    from croupier.sim.platform import networked

    base = StorageProfile.load("aws-s3")
    cloud = networked(base, Platform.load("aws-lambda"), 1e9)
    assert cloud.network_per_function and not base.network_per_function
    per_function = io_term("read", 8e9, 8, cloud, 10, streams=8)
    assert per_function.seconds == pytest.approx(8e9 / (cloud.read_bandwidth * 10))
    per_stream = io_term("read", 8e9, 8, replace(cloud, network_per_function=False), 10, streams=8)
    assert per_stream.seconds < per_function.seconds / 4  # the same bandwidth per stream: 8 streams move far more
    storage = Platform.load("ibm-cf").storage.aggregate_bandwidth
    assert storage > 0
    capped = plan_sort(100 * 10**9, PlanOptions("ibm-cos", 2 << 30, 256, "2-level", prefixes=1, network=False))
    assert capped.seconds >= 3 * 2 * 100e9 / storage  # three stages each read and write all data through COS's aggregate bandwidth
