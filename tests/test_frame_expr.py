"""Expressions: translation to Polars, inspection, and row-group pruning soundness."""

from __future__ import annotations

import pickle
from datetime import date, timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.errors import ConfigError
from croupier.expr import Expr, conjoin, conjuncts, dtype_name, may_match
from croupier.frame import col, count, lit, when

DF = pl.DataFrame(
    {
        "a": [1, 2, 3, None, 5],
        "b": [0.5, 1.5, 2.5, 3.5, None],
        "s": ["apple", "banana", "cherry", "PROMO BRASS", None],
        "d": [date(1994, 1, 1), date(1994, 6, 30), date(1995, 1, 1), date(1993, 12, 31), date(1996, 2, 29)],
    }
)


def _eval(expr: Expr) -> list:
    return DF.select(expr.to_polars().alias("x"))["x"].to_list()


@pytest.mark.parametrize(
    "expr, expected",
    [
        (col("a") + 1, [2, 3, 4, None, 6]),
        (2 * col("a") - col("a"), [1, 2, 3, None, 5]),
        (col("a") / 2, [0.5, 1.0, 1.5, None, 2.5]),
        ((col("a") > 1) & (col("a") < 5), [False, True, True, None, False]),
        ((col("a") == 1) | (col("a") == 5), [True, False, False, None, True]),
        (~(col("a") >= 3), [True, True, False, None, False]),
        (col("a").is_in([1, 3]), [True, False, True, None, False]),
        (col("a").is_null(), [False, False, False, True, False]),
        (col("b").is_not_null(), [True, True, True, True, False]),
        (col("a").is_between(2, 3), [False, True, True, None, False]),
        (col("a").cast(float), [1.0, 2.0, 3.0, None, 5.0]),
        (col("a").cast("str"), ["1", "2", "3", None, "5"]),
        (col("s").str.contains("an"), [False, True, False, False, None]),
        (col("s").str.starts_with("ch"), [False, False, True, False, None]),
        (col("s").str.ends_with("BRASS"), [False, False, False, True, None]),
        (col("s").str.like("%BRASS"), [False, False, False, True, None]),
        (col("s").str.like("_pple"), [True, False, False, False, None]),
        (col("s").str.like("b%n%a"), [False, True, False, False, None]),
        (col("s").str.like("a.ple"), [False, False, False, False, None]),
        (col("s").str.substr(1, 2), ["ap", "ba", "ch", "PR", None]),
        (col("s").str.slice(2), ["ple", "nana", "erry", "OMO BRASS", None]),
        (col("d").dt.year(), [1994, 1994, 1995, 1993, 1996]),
        (col("d").dt.month(), [1, 6, 1, 12, 2]),
        (col("d").dt.day(), [1, 30, 1, 31, 29]),
        (col("d") + timedelta(days=1), [date(1994, 1, 2), date(1994, 7, 1), date(1995, 1, 2), date(1994, 1, 1), date(1996, 3, 1)]),
        (col("d").dt.offset_by("1y"), [date(1995, 1, 1), date(1995, 6, 30), date(1996, 1, 1), date(1994, 12, 31), date(1997, 2, 28)]),
        (col("d") < date(1994, 6, 30), [True, False, False, True, False]),
        (when(col("a") > 2).then(lit("big")).otherwise(lit("small")), ["small", "small", "big", "small", "big"]),
        (when(col("a") == 1).then(10).when(col("a") == 2).then(20).otherwise(0), [10, 20, 0, 0, 0]),
        (when(col("a") == 1).then(10), [10, None, None, None, None]),
        ((-col("a")).abs(), [1, 2, 3, None, 5]),
    ],
)
def test_expressions_evaluate_like_polars(expr: Expr, expected: list) -> None:
    assert _eval(expr) == expected


def test_aggregations_and_names() -> None:
    aggs = [col("a").sum(), col("a").count().alias("n"), col("b").mean(), col("a").min(), col("a").max(), col("s").n_unique(), count()]
    out = DF.select([a.to_polars().alias(f"c{i}") for i, a in enumerate(aggs)]).row(0)
    assert out == (11, 4, 2.0, 1, 5, 5, 5)
    assert [a.output_name() for a in aggs] == ["a", "n", "b", "a", "a", "s", "len"]
    assert (lit(1) + col("x")).output_name() == "literal"  # Polars' rule: the leftmost input names it


def test_columns_and_conjuncts() -> None:
    e = (col("a") > 1) & (col("b") < col("c")) & col("s").is_in(["x"])
    assert e.columns() == {"a", "b", "c", "s"}
    parts = conjuncts(e)
    assert len(parts) == 3
    assert conjoin(parts).show() == e.show()  # type: ignore[union-attr]
    assert conjoin([]) is None


def test_expression_misuse_is_explained() -> None:
    with pytest.raises(TypeError, match="truth value"):
        bool(col("a") > 1)
    with pytest.raises(ConfigError, match="cannot cast"):
        col("a").cast("complex")
    assert lit(1).output_name() == "literal"  # Polars' name for a bare literal
    assert dtype_name(pl.Float64) == "float64" and dtype_name(str) == "str"


def test_expressions_pickle() -> None:
    e = when(col("a").is_in([1, 2]) & col("s").str.like("%x%")).then(col("b") * 2).otherwise(0).sum().alias("z")
    back = pickle.loads(pickle.dumps(e))
    assert back.show() == e.show()
    assert DF.select(back.to_polars()).item() == DF.select(e.to_polars()).item()


def test_may_match_ranges() -> None:
    stats = {"a": (10, 20), "d": (date(1994, 1, 1), date(1994, 12, 31))}
    assert not may_match(col("a") > 20, stats)
    assert may_match(col("a") >= 20, stats)
    assert not may_match(col("a") < 10, stats)
    assert not may_match(5 > col("a"), stats)
    assert not may_match(col("a") == 9, stats)
    assert may_match(col("a") != 15, stats)
    assert not may_match(col("a").is_in([1, 30]), stats)
    assert may_match(col("a").is_in([1, 15]), stats)
    assert not may_match((col("a") < 5) | (col("a") > 25), stats)
    assert may_match((col("a") < 5) | (col("b") > 25), stats)  # b has no stats
    assert not may_match((col("d") >= date(1995, 1, 1)) & (col("a") > 0), stats)
    assert not may_match(col("d") < lit(date(1994, 1, 2)) - timedelta(days=1), stats)
    assert may_match(col("a") + 1 > 100, stats)  # not a plain column: unknown, kept


_ops = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])


@st.composite
def _predicates(draw: st.DrawFn, depth: int = 0) -> Expr:
    kind = draw(st.sampled_from(["cmp", "in"] + (["and", "or"] if depth < 2 else [])))
    if kind == "cmp":
        op, v = draw(_ops), draw(st.integers(-5, 25))
        c = col(draw(st.sampled_from(["x", "y"])))
        return {"<": c < v, "<=": c <= v, ">": c > v, ">=": c >= v, "==": c == v, "!=": c != v}[op]
    if kind == "in":
        return col("x").is_in(draw(st.lists(st.integers(-5, 25), max_size=3)))
    left, right = draw(_predicates(depth + 1)), draw(_predicates(depth + 1))
    return (left & right) if kind == "and" else (left | right)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=20), _predicates())
def test_pruning_never_drops_a_matching_row_group(rows: list[tuple[int, int]], predicate: Expr) -> None:
    df = pl.DataFrame(rows, schema=["x", "y"], orient="row")
    stats = {c: (df[c].min(), df[c].max()) for c in ("x", "y")}
    if df.filter(predicate.to_polars()).height > 0:
        assert may_match(predicate, stats)
