"""The frame API means what Polars means: each plan, after Croupier's lowering and optimisation,
translated back to Polars (``to_polars``), equals the same query written directly in Polars.

Inputs are several Parquet files with nulls, an empty file and a skewed key, so plans that would
only be right on one chunk of rows are caught. Aggregations run split in partial steps over three
chunks and a final step (``partials=3``), as the engine runs them.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import croupier.frame as cf
from croupier.config import Config
from croupier.dag.operators import run_pipeline
from croupier.dag.scan import ScanSpec
from croupier.errors import ConfigError
from croupier.expr import Agg, Alias, Over
from croupier.frame import col, count, lit, when
from croupier.plan.logical import Aggregate, Join, Project, Scan, Window, walk
from croupier.plan.lower import is_core
from croupier.plan.optimize import optimize, parents

from .compare import assert_same

CONFIG = Config(concurrency=2)


def _facts(seed: int, n: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    hot = rng.random(n) < 0.8
    k = np.where(hot, 7, rng.integers(0, 40, n))
    return pl.DataFrame(
        {
            "k": pl.Series([None if i % 11 == 0 else int(v) for i, v in enumerate(k)], dtype=pl.Int32),
            "g": [None if v == 0 else f"g{v}" for v in rng.integers(0, 5, n)],
            "x": pl.Series([None if v % 9 == 0 else float(v) / 4 for v in rng.integers(0, 400, n)], dtype=pl.Float64),
            "q": rng.integers(-50, 50, n),
            "d": [date(2000, 1, 1) + timedelta(days=int(v)) for v in rng.integers(0, 900, n)],
            "n": pl.Series([None] * n, dtype=pl.Float64),
        }
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """facts: four files (one empty, one skewed); dims: one file; empty: one file with no rows."""
    root = tmp_path_factory.mktemp("semantics")
    (root / "facts").mkdir()
    for i, n in enumerate((400, 0, 2500, 60)):
        _facts(i, n).write_parquet(root / "facts" / f"part-{i}.parquet", row_group_size=500)
    dims = pl.DataFrame({"k": pl.Series([*range(30), None], dtype=pl.Int32), "label": [f"L{i % 7}" for i in range(31)], "w": [float(i) for i in range(31)]})
    dims.write_parquet(root / "dims.parquet")
    (root / "empty").mkdir()
    _facts(9, 0).write_parquet(root / "empty" / "part-0.parquet")
    return {"facts": root / "facts", "dims": root / "dims.parquet", "empty": root / "empty"}


def _pair(files: dict[str, Path], name: str) -> tuple[cf.LazyFrame, pl.LazyFrame]:
    path = files[name]
    direct = pl.scan_parquet(sorted(path.glob("*.parquet")) if path.is_dir() else path)
    return cf.scan_parquet(path, config=CONFIG), direct


def check(frame: cf.LazyFrame, direct: pl.LazyFrame, ordered: bool = False) -> pl.DataFrame:
    """The lowered, optimised plan run in Polars (aggregations split over 3 chunks) == Polars."""
    got = frame.to_polars(partials=3).collect()
    assert_same(got, direct.collect(), ordered=ordered)
    assert is_core(frame.optimized_plan())
    return got


# --- the semantic fixes of issue 14 --------------------------------------------------------------


def test_select_of_aggregations_is_one_row_for_the_whole_input(files: dict[str, Path]) -> None:
    """Fails on the old planner: select(sum) stayed a projection, run per task (one row per task)."""
    lf, pf = _pair(files, "facts")
    q = lf.select(col("x").sum(), col("q").max().alias("top"), count(), (col("x").sum() / col("q").count()).alias("r"), lit(1).alias("one"))
    plan = q.optimized_plan()
    aggregates = [n for n in walk(plan) if isinstance(n, Aggregate)]
    assert len(aggregates) == 1 and aggregates[0].keys == ()
    assert not any(isinstance(n, Project) and any(e.has_agg() for e in n.exprs) for n in walk(plan))
    check(q, pf.select(pl.col("x").sum(), pl.col("q").max().alias("top"), pl.len(), (pl.col("x").sum() / pl.col("q").count()).alias("r"), pl.lit(1).alias("one")))


def test_aggregation_mixed_with_rows_is_broadcast_by_a_cross_join(files: dict[str, Path]) -> None:
    lf, pf = _pair(files, "facts")
    q = lf.with_columns((col("x") / col("x").sum()).alias("share"), col("q").mean().alias("avg_q"))
    plan = q.optimized_plan()
    joins = [n for n in walk(plan) if isinstance(n, Join)]
    assert [j.how for j in joins] == ["cross"]
    assert parents(plan)[id(joins[0].left)] == 2  # the input: read by the join and by the aggregate
    check(q, pf.with_columns((pl.col("x") / pl.col("x").sum()).alias("share"), pl.col("q").mean().alias("avg_q")))
    check(lf.select("k", col("x").max().alias("m")), pf.select("k", pl.col("x").max().alias("m")))
    check(lf.filter(col("x") > col("x").mean()), pf.filter(pl.col("x") > pl.col("x").mean()))


def test_counting_rows_reads_one_column(files: dict[str, Path]) -> None:
    """Fails on the old planner: nothing was read, so count() saw no rows (0)."""
    lf, pf = _pair(files, "facts")
    for q, direct in (
        (lf.select(count()), pf.select(pl.len())),
        (lf.group_by().agg(count()), pf.select(pl.len())),
        (lf.len(), pf.select(pl.len())),
        (lf.group_by("g").len(), pf.group_by("g").len()),
    ):
        plan = q.optimized_plan()
        scans = [n for n in walk(plan) if isinstance(n, Scan)]
        assert [s.spec.columns for s in scans] in ([("k",)], [("g",)])  # the cheapest column, or the key
        check(q, direct)
        low = [n for n in walk(plan) if isinstance(n, Aggregate)][0].lower()
        assert low.pre.exprs  # the pre-projection keeps a column, so rows survive it
    assert check(lf.select(count()), pf.select(pl.len())).item() == 2960


def test_whole_table_aggregate_of_empty_input_is_one_row_of_polars_values(files: dict[str, Path]) -> None:
    """Fails on the old lowering: mean = 0/0 = NaN and counts were Int64."""
    lf, pf = _pair(files, "empty")
    aggs = (col("x").sum().alias("s"), col("q").sum().alias("sq"), count().alias("n"), col("x").count().alias("c"), col("x").mean().alias("m"), col("q").min().alias("lo"), col("d").max().alias("hi"))
    direct = pf.select(pl.col("x").sum().alias("s"), pl.col("q").sum().alias("sq"), pl.len().alias("n"), pl.col("x").count().alias("c"), pl.col("x").mean().alias("m"), pl.col("q").min().alias("lo"), pl.col("d").max().alias("hi"))
    got = check(lf.select(*aggs), direct)
    assert got.rows() == [(0.0, 0, 0, 0, None, None, None)]
    # the final step alone, over zero partial rows (no task produced any), gives that row too
    node = Aggregate(lf._node, (), aggs)
    low = node.lower()
    assert low.partial is not None
    partial_schema = run_pipeline(pl.DataFrame(schema=lf.schema), (low.pre, low.partial), {}).head(0)
    final = run_pipeline(partial_schema, low.final, {})
    assert final.rows() == [(0.0, 0, 0, 0, None, None, None)] and final.schema == direct.collect().schema


def test_mean_of_an_all_null_group_is_null_not_nan(files: dict[str, Path]) -> None:
    """Fails on the old lowering (sum/count = 0/0 = NaN)."""
    lf, pf = _pair(files, "facts")
    got = check(lf.group_by("g").agg(col("n").mean().alias("m"), col("x").mean()), pf.group_by("g").agg(pl.col("n").mean().alias("m"), pl.col("x").mean()))
    assert got["m"].null_count() == got.height


_DTYPES = [pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt32, pl.UInt64, pl.Float32, pl.Float64, pl.Boolean, pl.String, pl.Date]
_AGGS = ["sum", "count", "mean", "min", "max", "n_unique", "len", "null_count", "std", "median"]


@pytest.mark.parametrize("dtype", _DTYPES, ids=str)
def test_split_aggregations_have_polars_dtypes_and_values(dtype: pl.DataType) -> None:
    """Partial per chunk + final == one Polars aggregation, for every dtype x aggregation Polars
    accepts (fails on the old lowering: counts were Int64, means of ints over chunks NaN-prone)."""
    values = [None, 3, 1, None, 7, 2, 2, 9, None, 0, 5]
    raw = pl.Series("v", values, dtype=pl.Int64)
    series = raw.cast(pl.Date) if dtype == pl.Date else raw.cast(pl.String) if dtype == pl.String else (raw > 2) if dtype == pl.Boolean else raw.cast(dtype)
    df = pl.DataFrame({"k": [i % 3 for i in range(len(values))], "v": series})
    for keys in ((), ("k",)):
        for fn in _AGGS:
            expr = Agg(fn, cf.col("v")).alias("a")
            try:
                direct = df.group_by(list(keys), maintain_order=True).agg(expr.to_polars()) if keys else df.select(expr.to_polars())
            except pl.exceptions.PolarsError:
                continue  # Polars has no such aggregation for this dtype
            node = Aggregate(Scan(ScanSpec("file:///x", "parquet"), df.schema), tuple(cf.col(k) for k in keys), (expr,))
            low = node.lower()
            chunks = [df.slice(0, 4), df.slice(4, 0), df.slice(4, 7)]
            steps = (low.pre, low.partial) if low.partial is not None else (low.pre,)
            merged = run_pipeline(pl.concat([run_pipeline(c, steps, {}) for c in chunks]), low.final, {})
            if keys:
                merged, direct = merged.sort("k"), direct.sort("k")
            assert merged.schema == direct.schema == node.schema, (dtype, fn, keys)
            assert_same(merged, direct, ordered=True)


def test_an_aggregation_of_a_key_reads_the_key_s_own_column() -> None:
    """``count(k)`` grouped by k: the operand is the key, so the pre-projection keeps one column
    (it projected k a second time under a helper name, which then crossed the exchange too),
    and every aggregation of it still gives Polars' answer; a computed key likewise. The values
    include nulls and a chunk without rows."""
    df = pl.DataFrame({"k": [None, 3, 1, None, 7, 2, 2, 9, None, 0, 5], "v": list(range(11))})
    for key, name in ((cf.col("k"), "k"), ((cf.col("k") % 3).alias("m"), "m")):
        operand = key.operand if isinstance(key, Alias) else key
        for fn in _AGGS:
            expr = Agg(fn, operand).alias("a")
            direct = df.group_by(key.to_polars(), maintain_order=True).agg(expr.to_polars())
            node = Aggregate(Scan(ScanSpec("file:///x", "parquet"), df.schema), (key,), (expr,))
            low = node.lower()
            if fn != "mean":  # (a split mean sums its operand as Float64: a column of its own)
                assert [e.output_name() for e in low.pre.exprs] == [name], (fn, low.pre.exprs)
            chunks = [df.slice(0, 4), df.slice(4, 0), df.slice(4, 7)]
            steps = (low.pre, low.partial) if low.partial is not None else (low.pre,)
            merged = run_pipeline(pl.concat([run_pipeline(c, steps, {}) for c in chunks]), low.final, {})
            assert merged.schema == direct.schema == node.schema, fn
            assert_same(merged.sort(name), direct.sort(name), ordered=True)


# --- the rest of the frame API, each against Polars ----------------------------------------------------


@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "semi", "anti"])
def test_joins_of_every_kind(files: dict[str, Path], how: str) -> None:
    lf, pf = _pair(files, "facts")
    dims, pdims = _pair(files, "dims")
    check(lf.join(dims, on="k", how=how), pf.join(pdims, on="k", how=how))
    if how in ("inner", "left", "full"):
        check(lf.join(dims, on="k", how=how, coalesce=True), pf.join(pdims, on="k", how=how, coalesce=True))
    small = dims.filter(col("k") < 3).select(col("k").alias("k2"), "label")
    psmall = pdims.filter(pl.col("k") < 3).select(pl.col("k").alias("k2"), "label")
    check(lf.filter(col("q") > 40).join(small, how="cross"), pf.filter(pl.col("q") > 40).join(psmall, how="cross"))


def test_windows_over_partitions_and_the_whole_frame(files: dict[str, Path]) -> None:
    lf, pf = _pair(files, "facts")
    q = lf.with_columns(
        col("x").sum().over("k").alias("sum_k"),
        col("q").rank("min", descending=True).over("k", "g").alias("r"),
        (col("x") / col("x").mean().over("g")).alias("rel"),
        count().over("g").alias("n_g"),
    )
    plan = q.optimized_plan()
    windows = [n for n in walk(plan) if isinstance(n, Window)]
    assert sorted(w.partition_by for w in windows) == [("g",), ("k",), ("k", "g")]
    assert not any(isinstance(x, Over) for w in windows for e in w.exprs for x in [e])
    check(q, pf.with_columns(
        pl.col("x").sum().over("k").alias("sum_k"),
        pl.col("q").rank("min", descending=True).over("k", "g").alias("r"),
        (pl.col("x") / pl.col("x").mean().over("g")).alias("rel"),
        pl.len().over("g").alias("n_g"),
    ))  # fmt: skip
    # ordered windows on a unique order key: running sums, row numbers, lag
    ordered = lf.with_columns(cf.int_range(1, cf.len() + 1).over("k", order_by="q").alias("i")).filter(col("i") == 1).select("k", "q")
    pordered = pf.with_columns(pl.int_range(1, pl.len() + 1).over("k", order_by="q").alias("i")).filter(pl.col("i") == 1).select("k", "q")
    check(ordered.unique(), pordered.unique())
    one = lf.filter(col("k") == 3).sort("d", "q", "x", nulls_last=True)
    pone = pf.filter(pl.col("k") == 3).sort("d", "q", "x", nulls_last=True, maintain_order=True)
    check(one.with_columns(col("q").cum_sum().alias("cs"), col("q").shift(1).alias("lag"), col("x").rank("dense").alias("rk")),
          pone.with_columns(pl.col("q").cum_sum().alias("cs"), pl.col("q").shift(1).alias("lag"), pl.col("x").rank("dense").alias("rk")), ordered=True)  # fmt: skip
    check(lf.filter(col("q").rank("ordinal").over("g") <= 2).select("g", "q"), pf.filter(pl.col("q").rank("ordinal").over("g") <= 2).select("g", "q"))


def test_rename_drop_drop_nulls_clip_quantile_and_sum_horizontal(files: dict[str, Path]) -> None:
    lf, pf = _pair(files, "facts")
    check(lf.rename({"x": "value", "g": "group"}).drop("n", "d"), pf.rename({"x": "value", "g": "group"}).drop("n", "d"), ordered=True)
    check(lf.rename({"k": "g", "g": "k"}).select("k", "g"), pf.rename({"k": "g", "g": "k"}).select("k", "g"), ordered=True)  # a swap
    check(lf.drop(["n"]).drop_nulls(), pf.drop(["n"]).drop_nulls(), ordered=True)
    check(lf.drop_nulls("k").drop_nulls(["x", "g"]), pf.drop_nulls("k").drop_nulls(["x", "g"]), ordered=True)
    check(lf.select(col("x").clip(10, 50).alias("c"), col("q").clip(lower_bound=0).alias("lo"), col("q").clip(upper_bound=-3).alias("hi"), cf.sum_horizontal("x", "q", "n").alias("s")),
          pf.select(pl.col("x").clip(10, 50).alias("c"), pl.col("q").clip(lower_bound=0).alias("lo"), pl.col("q").clip(upper_bound=-3).alias("hi"), pl.sum_horizontal("x", "q", "n").alias("s")), ordered=True)  # fmt: skip
    check(lf.group_by("g").agg(col("x").quantile(0.25).alias("q1"), col("q").quantile(0.9, "linear").alias("q9"), col("x").quantile(0.5, "midpoint").alias("m")),
          pf.group_by("g").agg(pl.col("x").quantile(0.25).alias("q1"), pl.col("q").quantile(0.9, "linear").alias("q9"), pl.col("x").quantile(0.5, "midpoint").alias("m")))  # fmt: skip
    check(lf.select(col("q").cast(cf.Int16).alias("q16"), col("x").cast(cf.Float32)), pf.select(pl.col("q").cast(pl.Int16).alias("q16"), pl.col("x").cast(pl.Float32)), ordered=True)  # Polars' types, re-exported
    check(lf.rename({"zz": "a"}, strict=False).drop("zz", strict=False), pf.rename({"zz": "a"}, strict=False).drop("zz", strict=False), ordered=True)
    with pytest.raises(ConfigError, match="rename: no column 'zz'"):
        lf.rename({"zz": "a"})
    with pytest.raises(ConfigError, match="drop: no column 'zz'"):
        lf.drop("zz")


def test_is_in_a_frame_and_scalar_subqueries(files: dict[str, Path]) -> None:
    lf, pf = _pair(files, "facts")
    dims, pdims = _pair(files, "dims")
    keys = dims.filter(col("label") == "L3").select("k")
    pkeys = pdims.filter(pl.col("label") == "L3").select("k").collect()["k"]
    check(lf.filter(col("k").is_in(keys)), pf.filter(pl.col("k").is_in(pkeys.implode())))
    check(lf.filter(~col("k").is_in(keys)), pf.filter(~pl.col("k").is_in(pkeys.implode())))
    check(lf.select("k", col("k").is_in(keys).alias("hit")), pf.select("k", pl.col("k").is_in(pkeys.implode()).alias("hit")))
    plan = lf.filter(col("k").is_in(keys)).optimized_plan()
    assert [j.how for j in walk(plan) if isinstance(j, Join)] == ["semi"]
    top = cf.scalar(dims.select(col("w").max()))
    check(lf.select("q", (col("q") + top).alias("t")), pf.select("q", (pl.col("q") + pdims.select(pl.col("w").max()).collect().item()).alias("t")))
    check(lf.select(top.alias("only")), pl.select(pl.lit(30.0).alias("only")).lazy())
    nothing = cf.scalar(dims.filter(col("w") > 1e9).select("w"))
    assert lf.select(nothing.alias("v")).to_polars().collect().rows() == [(None,)]


def test_concat_len_count_sort_slice_unique(files: dict[str, Path]) -> None:
    lf, pf = _pair(files, "facts")
    check(cf.concat([lf.select("k", "q"), lf.filter(col("k") == 7).select("k", "q")]), pl.concat([pf.select("k", "q"), pf.filter(pl.col("k") == 7).select("k", "q")]))
    check(lf.count(), pf.count())
    check(lf.len(), pf.select(pl.len()))
    keys = ("g", "x", "q", "d", "k")
    check(lf.sort(*keys, descending=[True, False, False, True, False], nulls_last=[True, False, True, False, True]),
          pf.sort(*keys, descending=[True, False, False, True, False], nulls_last=[True, False, True, False, True], maintain_order=True), ordered=True)  # fmt: skip
    check(lf.sort("q", "x", "d", "k", "g").slice(5, 20), pf.sort("q", "x", "d", "k", "g").slice(5, 20), ordered=True)
    check(lf.select("g", "k").unique(), pf.select("g", "k").unique())
    with pytest.raises(ConfigError, match="concat"):
        cf.concat([lf.select("k"), lf.select("q")])


def test_aggregations_over_aggregations_in_agg(files: dict[str, Path]) -> None:
    lf, pf = _pair(files, "facts")
    q = lf.group_by("k").agg((col("x").sum() / col("q").sum()).alias("ratio"), (col("x").max() - col("x").min()).alias("spread"), (count() * 2).alias("twice"), col("g").n_unique())
    check(q, pf.group_by("k").agg((pl.col("x").sum() / pl.col("q").sum()).alias("ratio"), (pl.col("x").max() - pl.col("x").min()).alias("spread"), (pl.len() * 2).alias("twice"), pl.col("g").n_unique()))


def test_a_node_used_twice_stays_one_node(files: dict[str, Path]) -> None:
    """TPC-DS Q1's shape: an aggregate read by two branches is one object in the optimised plan."""
    lf, pf = _pair(files, "facts")
    ctr = lf.group_by("k", "g").agg(col("x").sum().alias("total"))
    limits = ctr.group_by("g").agg((col("total").mean() * 1.2).alias("limit"))
    q = ctr.join(limits, on="g").filter(col("total") > col("limit")).select("k", "g", "total")
    plan = optimize(q._node)
    shared = [n for n in walk(plan) if isinstance(n, Aggregate) and parents(plan).get(id(n), 0) > 1]
    assert len(shared) == 1 and shared[0].key_names() == ("k", "g")
    assert "<shared #" in q.explain()
    pctr = pf.group_by("k", "g").agg(pl.col("x").sum().alias("total"))
    plimits = pctr.group_by("g").agg((pl.col("total").mean() * 1.2).alias("limit"))
    check(q, pctr.join(plimits, on="g").filter(pl.col("total") > pl.col("limit")).select("k", "g", "total"))


def test_unsupported_uses_are_explained(files: dict[str, Path]) -> None:
    lf, _ = _pair(files, "facts")
    with pytest.raises(ConfigError, match="inside an aggregation"):
        lf.group_by("k").agg(col("x") + 1)
    with pytest.raises(ConfigError, match="window"):
        lf.group_by("k").agg(col("x").rank().max())
    with pytest.raises(ConfigError, match="cross join takes no keys"):
        lf.join(lf, on="k", how="cross")
    with pytest.raises(ConfigError, match="over"):
        col("x").sum().over()
    with pytest.raises(ConfigError, match="one column"):
        cf.scalar(lf.select("k", "q"))
    assert when(col("k") > 1).then(1).otherwise(0).is_scalar() is False
