"""Fused operators: consecutive frame operators of a stage run as one lazy Polars query.

Each result is compared with plain eager Polars running the same steps one after the other, so
a fusion that changed an answer (a filter moved past a join, an adaptive aggregation judged on
the wrong rows, a refused aggregation) fails here before it reaches a query test.
"""

from __future__ import annotations

import datetime
from typing import Mapping

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.dag.operators import AggSpec, Aggregate, Filter, Fused, HashJoin, Operator, Select, Sort, WithColumns, fuse, pipeline_schema, run_pipeline
from croupier.dag.scan import ScanSpec
from croupier.dag.stage import ScanSource, Stage
from croupier.frame import col
from croupier.ops.payload import Condensed


class Opaque(Operator):
    """An operator that runs only eagerly (as TeraSort's numpy operators do)."""

    kind = "records_sort"

    def apply(self, df: pl.DataFrame, sides: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
        return df

    def describe(self) -> str:
        return "opaque"


def test_fuse_joins_runs_of_frame_operators_and_is_idempotent() -> None:
    f, s, w = Filter(col("v") > 0), Select((col("k"), col("v"))), WithColumns(((col("v") * 2).alias("w"),))
    srt = Sort((col("k"),), (False,))
    opaque = Opaque()
    fused = fuse((f, s, opaque, w, srt, opaque, srt))
    assert [type(op) for op in fused] == [Fused, Opaque, Fused, Opaque, Sort]
    assert fused[0].steps == (f, s) and fused[2].steps == (w, srt)  # type: ignore[attr-defined]
    assert fuse(fused) == fused
    assert fuse((f,)) == (f,)  # one operator stays itself
    stage = Stage("s", ScanSource(ScanSpec("file:///x", "parquet")), (f, s, w))
    assert len(stage.ops) == 1 and stage.ops[0].describe() == " | ".join(op.describe() for op in (f, s, w))


def test_a_fused_run_reports_its_costliest_kind() -> None:
    agg = Aggregate(("k",), (AggSpec("sum", "v", "v"),))
    join = HashJoin("b", ("k",), ("k",), "inner")
    assert Fused((Filter(col("v") > 0), Select(((col("v") * 2).alias("v"), col("k"))), agg)).kind == "hash_aggregate"
    assert Fused((Filter(col("v") > 0), join, agg)).kind == "hash_join"
    assert Fused((Filter(col("v") > 0), Select((col("k"),)))).kind == "filter"
    assert Fused((Filter(col("v") > 0), join)).sides == ("b",)
    a, b = Fused((Filter(col("v") > 0), agg)), Fused((Filter(col("v") > 1), agg))
    assert a.cost_kind != b.cost_kind and a.cost_kind.startswith("hash_aggregate#")


def _eager(df: pl.DataFrame, filt: int, keys: str, sides: Mapping[str, pl.DataFrame] | None = None) -> pl.DataFrame:
    """The reference: eager Polars, step by step."""
    out = df.filter(pl.col("v") > filt).with_columns((pl.col("v") * 3).alias("w"))
    if sides is not None:
        out = out.join(sides["b"], on="k", how="inner")
    return out.group_by(keys).agg(pl.col("w").sum().alias("s"), pl.col("f").count().cast(pl.Int64).alias("c"), pl.len().cast(pl.Int64).alias("n"))


def _merged(partial: pl.DataFrame, keys: str) -> pl.DataFrame:
    """Partial rows (aggregated or passed through) merged per group, sorted."""
    return partial.group_by(keys).agg(pl.col("s").sum(), pl.col("c").sum(), pl.col("n").sum()).sort(keys)


AGGS = (AggSpec("sum", "w", "s"), AggSpec("count", "f", "c"), AggSpec("len", None, "n"))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 400), groups=st.sampled_from([1, 3, 50, 10**9]), filt=st.integers(-60, 60), adaptive=st.booleans(), join=st.booleans(), seed=st.integers(0, 2**16))
def test_fused_pipeline_matches_eager_polars(rows: int, groups: int, filt: int, adaptive: bool, join: bool, seed: int) -> None:
    """Filter, computed column, (join,) partial aggregation: fused, the merged groups are eager
    Polars' whatever the adaptive aggregation decides (a tiny probe makes it decide on small
    frames: many groups pass rows through, few aggregate)."""
    rng = np.random.default_rng(seed)
    df = pl.DataFrame({"k": rng.integers(0, groups, rows), "v": rng.integers(-50, 50, rows), "f": [None if x % 4 == 0 else float(x) for x in rng.integers(0, 100, rows)]})
    sides = {"b": pl.DataFrame({"k": np.arange(0, 60, 2), "extra": np.arange(30)})} if join else {}
    steps: list[Operator] = [Filter(col("v") > filt), WithColumns(((col("v") * 3).alias("w"),))]
    steps += [HashJoin("b", ("k",), ("k",), "inner")] if join else []
    steps.append(Aggregate(("k",), AGGS, adaptive=adaptive))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Aggregate, "PROBE_ROWS", 8)
        got = Fused(tuple(steps)).apply(df, sides)
        sent = Fused(tuple(steps)).apply_to_exchange(df, sides)  # rows passed through go condensed
        alone = steps[-1].apply_to_exchange(run_pipeline(df, tuple(steps[:-1]), sides), sides)
    for out in (sent, alone):
        assert adaptive or not isinstance(out, Condensed)
        frame = out.expanded() if isinstance(out, Condensed) else out
        assert frame.schema == got.schema and _merged(frame, "k").equals(_merged(got, "k"))
    expected = _eager(df, filt, "k", sides if join else None)
    assert got.schema == expected.schema
    assert pipeline_schema(df.head(0), fuse(tuple(steps)), {k: v.head(0) for k, v in sides.items()}) == got.schema
    assert _merged(got, "k").equals(_merged(expected, "k"))


def test_adaptive_aggregation_in_a_fused_run_passes_many_groups_through() -> None:
    """All keys distinct: the rows pass through in partial form (one per surviving row), as the
    operator alone does; few keys: a real aggregation."""
    n = 3 * Aggregate.PROBE_ROWS
    df = pl.DataFrame({"k": np.arange(n), "v": np.arange(n) % 100, "f": np.ones(n)})
    steps = (Filter(col("v") > 9), WithColumns(((col("v") * 3).alias("w"),)), Aggregate(("k",), AGGS, adaptive=True))
    passed = Fused(steps).apply(df, {})
    assert passed.height == df.filter(pl.col("v") > 9).height
    assert _merged(passed, "k").equals(_merged(_eager(df, 9, "k"), "k"))
    sent = Fused(steps).apply_to_exchange(df, {})  # into an exchange: the key and the values only
    assert isinstance(sent, Condensed) and sent.frame.columns == ["k", "w", "f"] and sent.expanded().equals(passed)
    few = df.with_columns(pl.col("k") % 5)
    assert Fused(steps).apply(few, {}).height == 5


def test_an_aggregation_the_lazy_engine_refuses_runs_eagerly() -> None:
    """Polars' lazy engine refuses a sum of dates, eager Polars gives nulls: fused or alone, the
    operators give eager Polars' answer."""
    df = pl.DataFrame({"k": [1, 1, 2], "d": [datetime.date(2020, 1, 1)] * 3})
    agg = Aggregate(("k",), (AggSpec("sum", "d", "s"),))
    expected = df.filter(pl.col("k") > 0).group_by("k").agg(pl.col("d").sum().alias("s")).sort("k")
    assert Fused((Filter(col("k") > 0), agg)).apply(df, {}).sort("k").equals(expected)
    assert run_pipeline(df, (agg,), {}).sort("k").equals(expected)
    assert pipeline_schema(df.head(0), (Fused((Filter(col("k") > 0), agg)),), {}) == expected.schema


def test_a_selective_filter_leaves_the_adaptive_aggregation_aggregating() -> None:
    """Of the first rows, the filter keeps one: too few to judge by (one row is always one
    group), so the fused run aggregates its 5 groups, as the operators one by one do, instead of
    passing 334 thousand rows through."""
    n = 400_000
    df = pl.DataFrame({"i": np.arange(n), "k": np.arange(n) % 5, "v": np.ones(n)})
    steps = (Filter((col("i") == 0) | (col("i") >= 65_536)), Aggregate(("k",), (AggSpec("sum", "v", "s"),), adaptive=True))
    assert Fused(steps).apply(df, {}).height == run_pipeline(df, steps, {}).height == 5


def test_an_aggregation_after_a_hash_exchange_runs_bucket_by_bucket_with_the_same_rows() -> None:
    """A final aggregation whose keys include the exchange's hash keys (and the row-wise steps
    after it) runs on runs of whole buckets of at least BUCKET_ROWS rows, smaller hash tables
    than all rows at once; its groups are the same. What is not split: an aggregation on other
    keys, an adaptive one, one followed by a sort or a select of literals alone."""
    from croupier.dag import task

    rng = np.random.default_rng(1)
    runs = [int(n) for n in rng.integers(0, 3_000, 40)]
    bucket = np.repeat(np.arange(len(runs)), runs)
    df = pl.DataFrame({"j": bucket * 100 + rng.integers(0, 50, len(bucket)), "v": rng.integers(-9, 9, len(bucket))})  # a bucket's keys are its own
    agg = Aggregate(("j",), (AggSpec("sum", "v", "s"), AggSpec("len", None, "n")))
    final = Fused((agg, WithColumns(((col("s") * 2).alias("s2"),)), Filter(col("n") > 1)))
    assert final.splits_on(("j",)) and not final.splits_on(("v",)) and not final.splits_on(())
    assert not Fused((agg, Sort((col("j"),), (False,), (False,)))).splits_on(("j",))
    assert not Aggregate(("j",), (AggSpec("sum", "v", "s"),), adaptive=True).splits_on(("j",))
    assert not Fused((agg, Select((col("s").sum(),)))).splits_on(("j",))
    calls: list[int] = []

    def counted(frame: pl.DataFrame, sides: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
        calls.append(frame.height)
        return final.apply(frame, sides)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(task, "BUCKET_ROWS", 5_000)
        split = task.by_buckets(counted, runs, df, {})
    assert len(calls) > 5 and sum(calls) == df.height and all(n >= 5_000 for n in calls[:-1])
    whole = final.apply(df, {})
    assert split.schema == whole.schema and split.sort("j").equals(whole.sort("j"))
