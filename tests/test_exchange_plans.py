"""Exchange plans are pure: routing, reads/writes and counts are checked without running anything;
then the one exchange executor moves tagged chunks through a real store for any plan."""

from __future__ import annotations

import functools
from collections import Counter
from math import prod
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from croupier.config import Config
from croupier.exchange import move, segments
from croupier.exchange.broadcast import BroadcastPlan
from croupier.exchange.plan import ExchangePlan, ObjectRead, ObjectWrite, all_plans
from croupier.exchange.segments import Chunk
from croupier.exchange.topology import Topology, candidates
from croupier.storage import open_store

from .helpers import assert_delivered

group_sizes = st.lists(st.integers(2, 5), min_size=1, max_size=3).map(tuple)


def factorisations(n: int, levels: int) -> list[tuple[int, ...]]:
    """Every ordered way to write n as ``levels`` factors >= 2 (brute force)."""
    if levels == 1:
        return [(n,)] if n >= 2 else []
    return [(d, *rest) for d in range(2, n + 1) if n % d == 0 for rest in factorisations(n // d, levels - 1)]


@st.composite
def plans(draw: st.DrawFn) -> ExchangePlan:
    groups = draw(group_sizes)
    p = prod(groups)
    senders = draw(st.one_of(st.none(), st.integers(1, 2 * p + 3)))
    buckets = draw(st.one_of(st.none(), st.integers(p, 4 * p)))
    return ExchangePlan(Topology(groups), draw(st.booleans()), senders, buckets)


@settings(max_examples=60, deadline=None)  # follows every object of every bucket: the costly one
@given(plan=plans())
def test_every_bucket_reaches_its_partition(plan: ExchangePlan) -> None:
    """Follow the objects: data of bucket b from any producer ends at worker partition_of(b)."""

    # a sender's objects and a receiver's level-0 reads are the same for every bucket followed:
    # listed once each (reads(0, r) looks at every producer; it was called per bucket and object)
    @functools.cache
    def writes(level: int, sender: int) -> list[ObjectWrite]:
        return plan.writes(level, sender)

    @functools.cache
    def level0_reads(receiver: int) -> dict[str, ObjectRead]:
        found: dict[str, ObjectRead] = {}
        for x in plan.reads(0, receiver):
            found.setdefault(x.key, x)  # the first read of a key, as next() over the list took
        return found

    for sender in range(plan.producers):
        for bucket in range(plan.bucket_count):
            partition = plan.partition_of(bucket)
            holders = {sender}
            for level in range(plan.levels):
                nxt = set()
                for h in holders:
                    for obj in writes(level, h):
                        for r in obj.receivers:
                            if plan.combine and level == 0:
                                read = level0_reads(r)[obj.key]
                                carries = read.segment <= bucket < read.segment_end
                            else:
                                carries = plan.route(level, partition) == plan.topology.digit(r, level)
                            if carries:
                                nxt.add(r)
                holders = nxt
            assert holders == {partition}


@settings(max_examples=150, deadline=None)
@given(plan=plans())
def test_reads_match_writes_and_counts_match_formulas(plan: ExchangePlan) -> None:
    p, m = plan.workers, plan.producers
    for level, g in enumerate(plan.topology.groups):
        senders = m if level == 0 else p
        written = {w.key: w.receivers for s in range(senders) for w in plan.writes(level, s)}
        readers: Counter[str] = Counter()
        for worker in range(p):
            reads = plan.reads(level, worker)
            assert [r.sender for r in reads] == sorted(r.sender for r in reads)  # sender order
            for read in reads:
                assert worker in written[read.key] and read.ranged == plan.combine
                readers[read.key] += 1
        assert all(readers[key] == len(receivers) for key, receivers in written.items())
        count = plan.counts()[level]
        assert count.puts == len(written) == (senders if plan.combine else senders * g)
        assert count.gets + count.ranged_gets == sum(readers.values()) == senders * g


@settings(max_examples=100, deadline=None)
@given(p=st.integers(1, 40), extra=st.integers(0, 300))
def test_partitions_are_balanced_contiguous_bucket_runs(p: int, extra: int) -> None:
    plan = ExchangePlan.direct(p, combine=True, buckets=p + extra)
    b = plan.bucket_count
    starts = [plan.bucket_start(q) for q in range(p + 1)]
    assert starts[0] == 0 and starts[-1] == b
    sizes = [hi - lo for lo, hi in zip(starts, starts[1:])]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    assert [plan.partition_of(x) for x in range(b)] == [q for q in range(p) for _ in range(sizes[q])]


@settings(max_examples=60, deadline=None)
@given(groups=group_sizes)
def test_level_one_blocks_are_contiguous_partition_ranges(groups: tuple[int, ...]) -> None:
    topo = Topology(groups)
    digits = [[topo.digit(q, i) for i in range(topo.levels)] for q in range(topo.workers)]  # each worker's digits, computed once
    for w in range(topo.workers):
        for level in range(topo.levels):
            block = topo.block(w, level)
            assert w in block
            assert set(block) == {q for q in range(topo.workers) if all(digits[q][i] == digits[w][i] for i in range(level + 1))}


@pytest.mark.parametrize("p", [4, 9, 16, 64, 144])
def test_classic_formulas(p: int) -> None:
    direct = ExchangePlan.direct(p).predicted_requests()
    assert direct["PUT"] + direct["GET"] == 2 * p * p
    s = int(round(p**0.5))
    two = ExchangePlan(Topology((s, s))).predicted_requests()
    assert two["PUT"] + two["GET"] == 4 * p * s  # 4 P sqrt(P)
    assert ExchangePlan.direct(p, combine=True).predicted_requests()["PUT"] == p
    assert ExchangePlan.direct(p, combine=True, senders=3 * p).predicted_requests() == {"PUT": 3 * p, "GET": 0, "GET_RANGE": 3 * p * p}


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
    assert len(all_plans(12, memory=False)) == 6
    assert len(all_plans(12, combine=(True,), memory=False)) == 3
    memory = ["3-level 3x2x2, level 2 in memory", "3-level 3x2x2+wc, level 2 in memory", "3-level 2x3x2, level 2 in memory", "3-level 2x3x2+wc, level 2 in memory"]
    assert [p.name for p in all_plans(12)[6:]] == memory  # (the fewest-edges 3-level plans', then a middle group of 3)


def test_topology_and_plan_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        Topology((3, 1))
    with pytest.raises(ValueError, match="write group sizes like 3x4"):
        Topology.parse("3-4")
    assert Topology.parse("2x2x3").groups == (2, 2, 3)
    with pytest.raises(ValueError, match="buckets must be >= P"):
        ExchangePlan.direct(8, buckets=4)
    with pytest.raises(ValueError, match="at least one producer"):
        ExchangePlan.direct(8, senders=0)


@settings(max_examples=60, deadline=None)
@given(groups=group_sizes, senders=st.integers(1, 20))
def test_broadcast_reaches_everyone(groups: tuple[int, ...], senders: int) -> None:
    plan = BroadcastPlan(Topology(groups), senders)
    n = prod(groups)
    holds = [{s for s in plan.senders_of(0, w)} for w in range(n)]
    for level in range(1, plan.levels):
        holds = [set().union(*(holds[s] for s in plan.topology.group(w, level))) for w in range(n)]
    assert all(h == set(range(senders)) for h in holds)
    total_reads = senders * groups[0] + sum(n * g for g in groups[1:])
    assert plan.predicted_requests() == {"PUT": senders + n * (len(groups) - 1), "GET": total_reads, "GET_RANGE": 0}


# --- the executor on a real store ----------------------------------------------------------------


def _chunks(plan: ExchangePlan, sender: int) -> list[Chunk]:
    """Every bucket gets a chunk from every producer, except a few (empty buckets)."""
    out = []
    for b in range(plan.bucket_count):
        if (b + sender) % 5 == 3:
            continue
        payload = f"{sender}:{b};".encode()
        out.append(Chunk(b, sender, 1, (payload,)))
    return out


def run_plan(store_url: str, plan: ExchangePlan | BroadcastPlan, inputs: list[list[Chunk]]) -> tuple[list[list[Chunk]], Counter[str]]:
    """Run every level of ``plan`` through a real store; return each consumer's chunks and counts."""
    store = open_store(store_url, Config())
    written = [move.write_level(store, plan, 0, s, chunks)[0] for s, chunks in enumerate(inputs)]
    for level in range(1, plan.levels):
        written = [move.pass_level(store, plan, level, w, move.fetches_for(plan, level - 1, w, written), 1.0)[0] for w in range(plan.workers)]
    got = [segments.ordered(move.fetch(store, move.fetches_for(plan, plan.levels - 1, w, written), 1.0)) for w in range(plan.workers)]
    counts = Counter({k: v.requests for k, v in store.stats.kinds.items()})
    return got, counts


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=plans())
def test_executor_delivers_every_chunk_in_order_with_exact_counts(tmp_path_factory: pytest.TempPathFactory, plan: ExchangePlan) -> None:
    root = tmp_path_factory.mktemp("ex").as_uri()
    inputs = [_chunks(plan, s) for s in range(plan.producers)]
    got, counts = run_plan(root, plan, inputs)
    assert_delivered(plan, inputs, got)
    predicted = plan.predicted_requests()
    assert counts["PUT"] == predicted["PUT"]
    assert counts.get("GET", 0) == predicted["GET"] and counts.get("GET_RANGE", 0) == predicted["GET_RANGE"]


@pytest.mark.parametrize("groups,senders", [((6,), 6), ((3, 2), 4), ((2, 3), 9), ((2, 2, 2), 3)])
def test_broadcast_executor_gives_every_consumer_everything(tmp_path: Path, groups: tuple[int, ...], senders: int) -> None:
    plan = BroadcastPlan(Topology(groups), senders)
    inputs = [[Chunk(0, s, 1, (f"s{s}".encode(),))] for s in range(senders)]
    got, counts = run_plan(tmp_path.as_uri(), plan, inputs)
    for chunks in got:
        assert [bytes(c.parts[0]) for c in chunks] == [f"s{s}".encode() for s in range(senders)]
    assert {"PUT": counts["PUT"], "GET": counts["GET"], "GET_RANGE": counts.get("GET_RANGE", 0)} == plan.predicted_requests()


def test_waiting_for_a_missing_object_is_bounded_and_named(tmp_path: Path) -> None:
    import time

    from croupier.errors import StorageError

    store = open_store(tmp_path.as_uri(), Config())
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"waited 0s for exchange object .*l0/s00003/r00001, which its sender never wrote"):
        move.get_when_ready(store, "l0/s00003/r00001", wait=0.3)
    assert 0.3 <= time.monotonic() - started < 3
    store.put("late", b"x")
    assert bytes(move.get_when_ready(store, "late", wait=0.1)) == b"x"


def test_polling_for_an_object_counts_its_misses_apart_from_its_requests(tmp_path: Path) -> None:
    """A reader that starts before its producer wrote (eager consumers, pipelined hybrid
    combiners) polls: every read of the absent object is a miss, counted apart from the requests
    the plans' formulas give (a store may bill them too)."""
    import threading

    store = open_store(tmp_path.as_uri(), Config())
    writer = threading.Timer(0.2, lambda: store.put("soon", b"y"))
    writer.start()
    assert bytes(move.get_when_ready(store, "soon", wait=5)) == b"y"
    writer.join()
    assert store.stats.requests("GET") == 1 and store.stats.misses("GET") >= 1
    assert store.stats.misses() == store.stats.misses("GET") and "misses" in store.stats.to_dict()["GET"]


def test_corrupt_segment_is_named() -> None:
    with pytest.raises(ValueError, match="obj: not an exchange segment at byte 0"):
        segments.decode(b"garbage!", "obj")
