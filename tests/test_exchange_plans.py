"""Exchange plans are pure: routing, reads/writes and counts are checked without running anything."""

from __future__ import annotations

from collections import Counter
from math import prod

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.exchange.broadcast import BroadcastPlan
from croupier.exchange.plan import ExchangePlan, all_plans
from croupier.exchange.topology import Topology, candidates

group_sizes = st.lists(st.integers(2, 5), min_size=1, max_size=3).map(tuple)


def factorisations(n: int, levels: int) -> list[tuple[int, ...]]:
    """Every ordered way to write n as ``levels`` factors >= 2 (brute force)."""
    if levels == 1:
        return [(n,)] if n >= 2 else []
    return [(d, *rest) for d in range(2, n + 1) if n % d == 0 for rest in factorisations(n // d, levels - 1)]


@settings(max_examples=100, deadline=None)
@given(groups=group_sizes, combine=st.booleans())
def test_every_partition_reaches_its_worker(groups: tuple[int, ...], combine: bool) -> None:
    """Simulate the routes: after k levels, data of partition q from any sender sits at worker q."""
    plan = ExchangePlan(Topology(groups), combine)
    p = plan.workers
    for sender in range(p):
        for partition in range(p):
            at = sender
            for level in range(plan.levels):
                group = plan.topology.group(at, level)
                at = group[plan.route(level, partition)]
            assert at == partition


@settings(max_examples=100, deadline=None)
@given(groups=group_sizes, combine=st.booleans())
def test_reads_match_writes_and_counts_match_formulas(groups: tuple[int, ...], combine: bool) -> None:
    plan = ExchangePlan(Topology(groups), combine)
    p, k = plan.workers, plan.levels
    for level, g in enumerate(groups):
        written = {w.key: w.receivers for worker in range(p) for w in plan.writes(level, worker)}
        readers: Counter[str] = Counter()
        for worker in range(p):
            reads = plan.reads(level, worker)
            assert [r.sender for r in reads] == sorted(r.sender for r in reads)  # sender order
            for read in reads:
                assert worker in written[read.key] and read.ranged == combine
                readers[read.key] += 1
        assert all(readers[key] == len(receivers) for key, receivers in written.items())
        count = plan.counts()[level]
        assert count.puts == len(written) == (p if combine else p * g)
        assert count.gets + count.ranged_gets == sum(readers.values()) == p * g
    total = plan.predicted_requests()
    assert total["PUT"] == (k * p if combine else sum(p * g for g in groups))
    for count in plan.counts(data_bytes=p * p * 1000):
        assert count.bytes_moved == p * p * 1000
        assert count.object_bytes == p * p * 1000 // count.objects  # D/P^2 per object for direct
    assert total["GET"] + total["GET_RANGE"] == sum(p * g for g in groups)


@pytest.mark.parametrize("p", [4, 9, 16, 64, 144])
def test_classic_formulas(p: int) -> None:
    direct = ExchangePlan.direct(p).predicted_requests()
    assert direct["PUT"] + direct["GET"] == 2 * p * p
    s = int(round(p**0.5))
    two = ExchangePlan(Topology((s, s))).predicted_requests()
    assert two["PUT"] + two["GET"] == 4 * p * s  # 4 P sqrt(P)
    assert ExchangePlan.direct(p, combine=True).predicted_requests()["PUT"] == p


@pytest.mark.parametrize("p", [1, 2, 6, 7, 12, 30, 36, 64, 97, 120, 128, 210])
def test_candidates_have_the_fewest_edges_per_level_count(p: int) -> None:
    found = candidates(p)
    assert found[0].groups == (p,)
    for topology in found:
        assert topology.workers == p
        brute = factorisations(p, topology.levels) if p > 1 else [(1,)]
        assert sum(topology.groups) == min(sum(f) for f in brute)
    most = max((L for L in range(1, 12) if factorisations(p, L)), default=1)
    assert len(found) == most  # a level count is offered exactly when P has that many factors


def test_twelve_has_several_shapes_and_primes_degrade_to_direct() -> None:
    assert [str(t) for t in candidates(12)] == ["12", "4x3", "3x2x2"]
    assert [str(t) for t in candidates(13)] == ["13"]
    for shape in [(3, 4), (4, 3), (2, 2, 3), (2, 3, 2)]:
        assert Topology(shape).workers == 12
    assert len(all_plans(12)) == 6


def test_topology_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        Topology((3, 1))
    with pytest.raises(ValueError, match="write group sizes like 3x4"):
        Topology.parse("3-4")
    assert Topology.parse("2x2x3").groups == (2, 2, 3)


@settings(max_examples=50, deadline=None)
@given(groups=group_sizes)
def test_broadcast_reaches_everyone(groups: tuple[int, ...]) -> None:
    plan = BroadcastPlan(Topology(groups))
    p = prod(groups)
    holds = [{w} for w in range(p)]
    for level in range(plan.topology.levels):
        holds = [set().union(*(holds[s] for s in plan.topology.group(w, level))) for w in range(p)]
        assert all(len(plan.reads(level, w)) == groups[level] for w in range(p))
    assert all(h == set(range(p)) for h in holds)
    assert plan.predicted_requests() == {"PUT": p * len(groups), "GET": sum(p * g for g in groups), "GET_RANGE": 0}
    sizes = [c.object_bytes for c in plan.counts(data_bytes=p * 1000)]
    assert sizes[0] == 1000 and all(b == a * g for a, b, g in zip(sizes, sizes[1:], groups))
