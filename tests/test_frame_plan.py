"""Logical plans, the optimiser, aggregation lowering, and exchange buckets (no workers needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.config import Config
from croupier.dag.operators import run_pipeline
from croupier.ops.partition import hash_buckets, range_buckets, sort_keys
from croupier.dag.scan import ScanSpec
from croupier.errors import ConfigError
from croupier.frame import LazyFrame, col, count
from croupier.expr import Unary
from croupier.plan.compile import order_seen
from croupier.plan.logical import Aggregate, Filter, Join, Node, Project, Scan, walk
from croupier.plan.optimize import optimize

ORDERS = pl.Schema({"o_orderkey": pl.Int64, "o_custkey": pl.Int64, "o_date": pl.Date, "o_price": pl.Float64, "o_comment": pl.String})
CUSTOMER = pl.Schema({"c_custkey": pl.Int64, "c_name": pl.String, "c_nation": pl.Int32, "c_comment": pl.String})


def _frame(name: str, schema: pl.Schema) -> LazyFrame:
    return LazyFrame(Scan(ScanSpec(f"file:///nowhere/{name}.parquet", "parquet"), schema), Config(concurrency=2))


def _scans(node: Node) -> list[Scan]:
    out = [node] if isinstance(node, Scan) else []
    for child in node.children():
        out += _scans(child)
    return out


def test_predicates_reach_the_scans_through_joins_and_projections() -> None:
    orders, customer = _frame("orders", ORDERS), _frame("customer", CUSTOMER)
    q = (
        orders.with_columns((col("o_price") * 2).alias("double"))
        .join(customer, left_on="o_custkey", right_on="c_custkey")
        .filter((col("o_price") > 10) & (col("c_nation") == 3) & (col("double") > col("o_price")))
        .select("o_orderkey", "c_name")
    )
    plan = optimize(q._node)
    scans = {s.spec.url.rsplit("/", 1)[1]: s for s in _scans(plan)}
    assert scans["orders.parquet"].spec.predicate.show() == "(col('o_price') > 10)"  # type: ignore[union-attr]
    assert scans["customer.parquet"].spec.predicate.show() == "(col('c_nation') == 3)"  # type: ignore[union-attr]
    # the condition on a computed column stays above the projection that computes it
    assert "double" in plan.tree()
    assert list(plan.schema) == ["o_orderkey", "c_name"]


def test_predicates_reach_the_scans_through_renaming_projections() -> None:
    """SQL reads every table through a renaming (``o_price`` as ``orders.o_price``): conditions on
    the new names reach the scan on the old ones (where they prune row groups); a condition on a
    computed column, or on a column renamed and swapped with another, stays correct."""
    orders = _frame("orders", ORDERS)
    renamed = orders.select(col("o_orderkey").alias("orders.o_orderkey"), col("o_price").alias("orders.o_price"), col("o_date").alias("orders.o_date"), (col("o_price") * 2).alias("double"))
    q = renamed.filter((col("orders.o_price") > 10) & (col("double") > 5) & (col("orders.o_orderkey") < col("orders.o_price")))
    plan = optimize(q._node)
    (scan,) = _scans(plan)
    assert scan.spec.predicate.show() == "((col('o_price') > 10) & (col('o_orderkey') < col('o_price')))"  # type: ignore[union-attr]
    assert "filter (col('double') > 5)" in plan.tree()
    swapped = orders.select(col("o_price").alias("o_orderkey"), col("o_orderkey").alias("o_price")).filter(col("o_orderkey") > 10)
    (scan,) = _scans(optimize(swapped._node))
    assert scan.spec.predicate.show() == "(col('o_price') > 10)"  # type: ignore[union-attr]
    kept = orders.with_columns(col("o_price").alias("p"), col("o_custkey").alias("o_price")).filter((col("p") > 1) & (col("o_price") > 2))
    (scan,) = _scans(optimize(kept._node))
    assert scan.spec.predicate.show() == "((col('o_price') > 1) & (col('o_custkey') > 2))"  # type: ignore[union-attr]


def test_selectivity_guesses_from_row_group_statistics() -> None:
    """What share of a row group's rows a condition keeps: ranges by where the constant falls
    between min and max, equalities a tenth, combined as if independent; none where statistics
    rule every row out."""
    import datetime

    from croupier.expr.analysis import EQUAL_SHARE, OTHER_SHARE, selectivity

    stats = {"d": (datetime.date(1992, 1, 1), datetime.date(1998, 12, 31)), "x": (0, 100), "s": ("A", "R"), "one": ("N", "N")}
    assert selectivity(col("x") < 25, stats) == pytest.approx(0.25)
    assert selectivity(col("x") >= 25, stats) == pytest.approx(0.75)
    assert selectivity(col("d") > datetime.date(1995, 7, 2), stats) == pytest.approx(0.5, abs=0.01)
    assert selectivity((col("x") < 50) & (col("s") == "R"), stats) == pytest.approx(0.5 * EQUAL_SHARE)
    assert selectivity((col("x") < 10) | (col("x") > 90), stats) == pytest.approx(0.1 + 0.1 - 0.01)
    assert selectivity(~(col("x") < 10), stats) == pytest.approx(0.9)
    assert selectivity(col("s").is_in(["A", "B", "C"]), stats) == pytest.approx(3 * EQUAL_SHARE)
    assert selectivity(col("x") > 200, stats) == 0.0 and selectivity(col("one") == "N", stats) == 1.0
    assert selectivity(col("s") < "M", stats) == OTHER_SHARE  # strings have no distance
    assert selectivity(col("x") < col("y"), stats) == OTHER_SHARE
    assert selectivity(col("z") < 3, stats) == OTHER_SHARE  # no statistics
    assert selectivity(col("d") < datetime.datetime(1995, 1, 1), stats) == OTHER_SHARE  # a date against a time


def test_scans_read_only_needed_columns() -> None:
    orders, customer = _frame("orders", ORDERS), _frame("customer", CUSTOMER)
    q = orders.join(customer, left_on="o_custkey", right_on="c_custkey").group_by("c_name").agg(col("o_price").sum())
    plan = optimize(q._node)
    cols = {s.spec.url.rsplit("/", 1)[1]: s.spec.columns for s in _scans(plan)}
    assert cols == {"orders.parquet": ("o_custkey", "o_price"), "customer.parquet": ("c_custkey", "c_name")}
    assert list(plan.schema) == list(q.schema) == ["c_name", "o_price"]


def test_predicates_do_not_cross_outer_join_right_side_or_limits() -> None:
    orders, customer = _frame("orders", ORDERS), _frame("customer", CUSTOMER)
    q = orders.join(customer, left_on="o_custkey", right_on="c_custkey", how="left").filter(col("c_nation") == 3)
    plan = optimize(q._node)
    assert isinstance(plan, Filter) or any(isinstance(n, Filter) for n in [plan, *plan.children()])
    assert all(s.spec.predicate is None for s in _scans(plan))
    q2 = orders.head(5).filter(col("o_price") > 1)
    assert all(s.spec.predicate is None for s in _scans(optimize(q2._node)))


def test_bad_plans_fail_when_built() -> None:
    orders = _frame("orders", ORDERS)
    with pytest.raises(ConfigError, match="unknown column"):
        orders.filter(col("nope") > 1)
    with pytest.raises(ConfigError, match="no column"):
        orders.join(orders, left_on="o_orderkey", right_on="zzz")
    with pytest.raises(ConfigError, match="inside an aggregation"):
        orders.group_by("o_custkey").agg(col("o_price") / col("o_price").count())
    with pytest.raises(ConfigError, match="how"):
        orders.join(orders, on="o_orderkey", how="outer")
    with pytest.raises(ConfigError, match="join"):
        orders.join(_frame("customer", CUSTOMER), left_on="o_custkey", right_on="c_name")
    with pytest.raises(ConfigError, match="descending"):
        orders.sort("o_price", "o_date", descending=[True])


def test_an_is_in_filter_is_a_semi_join_in_left_order_kept_only_where_read() -> None:
    """``filter(x.is_in(frame))`` lowers to a semi join (an anti join negated) that keeps its left
    input's order, as the filter does; the planner keeps it where that order shows (the result
    of a plain query, a head, first/last), not under a sum; a join cannot be asked to keep an
    order the engine does not keep."""
    orders, customer = _frame("orders", ORDERS), _frame("customer", CUSTOMER)
    keys = customer.filter(col("c_nation") == 3).select("c_custkey")
    for hit in (col("o_custkey").is_in(keys), ~col("o_custkey").is_in(keys)):
        q = orders.filter(hit)
        for query, read in ((q, True), (q.head(5), True), (q.group_by("o_date").agg(col("o_price").first()), True), (q.group_by("o_date").agg(col("o_price").sum()), False)):
            plan = optimize(query._node)
            (join,) = [n for n in walk(plan) if isinstance(n, Join)]
            assert (join.how, join.maintain_order) == ("anti" if isinstance(hit, Unary) else "semi", "left")
            assert (id(join) in order_seen(plan)) == read, plan.tree()
    with pytest.raises(ConfigError, match="maintain_order='left' is supported for inner, left, semi and anti joins"):
        Join(orders._node, customer._node, ("o_custkey",), ("c_custkey",), "full", maintain_order="left")
    with pytest.raises(ConfigError, match="maintain_order must be one of"):
        Join(orders._node, customer._node, ("o_custkey",), ("c_custkey",), "inner", maintain_order="right")


def test_explain_preview_names_the_exchanges() -> None:
    orders, customer = _frame("orders", ORDERS), _frame("customer", CUSTOMER)
    q = orders.join(customer, left_on="o_custkey", right_on="c_custkey").group_by("c_name").agg(count().alias("n")).sort("n", descending=True)
    text = q.explain()
    assert "logical plan:" in text and "optimized plan:" in text and "physical stages" in text
    assert "exchange hash(" in text and "plan bound late" in text and "broadcast if build side" in text and "one task sorts" in text


# --- aggregation lowering: partial per chunk + final == one aggregation ---------------------------

_rows = st.lists(st.tuples(st.integers(0, 4), st.integers(-50, 50), st.one_of(st.none(), st.floats(-1e3, 1e3, allow_nan=False))), min_size=0, max_size=60)


@settings(max_examples=60, deadline=None)
@given(_rows, st.integers(1, 5))
def test_partial_then_final_aggregation_equals_direct(rows: list, chunks: int) -> None:
    """Partial per chunk + final == Polars' own group_by, values, nulls and dtypes (mean of an
    all-null group is null, never NaN)."""
    df = pl.DataFrame(rows, schema={"k": pl.Int64, "v": pl.Int64, "f": pl.Float64}, orient="row")
    aggs = (col("v").sum().alias("s"), col("f").count().alias("c"), col("f").mean().alias("m"), col("v").min().alias("lo"), col("v").max().alias("hi"), count().alias("n"),
            (col("v").sum() / count()).alias("ratio"))  # fmt: skip
    node = Aggregate(Scan(ScanSpec("file:///x", "parquet"), df.schema), (col("k"),), aggs)
    low = node.lower()
    assert low.partial is not None
    bounds = np.linspace(0, df.height, chunks + 1).astype(int)
    partials = [run_pipeline(df.slice(a, b - a), (low.pre, low.partial), {}) for a, b in zip(bounds, bounds[1:])]
    merged = run_pipeline(pl.concat(partials), low.final, {}).sort("k")
    direct = df.group_by("k").agg([a.to_polars() for a in aggs]).sort("k")
    assert merged.schema == direct.schema
    assert merged.drop("m", "ratio").equals(direct.drop("m", "ratio"))
    for name in ("m", "ratio"):
        for a, b in zip(merged[name].to_list(), direct[name].to_list()):
            assert (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= 1e-9 * max(1.0, abs(b)))


def test_n_unique_skips_the_partial_step() -> None:
    schema = pl.Schema({"k": pl.Int64, "v": pl.Int64})
    node = Aggregate(Scan(ScanSpec("file:///x", "parquet"), schema), (col("k"),), (col("v").n_unique().alias("u"),))
    assert node.lower().partial is None
    assert dict(node.schema) == {"k": pl.Int64, "u": pl.UInt32}  # Polars' n_unique dtype


# --- exchange buckets ------------------------------------------------------------------------------


def test_hash_buckets_agree_across_integer_widths() -> None:
    a = pl.DataFrame({"k": pl.Series([1, 2, 3, 1000, -7], dtype=pl.Int32)})
    b = pl.DataFrame({"k": pl.Series([1, 2, 3, 1000, -7], dtype=pl.Int64)})
    assert (hash_buckets(a, ["k"], 16) == hash_buckets(b, ["k"], 16)).all()
    assert hash_buckets(a, ["k"], 1).tolist() == [0] * 5


def test_hash_buckets_take_one_column_as_two_keys_like_two_equal_columns() -> None:
    """``ON s.a = g.k AND s.a = g.k2``: the left side hashes (a, a), the right (k, k2); rows whose
    keys are equal meet in one bucket (a struct of two fields named a failed with DuplicateError)."""
    left = pl.DataFrame({"a": [1, 2, 3, None, 7]})
    right = pl.DataFrame({"k": [1, 2, 3, None, 7], "k2": [1, 2, 3, None, 7]})
    assert (hash_buckets(left, ["a", "a"], 16) == hash_buckets(right, ["k", "k2"], 16)).all()


def test_hash_buckets_put_keys_polars_groups_together_in_one_bucket() -> None:
    """0.0 and -0.0, and every NaN, are one group in Polars, so one bucket, with one key column
    (hashed as it is) or several (hashed as a struct); chunked columns bucket as whole ones."""
    nan = float("nan")
    one = pl.DataFrame({"x": [0.0, -0.0, nan, -nan, None, 1.5] * 50, "y": pl.Series([1, 1, 2, 2, 3, 4] * 50, dtype=pl.Int16)})
    for keys in (["x"], ["x", "y"]):
        bucket = hash_buckets(one, keys, 64)
        groups = one.with_columns(pl.Series("b", bucket)).group_by(keys).agg(pl.col("b").n_unique())
        assert groups.height == 4 and groups["b"].to_list() == [1] * 4, keys
        chunked = pl.concat([one.slice(0, 100), one.slice(100)], rechunk=False)
        assert chunked.n_chunks() == 2 and (hash_buckets(chunked, keys, 64) == bucket).all()
        assert bucket.min() >= 0 and bucket.max() < 64


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 5)), st.integers(0, 3)), min_size=1, max_size=80), st.booleans(), st.booleans(), st.integers(1, 6))
def test_range_buckets_follow_the_sort_order(rows: list, desc: bool, nulls_last: bool, parts: int) -> None:
    df = pl.DataFrame(rows, schema={"a": pl.Int64, "b": pl.Int64}, orient="row")
    by = [pl.col("a"), pl.col("b")]
    flags = [desc, False]
    keys = sort_keys(df, by).sort(["__k0", "__k1"], descending=flags, nulls_last=nulls_last)
    splitters = keys[sorted({min(keys.height - 1, i * keys.height // parts) for i in range(1, parts)})]
    bucket = range_buckets(df, by, flags, nulls_last, splitters)
    ordered = df.with_columns(pl.Series("bucket", bucket)).sort(["a", "b"], descending=flags, nulls_last=nulls_last, maintain_order=True)
    # concatenating the buckets in order, each sorted, gives the global order
    per_bucket = ordered.sort("bucket", maintain_order=True)
    assert per_bucket.select("a", "b").equals(ordered.select("a", "b"))
    assert bucket.min() >= 0 and bucket.max() <= splitters.height


def test_join_and_project_schemas() -> None:
    orders, customer = _frame("orders", ORDERS), _frame("customer", CUSTOMER)
    j = orders.join(customer, left_on="o_custkey", right_on="c_custkey")
    assert "c_custkey" not in j.columns and "c_comment" in j.columns
    assert orders.join(customer, left_on="o_custkey", right_on="c_custkey", how="semi").columns == list(ORDERS)
    p = orders.select((col("o_price") * 2).alias("x"), "o_date")
    assert dict(p.schema) == {"x": pl.Float64, "o_date": pl.Date}
    assert isinstance(p._node, Project) and isinstance(j._node, Join)
    with pytest.raises(ConfigError, match="unique"):
        orders.group_by("o_custkey").agg(col("o_price").sum(), col("o_price").sum())


def test_projection_pushdown_keeps_suffixed_names() -> None:
    """Dropping the left 'o_price' would make the right one lose its '_right' suffix."""
    orders = _frame("orders", ORDERS)
    prices = _frame("prices", pl.Schema({"key": pl.Int64, "o_price": pl.Float64}))
    q = orders.join(prices, left_on="o_orderkey", right_on="key").select("o_orderkey", "o_price_right")
    plan = optimize(q._node)
    assert list(plan.schema) == ["o_orderkey", "o_price_right"]


def test_adaptive_partial_aggregation_passes_rows_through_in_partial_form() -> None:
    """A partial aggregation that would hardly reduce its rows emits them in partial form; merged by
    the final step, the result is the same as aggregating directly (dtypes included)."""
    from dataclasses import replace

    rng = np.random.default_rng(3)
    n = 3 * 65_536
    df = pl.DataFrame({"k": rng.integers(0, 10**9, n), "v": pl.Series(rng.integers(-5, 5, n), dtype=pl.Int32), "f": [None if i % 9 == 0 else float(i) for i in range(n)]})
    aggs = (col("v").sum().alias("s"), col("f").count().alias("c"), col("f").min().alias("lo"), col("v").max().alias("hi"), count().alias("n"), col("f").mean().alias("m"))
    node = Aggregate(Scan(ScanSpec("file:///x", "parquet"), df.schema), (col("k"),), aggs)
    low = node.lower()
    assert low.partial is not None
    bypass = replace(low.partial, adaptive=True)
    pre = run_pipeline(df, (low.pre,), {})
    passed = bypass.apply(pre, {})
    assert passed.height == df.height  # all groups distinct: rows passed through
    assert passed.schema == low.partial.apply(pre, {}).schema
    merged = run_pipeline(passed, low.final, {}).sort("k")
    direct = run_pipeline(run_pipeline(pre, (low.partial,), {}), low.final, {}).sort("k")
    assert merged.equals(direct)
    few = pre.with_columns((pl.col("k") % 7).alias("k"))
    assert bypass.apply(few, {}).height == 7  # few groups: a real partial aggregation


@pytest.mark.parametrize("algorithm", ["direct", "2-level", "direct+wc"])
def test_explain_previews_a_forced_algorithm_as_the_run_binds_it(tmp_path: Path, algorithm: str) -> None:
    """A forced plain algorithm binds P before the producers write (the runner does so); the
    preview must too, not fail asking for a write-combined plan."""
    import croupier
    from croupier.config import Config

    for i in range(3):
        pl.DataFrame({"k": [j % 7 for j in range(i, 2000 + i)], "v": list(range(2000))}).write_parquet(tmp_path / f"part-{i}.parquet")
    config = Config(concurrency=2, calibration="off", algorithm=algorithm, workers=4)
    text = croupier.scan_parquet(str(tmp_path / "*.parquet"), config).group_by("k").agg(col("v").sum()).explain()
    chosen = [line for line in text.splitlines() if line.lstrip().startswith("* ")]
    assert chosen and all(line.split()[1] == algorithm for line in chosen), text
    assert all("P=4" in line for line in chosen), text


@pytest.mark.parametrize("algorithm", [None, "direct"])
def test_explain_prices_a_query_exchange_with_the_query_s_own_phase_kinds(tmp_path: Path, algorithm: str | None) -> None:
    """The preview prices a group-by's exchange with the phase kinds the runner will pass when it
    binds it (the consumer's: exchange read, aggregate; or, bound early, the producer's), never
    with TeraSort's records kernels, which made a first run's preview name records_sort."""
    import croupier
    from croupier.config import Config

    for i in range(3):  # enough rows that compute dominates the prediction
        pl.DataFrame({"k": pl.int_range(i, 1_000_000 + i, eager=True) % 997, "v": pl.int_range(0, 1_000_000, eager=True)}).write_parquet(tmp_path / f"part-{i}.parquet", compression="uncompressed")
    config = Config(concurrency=2, calibration="off", algorithm=algorithm, workers=4 if algorithm else None)
    text = croupier.scan_parquet(str(tmp_path / "*.parquet"), config).group_by("k").agg(col("v").sum()).explain()
    priced = [line for line in text.splitlines() if "dominant: compute" in line]
    assert priced, text
    assert not any("records" in line for line in priced), text


def test_inferred_schemas_are_remembered_by_every_type_and_literal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Schema inference is remembered by what ran: a node rebuilt over the same input asks
    Polars nothing (an aggregation's partial steps included), while expressions that differ only in a literal's type (1, 1.0, True, a
    typed 1) or input schemas that differ only in a dtype each get their own schema."""
    from croupier.expr import lit
    from croupier.plan import inference

    ran: list[str] = []
    infer = inference.infer
    monkeypatch.setattr(inference, "infer", lambda what, run: ran.append(what) or infer(what, run))
    monkeypatch.setattr(inference, "_INFERRED", type(inference._INFERRED)())
    ints = Scan(ScanSpec("file:///x", "parquet"), pl.Schema({"k": pl.Int64, "v": pl.Int32}))
    floats = Scan(ScanSpec("file:///x", "parquet"), pl.Schema({"k": pl.Int64, "v": pl.Float32}))
    made = {}
    for name, value in (("int", lit(1)), ("float", lit(1.0)), ("bool", lit(True)), ("int8", lit(1, pl.Int8))):
        made[name] = Project(ints, (col("k"), value.alias("w")))
    assert [made[n].schema["w"] for n in made] == [pl.Int32, pl.Float64, pl.Boolean, pl.Int8]
    assert Project(floats, (col("k"), (col("v") + lit(1)).alias("w"))).schema["w"] == pl.Float32
    before = len(ran)
    again = Project(ints, (col("k"), lit(1.0).alias("w")))  # as the optimiser rebuilds it
    grouped = [Aggregate(ints, (col("k"),), (col("v").sum().alias("s"),)) for _ in range(2)]
    assert again.schema == made["float"].schema and grouped[0].schema == grouped[1].schema == pl.Schema({"k": pl.Int64, "s": pl.Int32})
    assert ran[before:] == [grouped[0].label(), "partial aggregates"], "only the first aggregation asked Polars (its schema, its partial steps' types)"


def test_operands_and_aggregations_are_shared_only_when_equal_in_every_field() -> None:
    """sum(v), min(v), max(v) read one pre-projected column; operands that print alike but
    differ (a strict and a lenient cast, is_in with and without nulls_equal) keep their own, and so
    do aggregations of them: each gives Polars' answer."""
    df = pl.DataFrame({"k": [1, 1, 2, 2, 3], "v": pl.Series([1, None, 300, 2, None], dtype=pl.Int32)})
    aggs = (
        col("v").sum().alias("s"), col("v").min().alias("lo"), col("v").max().alias("hi"),
        col("v").is_in([1, None]).cast(pl.Int64).sum().alias("a"), col("v").is_in([1, None], nulls_equal=True).cast(pl.Int64).sum().alias("b"),
        col("v").cast(pl.Int8, strict=False).max().alias("lenient"),
    )  # fmt: skip
    node = Aggregate(Scan(ScanSpec("file:///x", "parquet"), df.schema), (col("k"),), aggs)
    low = node.lower()
    assert low.partial is not None
    operands = [e.show() for e in low.pre.exprs]
    assert len(operands) == 1 + 1 + 2 + 1, operands  # the key, v once, both is_in, the cast
    got = run_pipeline(run_pipeline(run_pipeline(df, (low.pre,), {}), (low.partial,), {}), low.final, {}).sort("k")
    want = df.group_by("k").agg(
        pl.col("v").sum().alias("s"), pl.col("v").min().alias("lo"), pl.col("v").max().alias("hi"),
        pl.col("v").is_in([1, None]).cast(pl.Int64).sum().alias("a"), pl.col("v").is_in([1, None], nulls_equal=True).cast(pl.Int64).sum().alias("b"),
        pl.col("v").cast(pl.Int8, strict=False).max().alias("lenient"),
    ).sort("k")  # fmt: skip
    assert got.equals(want), (got, want)


def test_sql_in_subqueries_keep_no_order(tmp_path: Path) -> None:
    """SQL's ``x IN (SELECT ...)``, as a filter or as a value, becomes a join that keeps no row
    order (DuckDB keeps none without ORDER BY), so a shuffled one is never sorted back; the
    frame API's is_in keeps its input's (the test above)."""
    from croupier.sql import sql

    tables = {}
    for name, schema in (("orders", ORDERS), ("customer", CUSTOMER)):
        pl.DataFrame(schema=schema).write_parquet(tmp_path / f"{name}.parquet")
        tables[name] = str(tmp_path / f"{name}.parquet")
    for text in ("SELECT * FROM orders WHERE o_custkey IN (SELECT c_custkey FROM customer WHERE c_nation = 3)",
                 "SELECT o_custkey IN (SELECT c_custkey FROM customer) AS hit FROM orders"):
        plan = optimize(sql(text, tables, Config(concurrency=2))._node)
        assert [n.maintain_order for n in walk(plan) if isinstance(n, Join) and n.how != "cross"] == ["none"], plan.tree()
