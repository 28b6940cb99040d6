"""SQL expressions (sqlglot nodes) to Croupier expressions, with DuckDB's semantics.

Where DuckDB and Polars differ, the translation follows DuckDB:

* ``sum`` of no non-null value is NULL (Polars: 0); sums of integers are Int64; ``count`` is
  Int64; ``count(DISTINCT x)`` ignores NULL; ``avg`` and ``stddev_samp`` are Float64.
* ``a // b`` and ``a % b`` truncate toward zero (Polars floors); ``round`` rounds half away from zero.
* An integer ``+``, ``-`` or ``*`` whose result leaves its type fails (Polars wraps around); in a
  comparison the exact value is compared.
* ``CAST(x AS DECIMAL(p, s))`` rounds half away from zero to s places (Croupier computes
  decimals as Float64); ``CAST(<float> AS INTEGER)`` rounds half to even (Polars truncates).
* ``DATE + INTERVAL`` is a TIMESTAMP; ``DATE + <integer>`` adds days; ``DATE - DATE`` is days.
* ``a || b`` is NULL when either is NULL; ``concat(a, b)`` skips NULLs.
* ``rank()`` and ``row_number()`` rank NULL order keys (last by default) instead of leaving them
  NULL; ``EXTRACT`` parts and ``length`` are Int64.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, Callable

import polars as pl
from sqlglot import exp

from croupier.errors import ConfigError
from croupier.expr import (
    Agg,
    Col,
    Expr,
    Func,
    IsIn,
    IsInFrame,
    Lit,
    ScalarFrame,
    coalesce,
    concat_str,
    max_horizontal,
    min_horizontal,
    when,
)
from croupier.sql.aggregates import aggregate
from croupier.sql.parse import KEEP, sql_text
from croupier.sql.scalars import HANDLERS as SCALARS
from croupier.sql.scalars import constant
from croupier.sql.windows import window
from croupier.sql.scope import Relation, dtype_of
from croupier.sql.types import decimal_scale, polars_dtype

if TYPE_CHECKING:
    from croupier.sql.query import QueryTranslator

_INTEGERS = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)
_COMPARE = {exp.EQ: "==", exp.NEQ: "!=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_ARITH = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}
_UNITS = {"DAY": "d", "DAYS": "d", "MONTH": "mo", "MONTHS": "mo", "YEAR": "y", "YEARS": "y", "WEEK": "w", "WEEKS": "w"}
_PARTS = {"YEAR": "year", "MONTH": "month", "DAY": "day", "QUARTER": "quarter", "DOW": "weekday", "ISODOW": "weekday", "DOY": "ordinal_day", "WEEK": "week"}


#: Signed integer types, and the type twice as wide that their sums and products are checked in.
_SIGNED = (pl.Int8, pl.Int16, pl.Int32, pl.Int64)
_WIDER = {pl.Int8: pl.Int16, pl.Int16: pl.Int32, pl.Int32: pl.Int64, pl.Int64: pl.Int128}


def is_integer(dtype: pl.DataType) -> bool:
    return isinstance(dtype, _INTEGERS)


class ExprTranslator:
    """Translates expressions read over ``rel``; ``replace`` maps SQL text of subtrees already
    computed (grouping keys, aggregations) to expressions over ``rel``."""

    def __init__(self, query: QueryTranslator, rel: Relation, replace: dict[str, Expr] | None = None) -> None:
        self.query = query
        self.rel = rel
        self.replace = replace or {}
        self._compared = 0  # > 0 while translating a comparison's operands (see _checked)

    def dtype(self, e: Expr) -> pl.DataType:
        return dtype_of(e, self.rel.node.schema)

    def __call__(self, e: exp.Expr) -> Expr:
        if self.replace:
            hit = self.replace.get(sql_text(e))
            if hit is not None:
                return hit
        if isinstance(e, exp.Anonymous) and e.name.upper() == KEEP and isinstance(e.expressions[0], exp.In):
            return self(e.expressions[0])  # an IN (subquery) kept from sqlglot's unnesting (see parse.keep_selected_in)
        handler = _HANDLERS.get(type(e))
        if handler is not None:
            out = handler(self, e)
            return ~out if e.args.get("negate") else out
        if isinstance(e, exp.AggFunc):
            raise ConfigError(f"SQL: aggregate {sql_text(e)} is not allowed here")
        raise ConfigError(f"SQL: {type(e).__name__} ({sql_text(e)}) is not supported")

    # --- leaves ---------------------------------------------------------------------------------
    def column(self, e: exp.Column) -> Expr:
        if isinstance(e.this, exp.Star):
            raise ConfigError("SQL: * is only allowed in the select list and count(*)")
        name = self.rel.resolve(e.table, e.name)
        if name is None:
            raise ConfigError(f"SQL: unknown column {sql_text(e)}")
        return Col(name)

    def literal(self, e: exp.Literal) -> Expr:
        if e.is_string:
            return Lit(e.this)
        text = e.this
        if any(c in text for c in ".eE"):
            return Lit(float(text))
        value = int(text)
        return Lit(value) if -(2**31) <= value < 2**31 else Lit(value, pl.Int64())

    # --- operators --------------------------------------------------------------------------------
    def compare(self, e: exp.Binary) -> Expr:
        self._compared += 1
        try:
            left, right = self._coerced(self(e.left), self(e.right))
        finally:
            self._compared -= 1
        return left._bin(_COMPARE[type(e)], right)

    def _coerced(self, left: Expr, right: Expr) -> tuple[Expr, Expr]:
        """Date/string literal comparisons as DuckDB does them: the string as a date."""
        for a, b in ((left, right), (right, left)):
            if isinstance(b, Lit) and isinstance(b.value, str) and self.dtype(a) in (pl.Date, pl.Datetime):
                parsed = Lit(dt.date.fromisoformat(b.value[:10]))
                return (a, parsed) if a is left else (parsed, a)
        return left, right

    def arith(self, e: exp.Binary) -> Expr:
        op = _ARITH[type(e)]
        interval = e.right if isinstance(e.right, exp.Interval) else e.left if isinstance(e.left, exp.Interval) and op == "+" else None
        if interval is not None:
            date = self(e.left if interval is e.right else e.right)
            return self._add_interval(date, interval, -1 if op == "-" else 1)
        left, right = self(e.left), self(e.right)
        if op in ("+", "-"):
            dated = self._date_arith(op, left, right)
            if dated is not None:
                return dated
        if op in ("+", "-", "*"):
            return self._checked(op, left, right)
        return left._bin(op, right)

    def _checked(self, op: str, left: Expr, right: Expr) -> Expr:
        """``left op right``; of signed integers, computed twice as wide and cast back to the
        result's type, which fails where the result does not fit: DuckDB raises an overflow error
        where Polars wraps around (an INTEGER column times 1000000 turned negative and kept the
        wrong rows of a WHERE). Inside a comparison the wide value is compared as it is (DuckDB
        moves the constants of ``a * 1000000 > 0`` to the other side and answers)."""
        out = left._bin(op, right)
        if not (isinstance(self.dtype(left), _SIGNED) and isinstance(self.dtype(right), _SIGNED)):
            return out  # (floats, most of SQL's arithmetic, infer no result type here)
        dtype = self.dtype(out)
        wide = left.cast(_WIDER[type(dtype)])._bin(op, right.cast(_WIDER[type(dtype)]))
        return wide if self._compared else wide.cast(dtype)

    def _checked_unary(self, fn: Callable[[Expr], Expr], x: Expr) -> Expr:
        """``fn(x)`` (a negation, an absolute value) of a signed integer computed twice as wide and
        cast back, which fails on the type's least value as DuckDB's overflow error does, inside
        a comparison too (Polars answers -(-128) = -128 for a TINYINT)."""
        dtype = self.dtype(x)
        if not isinstance(dtype, _SIGNED):
            return fn(x)
        return fn(x.cast(_WIDER[type(dtype)])).cast(dtype)

    def _date_arith(self, op: str, left: Expr, right: Expr) -> Expr | None:
        ltype, rtype = self.dtype(left), self.dtype(right)
        if ltype == pl.Date and is_integer(rtype):
            days = right.cast(pl.Int64) * Lit(dt.timedelta(days=1))
            return left + days if op == "+" else left - days
        if op == "-" and ltype in (pl.Date, pl.Datetime) and rtype in (pl.Date, pl.Datetime):
            return Func("total_days", (left - right,), ()).cast(pl.Int64)
        return None

    def _add_interval(self, date: Expr, interval: exp.Interval, sign: int) -> Expr:
        amount = interval.this.this if isinstance(interval.this, exp.Paren) else interval.this
        unit = _UNITS.get(interval.unit.name.upper() if interval.unit else "DAY")
        if unit is None or not isinstance(amount, exp.Literal):
            raise ConfigError(f"SQL: interval {sql_text(interval)} is not supported (use a constant number of days, weeks, months or years)")
        n = int(float(amount.this)) * sign
        stamp = date.cast(pl.Datetime("us"))
        if unit == "d":
            return stamp + Lit(dt.timedelta(days=n))
        if unit == "w":
            return stamp + Lit(dt.timedelta(weeks=n))
        return Func("offset_by", (stamp,), (f"{n}{unit}",))

    def int_div(self, e: exp.IntDiv) -> Expr:
        a, b = self(e.left), self(e.right)
        magnitude = a.abs() // b.abs()
        return when((a < 0) ^ (b < 0)).then(-magnitude).otherwise(magnitude)

    def mod(self, e: exp.Mod) -> Expr:
        a, b = self(e.left), self(e.right)
        magnitude = a.abs() % b.abs()
        return when(a < 0).then(-magnitude).otherwise(magnitude)

    def between(self, e: exp.Between) -> Expr:
        x = self(e.this)
        low, high = self._coerced(x, self(e.args["low"]))[1], self._coerced(x, self(e.args["high"]))[1]
        return (x >= low) & (x <= high)

    def is_(self, e: exp.Is) -> Expr:
        if isinstance(e.expression, exp.Null):
            return self(e.this).is_null()
        raise ConfigError(f"SQL: {sql_text(e)} is not supported")

    def in_(self, e: exp.In) -> Expr:
        x = self(e.this)
        query = e.args.get("query")
        if query is not None:
            sub = query.this if isinstance(query, exp.Subquery) else query
            return IsInFrame(x, self.query.scalar_source(sub, self.rel), sql=True)
        values = [self(v) for v in e.expressions]
        if all(isinstance(v, Lit) for v in values) and all(v.value is not None for v in values):  # type: ignore[attr-defined]
            return IsIn(x, tuple(self._coerced(x, v)[1].value for v in values))  # type: ignore[attr-defined]
        out: Expr | None = None
        for v in values:
            test = x == v
            out = test if out is None else out | test
        assert out is not None
        return out

    def like(self, e: exp.Binary, case_insensitive: bool = False) -> Expr:
        pattern = e.expression
        if not isinstance(pattern, exp.Literal) or not pattern.is_string:
            raise ConfigError(f"SQL: LIKE needs a constant pattern: {sql_text(e)}")
        return self(e.this).str.like(pattern.this, case_insensitive)

    # --- conditionals -----------------------------------------------------------------------------
    def case(self, e: exp.Case) -> Expr:
        operand = self(e.this) if e.this is not None else None
        cases = []
        for branch in e.args.get("ifs") or []:
            cond = self(branch.this)
            if operand is not None:
                cond = operand == cond
            cases.append((cond, self(branch.args["true"])))
        default = e.args.get("default")
        out: Any = when(cases[0][0]).then(cases[0][1])
        for cond, value in cases[1:]:
            out = out.when(cond).then(value)
        return out.otherwise(self(default) if default is not None else Lit(None))  # type: ignore[no-any-return]

    def if_(self, e: exp.If) -> Expr:
        other = e.args.get("false")
        return when(self(e.this)).then(self(e.args["true"])).otherwise(self(other) if other is not None else Lit(None))

    def nullif(self, e: exp.Nullif) -> Expr:
        a, b = self(e.this), self(e.expression)
        return when(a == b).then(Lit(None)).otherwise(a)

    # --- casts and functions -------------------------------------------------------------------------
    def cast(self, e: exp.Cast, strict: bool = True) -> Expr:
        target = polars_dtype(e.to)
        inner = e.this
        if isinstance(inner, exp.Literal) and inner.is_string and target in (pl.Date, pl.Datetime):
            value = dt.date.fromisoformat(inner.this) if target == pl.Date else dt.datetime.fromisoformat(inner.this)
            return Lit(value, target)
        x = self(inner)
        source = self.dtype(x)
        scale = decimal_scale(e.to)
        if scale is not None:
            return x.cast(pl.Float64, strict).round(scale, "half_away_from_zero")
        if is_integer(target) and source.is_float():  # DuckDB rounds half to even here
            return x.round(0).cast(target, strict)
        return x.cast(target, strict)

    def round_(self, e: exp.Round) -> Expr:
        """ROUND(x[, n]) half away from zero; a negative n rounds to tens, hundreds... (integers
        too, keeping their type)."""
        decimals = e.args.get("decimals")
        given = 0.0 if decimals is None else constant(decimals, float, "ROUND's number of places", e)
        if not given.is_integer():  # (DuckDB has no ROUND of fractional places)
            raise ConfigError(f"SQL: {sql_text(e)}: ROUND's number of places must be a whole number")
        places = int(given)
        x = self(e.this)
        dtype = self.dtype(x)
        if places >= 0:
            return x if is_integer(dtype) else x.round(places, "half_away_from_zero")
        factor = 10 ** -places
        if is_integer(dtype):
            magnitude = (Func("abs", (x.cast(pl.Int64),), ()) + factor // 2) // factor * factor
            return when(x < 0).then(-magnitude).otherwise(magnitude).cast(dtype)
        return (x / factor).round(0, "half_away_from_zero") * factor

    def substring(self, e: exp.Substring) -> Expr:
        start, length = e.args.get("start"), e.args.get("length")
        if not isinstance(start, exp.Literal) or (length is not None and not isinstance(length, exp.Literal)):
            raise ConfigError(f"SQL: SUBSTRING needs constant positions: {sql_text(e)}")
        first = int(start.this)
        count = int(length.this) if length is not None else None
        if first < 1:  # DuckDB counts the characters before position 1 against the length
            count = None if count is None else max(0, count + first - 1)
            first = 1
        return self(e.this).str.slice(first - 1, count)

    def extract(self, e: exp.Extract) -> Expr:
        part = e.this.name.upper()
        if part not in _PARTS:
            raise ConfigError(f"SQL: EXTRACT({part}) is not supported; use one of {sorted(_PARTS)}")
        value = Func(_PARTS[part], (self(e.expression),), ())
        return (value % 7 if part == "DOW" else value).cast(pl.Int64)  # DOW: Sunday 0 (Polars: 7)

    def concat(self, e: exp.Expr) -> Expr:
        parts = [self(x) for x in (e.expressions if isinstance(e, exp.Concat) else (e.left, e.right))]
        parts = [p if self.dtype(p) == pl.String else p.cast(pl.String) for p in parts]
        skip_nulls = isinstance(e, exp.Concat) and bool(e.args.get("coalesce"))
        return concat_str(parts, "", ignore_nulls=skip_nulls)

    def trim(self, e: exp.Trim) -> Expr:
        chars = e.expression.this if isinstance(e.expression, exp.Literal) else None
        where = (e.args.get("position") or "BOTH").upper()
        fn = {"BOTH": "strip_chars", "LEADING": "strip_chars_start", "TRAILING": "strip_chars_end"}[where]
        return Func(fn, (self(e.this),), (chars,))

    def unary(self, fn: Callable[[Expr], Expr]) -> Callable[[ExprTranslator, exp.Expr], Expr]:
        return lambda t, e: fn(t(e.this))

    # --- aggregations and windows ---------------------------------------------------------------------
    def aggregate(self, e: exp.Expr) -> Expr:
        """An SQL aggregate over the rows of ``rel`` (DuckDB semantics, :mod:`croupier.sql.aggregates`)."""
        return aggregate(self, e)

    def ignore_nulls(self, e: exp.IgnoreNulls) -> Expr:
        """``any_value(x) IGNORE NULLS`` (how sqlglot reads ``any_value``): any_value skips NULLs anyway."""
        if isinstance(e.this, exp.AnyValue):
            return self(e.this)
        raise ConfigError(f"SQL: IGNORE NULLS is not supported here: {sql_text(e)}")

    def window(self, e: exp.Window) -> Expr:
        """A window function (DuckDB semantics, :mod:`croupier.sql.windows`)."""
        return window(self, e)

    # --- subqueries -----------------------------------------------------------------------------------
    def subquery(self, e: exp.Subquery) -> Expr:
        return ScalarFrame(self.query.scalar_source(e.this, self.rel))

    def exists(self, e: exp.Exists) -> Expr:
        sub = e.this.this if isinstance(e.this, exp.Subquery) else e.this
        node = self.query.scalar_source(sub, self.rel, keep_columns=True)
        from croupier.plan.logical import Aggregate

        return ScalarFrame(Aggregate(node, (), (Agg("len", None).alias("n"),))) > 0


def _func(name: str) -> Callable[[ExprTranslator, exp.Expr], Expr]:
    return lambda t, e: Func(name, (t(e.this),), ())


_HANDLERS: dict[type, Callable[[ExprTranslator, Any], Expr]] = {
    exp.Column: ExprTranslator.column,
    exp.Literal: ExprTranslator.literal,
    exp.Null: lambda t, e: Lit(None),
    exp.Boolean: lambda t, e: Lit(bool(e.this)),
    exp.Paren: lambda t, e: t(e.this),
    exp.Alias: lambda t, e: t(e.this),
    exp.Neg: lambda t, e: -t(e.this) if isinstance(e.this, exp.Literal) else t._checked_unary(lambda x: Lit(0) - x, t(e.this)),  # (Polars negates no Int128)
    exp.Not: lambda t, e: ~t(e.this),
    exp.And: lambda t, e: t(e.left) & t(e.right),
    exp.Or: lambda t, e: t(e.left) | t(e.right),
    **{k: ExprTranslator.compare for k in _COMPARE},
    **{k: ExprTranslator.arith for k in _ARITH},
    exp.IntDiv: ExprTranslator.int_div,
    exp.Mod: ExprTranslator.mod,
    exp.Between: ExprTranslator.between,
    exp.Is: ExprTranslator.is_,
    exp.In: ExprTranslator.in_,
    exp.Like: ExprTranslator.like,
    exp.ILike: lambda t, e: t.like(e, True),
    exp.Case: ExprTranslator.case,
    exp.If: ExprTranslator.if_,
    exp.Nullif: ExprTranslator.nullif,
    exp.Coalesce: lambda t, e: coalesce(t(e.this), *[t(x) for x in e.expressions]),
    exp.Greatest: lambda t, e: max_horizontal(t(e.this), *[t(x) for x in e.expressions]),
    exp.Least: lambda t, e: min_horizontal(t(e.this), *[t(x) for x in e.expressions]),
    exp.Cast: ExprTranslator.cast,
    exp.TryCast: lambda t, e: t.cast(e, strict=False),
    exp.Round: ExprTranslator.round_,
    exp.Abs: lambda t, e: t._checked_unary(lambda x: Func("abs", (x,), ()), t(e.this)),
    exp.Floor: _func("floor"),
    exp.Ceil: _func("ceil"),
    exp.Sqrt: _func("sqrt"),
    exp.Upper: _func("to_uppercase"),
    exp.Lower: _func("to_lowercase"),
    exp.Length: lambda t, e: Func("len_chars", (t(e.this),), ()).cast(pl.Int64),
    exp.Substring: ExprTranslator.substring,
    exp.Extract: ExprTranslator.extract,
    exp.Year: lambda t, e: Func("year", (t(e.this),), ()).cast(pl.Int64),
    exp.Month: lambda t, e: Func("month", (t(e.this),), ()).cast(pl.Int64),
    exp.Day: lambda t, e: Func("day", (t(e.this),), ()).cast(pl.Int64),
    exp.Concat: ExprTranslator.concat,
    exp.DPipe: ExprTranslator.concat,
    exp.Trim: ExprTranslator.trim,
    exp.Window: ExprTranslator.window,
    exp.IgnoreNulls: ExprTranslator.ignore_nulls,
    exp.Subquery: ExprTranslator.subquery,
    exp.Exists: ExprTranslator.exists,
    **SCALARS,
}
