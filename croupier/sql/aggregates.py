"""SQL aggregate functions to Croupier aggregations, with DuckDB's semantics.

* ``sum`` (and ``count_if``) of no non-null value is NULL; sums of integers are Int64, of FLOAT
  Float64; ``count`` is Int64; ``count(DISTINCT x)`` ignores NULL; ``avg``, ``stddev`` and
  ``variance`` are Float64; ``median`` and ``quantile_cont`` Float64, of a FLOAT Float32.
* ``bool_and``/``bool_or`` are the min/max of a boolean; ``any_value`` is some non-null value (the
  smallest: DuckDB returns the first it meets, which only a query's shape makes deterministic).
* ``quantile_disc`` takes the value at position ceil(n·q) (Polars' ``equiprobable``), as DuckDB.
* ``arg_max(v, k)``/``max_by`` skip rows where ``v`` or ``k`` is NULL.
* ``string_agg`` skips NULLs (NULL when none is left); ``list``/``array_agg`` keep them; both take
  an ``ORDER BY`` inside the call.

Some aggregations do not split into a partial and a final step (median, quantiles, arg_max,
string_agg, list): the plan then aggregates every row of a group on one task, after the exchange
(:mod:`croupier.plan.partial`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl
from sqlglot import exp

from croupier.errors import ConfigError
from croupier.expr import Agg, Col, Expr, Func, Lit, when
from croupier.plan.partial import cheapest_column
from croupier.sql.parse import sql_text

if TYPE_CHECKING:
    from croupier.sql.exprs import ExprTranslator

SUPPORTED = (
    "count, sum, avg, min, max, count_if, bool_and, bool_or, any_value, stddev[_samp|_pop], variance, var_samp, var_pop, "
    "median, quantile_cont, quantile_disc, arg_max/max_by, arg_min/min_by, string_agg, list/array_agg"
)


class _PerRow:
    """An aggregate's translator whose constant operands are one value per row: in SQL,
    ``SUM(1)`` and ``COUNT(1)`` count a group's rows, while the aggregation of a constant
    (Polars' ``lit(1).sum()``) aggregates that one value. The constant is made to read the
    group's rows through a condition on the cheapest column whose branches are both it."""

    def __init__(self, t: ExprTranslator) -> None:
        self.t = t

    def __call__(self, e: exp.Expr) -> Expr:
        x = self.t(e)
        if x.columns() or x.has_agg():
            return x
        any_row = Col(cheapest_column(self.t.rel.node.schema)).is_null()
        return when(any_row).then(x).otherwise(x)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.t, name)


def aggregate(t: ExprTranslator, e: exp.Expr) -> Expr:
    """An SQL aggregate over the rows of ``t.rel`` (DuckDB semantics)."""
    t = _PerRow(t)  # type: ignore[assignment]
    if isinstance(e, exp.Count):
        return _count(t, e)
    if isinstance(e.this, exp.Distinct):
        raise ConfigError(f"SQL: {sql_text(e)}: DISTINCT is supported in count() only; aggregate over a SELECT DISTINCT subquery instead")
    if isinstance(e, (exp.GroupConcat, exp.ArrayAgg)):
        return _ordered_aggregate(t, e)
    for kinds, translate in _SIMPLE:
        if isinstance(e, kinds):
            return translate(t, e)
    raise ConfigError(f"SQL: aggregate {sql_text(e)} is not supported; supported aggregates: {SUPPORTED}")


def _count(t: ExprTranslator, e: exp.Count) -> Expr:
    arg = e.this
    if arg is None or isinstance(arg, exp.Star):
        return Agg("len", None).cast(pl.Int64)
    if isinstance(arg, exp.Distinct):
        if len(arg.expressions) != 1:
            raise ConfigError("SQL: count(DISTINCT ...) of several columns is not supported; count the rows of a SELECT DISTINCT subquery")
        x = t(arg.expressions[0])
        return (x.n_unique() - (x.null_count() > 0).cast(pl.UInt32)).cast(pl.Int64)
    return t(arg).count().cast(pl.Int64)


def _sum_of(t: ExprTranslator, x: Expr) -> Expr:
    """SQL sum: NULL without a non-null value; integers summed as Int64, FLOAT as DOUBLE."""
    dtype = t.dtype(x)
    total = (x.cast(pl.Int64) if dtype.is_integer() else x.cast(pl.Float64) if dtype == pl.Float32 else x).sum()
    return when(x.count() > 0).then(total).otherwise(Lit(None))


def _numeric(t: ExprTranslator, e: exp.Expr) -> Expr:
    """The operand of a statistic, which DuckDB computes on numbers (and Croupier as Float64)."""
    x = t(e.this)
    dtype = t.dtype(x)
    if not (dtype.is_numeric() or dtype == pl.Null):
        raise ConfigError(f"SQL: {sql_text(e)} needs a numeric argument (got {dtype}); cast it first")
    return x.cast(pl.Float64)


def _as_float(t: ExprTranslator, e: exp.Expr, out: Expr) -> Expr:
    """A median or continuous quantile of FLOAT values is a FLOAT in DuckDB (else a DOUBLE)."""
    return out.cast(pl.Float32) if t.dtype(t(e.this)) == pl.Float32 else out


def _fraction(e: exp.Expr, q: exp.Expr | None) -> float:
    """The constant fraction of a quantile, in [0, 1]."""
    value = q.this if isinstance(q, exp.Paren) else q
    if not isinstance(value, exp.Literal) or value.is_string or not 0 <= float(value.this) <= 1:
        raise ConfigError(f"SQL: {sql_text(e)}: the quantile must be one constant number between 0 and 1")
    return float(value.this)


def _quantile_disc(t: ExprTranslator, e: exp.Expr) -> Expr:
    x = t(e.this)
    dtype = t.dtype(x)
    if not dtype.is_numeric():
        raise ConfigError(f"SQL: {sql_text(e)} is supported on numbers only (got {dtype})")
    q = _fraction(e, e.args.get("quantile") if isinstance(e, exp.Quantile) else e.expression)
    return Agg("quantile", x, (q, "equiprobable")).cast(dtype)


def _by_key(t: ExprTranslator, e: exp.Expr, largest: bool) -> Expr:
    """``arg_max(v, k)``: v of the row with the largest k (``arg_min``: smallest)."""
    operand = Func("struct", (t(e.this).alias("v"), t(e.expression).alias("k")), ())
    return Agg("arg_max" if largest else "arg_min", operand)


def _ordered_aggregate(t: ExprTranslator, e: exp.Expr) -> Expr:
    """``string_agg(v, sep ORDER BY ...)`` and ``list(v ORDER BY ...)``: the values of the group
    (sorted by the keys when given), joined with ``sep`` or as one list."""
    arg, ordered = e.this, []
    if isinstance(arg, exp.Order):
        arg, ordered = arg.this, list(arg.expressions)
    if isinstance(arg, exp.Distinct):
        raise ConfigError(f"SQL: {sql_text(e)}: DISTINCT is supported in count() only")
    v = t(arg)
    fields = [v.alias("v")] + [t(o.this).alias(f"k{i}") for i, o in enumerate(ordered)]
    order = (tuple(bool(o.args.get("desc")) for o in ordered), tuple(not o.args.get("nulls_first") for o in ordered))
    operand = Func("struct", tuple(fields), ())
    if isinstance(e, exp.ArrayAgg):
        values = Agg("list", operand, order)
        return when(Agg("len", None) > 0).then(values).otherwise(Lit(None))  # no rows: NULL, not []
    separator = e.args.get("separator")
    if separator is None:
        sep = ","
    elif isinstance(separator, exp.Literal) and separator.is_string:
        sep = separator.this
    else:
        raise ConfigError(f"SQL: {sql_text(e)}: the separator must be a constant string")
    dtype = t.dtype(v)
    if not (dtype in (pl.String, pl.Boolean, pl.Date, pl.Null) or dtype.is_integer()):
        raise ConfigError(f"SQL: {sql_text(e)} of {dtype} values is not supported (DuckDB writes them otherwise than Polars); aggregate strings, integers or dates")
    if dtype != pl.String:
        operand = Func("struct", (v.cast(pl.String).alias("v"), *fields[1:]), ())
    return Agg("string_agg", operand, (sep, *order))


def _avg(t: ExprTranslator, x: Expr) -> Expr:
    return x.cast(pl.Float64).mean()  # DOUBLE, of a FLOAT too


def _any_value(t: ExprTranslator, e: exp.Expr) -> Expr:
    return t(e.this).min()


_SIMPLE: list[tuple[Any, Any]] = [
    (exp.Sum, lambda t, e: _sum_of(t, t(e.this))),
    (exp.CountIf, lambda t, e: _sum_of(t, t(e.this).cast(pl.Int64))),
    (exp.Avg, lambda t, e: _avg(t, t(e.this))),
    (exp.Min, lambda t, e: t(e.this).min()),
    (exp.Max, lambda t, e: t(e.this).max()),
    (exp.LogicalAnd, lambda t, e: t(e.this).min()),
    (exp.LogicalOr, lambda t, e: t(e.this).max()),
    (exp.AnyValue, _any_value),
    (exp.StddevPop, lambda t, e: _numeric(t, e).std(0)),
    ((exp.StddevSamp, exp.Stddev), lambda t, e: _numeric(t, e).std()),
    (exp.VariancePop, lambda t, e: _numeric(t, e).var(0)),
    (exp.Variance, lambda t, e: _numeric(t, e).var()),
    (exp.Median, lambda t, e: _as_float(t, e, _numeric(t, e).median())),
    (exp.PercentileCont, lambda t, e: _as_float(t, e, Agg("quantile", _numeric(t, e), (_fraction(e, e.expression), "linear")))),
    ((exp.PercentileDisc, exp.Quantile), _quantile_disc),
    (exp.ArgMax, lambda t, e: _by_key(t, e, True)),
    (exp.ArgMin, lambda t, e: _by_key(t, e, False)),
]
