"""SQL scalar functions (dates, strings, math, NULL-safe comparison) with DuckDB's semantics.

* ``dayofweek`` counts Sunday as 0 (Polars' weekday: Monday 1 .. Sunday 7, which is ``isodow``);
  date parts are BIGINT (Int64).
* ``date_trunc`` answers a TIMESTAMP, also for a DATE; ``strftime`` formats a date as a timestamp
  at midnight, with the common specifiers both DuckDB and Polars (chrono) read alike.
* ``log(x)`` is the base-10 logarithm (DuckDB), ``ln`` the natural one; ``power`` is DOUBLE;
  ``sign`` is TINYINT.
* ``left``/``right`` with a negative length drop characters from the other end.
* ``strpos``/``instr``/``position`` are 1-based (0: not found); ``lpad``/``rpad`` cut a longer
  string to the length, keeping its left end, and pad with one character.
* ``date_diff``/``datediff`` count the unit's boundaries between two dates (day, month, quarter,
  year), as DuckDB does; ``trunc`` rounds toward zero.
* ``regexp_matches`` searches anywhere in the string (RE2 and Rust's regex read common patterns
  alike); ``contains``, ``starts_with``, ``ends_with`` and ``replace`` take their text literally.

Constant arguments (patterns, formats, lengths, bases) must be literals: Croupier's functions take
them as constants.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Callable

import polars as pl
from sqlglot import exp

from croupier.errors import ConfigError
from croupier.expr import Expr, Func, lit, when
from croupier.sql.parse import sql_text

if TYPE_CHECKING:
    from croupier.sql.exprs import ExprTranslator

_TRUNC = {"YEAR": "1y", "QUARTER": "1q", "MONTH": "1mo", "WEEK": "1w", "DAY": "1d", "HOUR": "1h", "MINUTE": "1m", "SECOND": "1s"}
#: strftime specifiers DuckDB and chrono format alike
_STRFTIME = set("YmdHMSyjbBaAp%")


def constant(e: exp.Expr | None, kind: type, what: str, whole: exp.Expr) -> Any:
    """The value of a literal argument (``kind`` str, int or float), or a ConfigError naming it."""
    value = e.this if isinstance(e, exp.Paren) else e
    negative = isinstance(value, exp.Neg)
    value = value.this if negative else value
    if not isinstance(value, exp.Literal) or value.is_string != (kind is str):
        raise ConfigError(f"SQL: {sql_text(whole)}: {what} must be a constant {'string' if kind is str else 'number'}")
    out = kind(value.this) if kind is str else kind(float(value.this))
    return -out if negative else out


def _part(fn: str, modulo: int | None = None) -> Callable[[ExprTranslator, exp.Expr], Expr]:
    """A date part as BIGINT (``modulo``: dayofweek's Sunday 7 -> 0)."""

    def translate(t: ExprTranslator, e: exp.Expr) -> Expr:
        out = Func(fn, (t(e.this),), ())
        return (out % modulo if modulo else out).cast(pl.Int64)

    return translate


def date_trunc(t: ExprTranslator, e: exp.Expr) -> Expr:
    unit = e.args.get("unit")
    every = _TRUNC.get(unit.name.upper() if unit is not None else "")
    if every is None:
        raise ConfigError(f"SQL: {sql_text(e)}: date_trunc supports the units {sorted(_TRUNC)}")
    return Func("truncate", (t(e.this).cast(pl.Datetime("us")),), (every,))


def strftime(t: ExprTranslator, e: exp.Expr) -> Expr:
    fmt = constant(e.args.get("format"), str, "the format", e)
    unknown = sorted({c for c in re.findall(r"%(.)", fmt)} - _STRFTIME)
    if unknown:
        raise ConfigError(f"SQL: {sql_text(e)}: strftime specifiers {['%' + c for c in unknown]} are not supported; use %{', %'.join(sorted(_STRFTIME))}")
    return Func("strftime", (t(e.this).cast(pl.Datetime("us")),), (fmt,))


def regexp_matches(t: ExprTranslator, e: exp.Expr) -> Expr:
    if e.args.get("flag") is not None:
        raise ConfigError(f"SQL: {sql_text(e)}: regexp_matches options are not supported; write them in the pattern, e.g. '(?i)abc'")
    return Func("contains", (t(e.this),), (constant(e.expression, str, "the pattern", e), False))


def _literal_text(fn: str, *more: Any) -> Callable[[ExprTranslator, exp.Expr], Expr]:
    """A string function of a constant text argument (``contains(s, 'x')``...)."""
    return lambda t, e: Func(fn, (t(e.this),), (constant(e.expression, str, "the text", e), *more))


def replace(t: ExprTranslator, e: exp.Expr) -> Expr:
    old = constant(e.expression, str, "the text to replace", e)
    new = constant(e.args.get("replacement"), str, "the replacement", e)
    if old == "":  # DuckDB replaces nothing (Polars would insert the replacement between characters)
        return t(e.this)
    return Func("replace_all", (t(e.this),), (old, new, True))


def _ends(fn: str) -> Callable[[ExprTranslator, exp.Expr], Expr]:
    """``left(s, n)``/``right(s, n)``: Polars' str.head/str.tail (negative n as DuckDB)."""
    return lambda t, e: Func(fn, (t(e.this),), (int(constant(e.expression, int, "the length", e)),))


def log(t: ExprTranslator, e: exp.Expr) -> Expr:
    """``log(x)`` (base 10 in DuckDB) or ``log(b, x)``."""
    if e.expression is None:
        return Func("log", (t(e.this).cast(pl.Float64),), (10.0,))
    return Func("log", (t(e.expression).cast(pl.Float64),), (constant(e.this, float, "the base", e),))


def sign(x: Expr, dtype: pl.DataType) -> Expr:
    """``sign(x)`` as TINYINT; of a NaN, 0 (DuckDB's answer, where Polars' NaN has no integer)."""
    out = Func("sign", (x,), ())
    return (Func("fill_nan", (out,), (0.0,)) if dtype.is_float() else out).cast(pl.Int8)


def power(t: ExprTranslator, e: exp.Expr) -> Expr:
    return Func("pow", (t(e.this).cast(pl.Float64),), (constant(e.expression, float, "the exponent", e),))


#: date_diff's units: how many of them a date is from year 0 (the difference counts the unit's
#: boundaries between the two dates, as DuckDB does: 2019-12-31 to 2020-01-01 is one year).
_DIFF_UNITS = ("DAY", "MONTH", "QUARTER", "YEAR")


def date_diff(t: ExprTranslator, e: exp.Expr) -> Expr:
    """``date_diff(unit, start, end)`` (also ``datediff``) as BIGINT: the unit's boundaries crossed
    from ``start`` to ``end`` (days between the two days, not 24-hour periods)."""
    unit = (e.args["unit"].name if e.args.get("unit") is not None else "DAY").upper().rstrip("S")
    if unit not in _DIFF_UNITS:
        raise ConfigError(f"SQL: {sql_text(e)}: date_diff supports the units {list(_DIFF_UNITS)}")
    end, start = (_as_date(t, x) for x in (e.this, e.expression))
    if unit == "DAY":
        return Func("total_days", (end - start,), ()).cast(pl.Int64)
    per_year = {"MONTH": 12, "QUARTER": 4, "YEAR": 1}[unit]
    part = {"MONTH": "month", "QUARTER": "quarter", "YEAR": None}[unit]

    def count(d: Expr) -> Expr:
        years = Func("year", (d,), ()).cast(pl.Int64) * per_year
        return years + Func(part, (d,), ()).cast(pl.Int64) if part else years

    return count(end) - count(start)


def _as_date(t: ExprTranslator, e: exp.Expr) -> Expr:
    """A date_diff argument as a DATE (sqlglot reads DuckDB's arguments as timestamps)."""
    inner = e.this if isinstance(e, exp.Cast) and e.to.is_type("timestamp") else e
    return t(inner).cast(pl.Date)


def trunc(t: ExprTranslator, e: exp.Expr) -> Expr:
    """``trunc(x)``: toward zero; an integer stays as it is (DuckDB keeps the type)."""
    x = t(e.this)
    if not t.dtype(x).is_float():
        if t.dtype(x).is_integer():
            return x
        raise ConfigError(f"SQL: {sql_text(e)}: trunc of {t.dtype(x)} is not supported (of floating-point numbers and integers it is)")
    return when(x < 0).then(Func("ceil", (x,), ())).otherwise(Func("floor", (x,), ()))


def strpos(t: ExprTranslator, e: exp.Expr) -> Expr:
    """``strpos(s, sub)``, ``instr``, ``position(sub IN s)``: 1-based, 0 when absent."""
    return Func("strpos", (t(e.this), t(e.args["substr"])), ())


def pad(t: ExprTranslator, e: exp.Expr) -> Expr:
    """``lpad(s, n, c)``/``rpad``: to n characters, cut to n when longer (DuckDB keeps the left ones)."""
    width = constant(e.expression, int, "the length", e)
    fill = constant(e.args.get("fill_pattern"), str, "the fill", e) if e.args.get("fill_pattern") is not None else " "
    if len(fill) != 1:
        raise ConfigError(f"SQL: {sql_text(e)}: padding with {fill!r} is not supported (one character is)")
    return Func("pad", (t(e.this),), (max(0, width), fill, bool(e.args.get("is_left"))))


def null_safe_eq(t: ExprTranslator, e: exp.Binary) -> Expr:
    """``a IS NOT DISTINCT FROM b``: equal, with NULL equal to NULL (never NULL itself)."""
    a, b = t._coerced(t(e.left), t(e.right))
    return Func("eq_missing", (a, b), ())


def _double(fn: str) -> Callable[[ExprTranslator, exp.Expr], Expr]:
    """A function of one number, computed on doubles (DuckDB's DOUBLE result)."""
    return lambda t, e: Func(fn, (t(e.this).cast(pl.Float64),), ())


def _group_reference(m: re.Match[str]) -> str:
    """A DuckDB (RE2) replacement's escape in Polars' spelling: group ``\\1`` is ``${1}``, ``\\\\``
    a backslash, ``$`` itself ``$$``."""
    if m.group(0) == "$":
        return "$$"
    return "\\" if m.group(1) == "\\" else "${" + m.group(1) + "}"


def regexp_replace(t: ExprTranslator, e: exp.Expr) -> Expr:
    """``regexp_replace(s, pattern, replacement[, 'g'])``: the first match replaced, every one with
    the 'g' option; ``\\1`` in the replacement is the first group (Polars writes ``${1}``)."""
    pattern = constant(e.expression, str, "the pattern", e)
    value = constant(e.args.get("replacement"), str, "the replacement", e)
    options = constant(e.args["modifiers"], str, "the options", e) if e.args.get("modifiers") is not None else ""
    if set(options) - {"g"}:
        raise ConfigError(f"SQL: {sql_text(e)}: regexp_replace options {options!r} are not supported (none, or 'g', are)")
    value = re.sub(r"\\(\d|\\)|\$", _group_reference, value)
    return Func("regex_replace", (t(e.this),), (pattern, value, "g" in options))


def regexp_extract(t: ExprTranslator, e: exp.Expr) -> Expr:
    """``regexp_extract(s, pattern[, group])``: the group (0: the whole match), '' without a match."""
    pattern = constant(e.expression, str, "the pattern", e)
    group = int(constant(e.args["group"], int, "the group", e)) if e.args.get("group") is not None else 0
    return Func("regex_extract", (t(e.this),), (pattern, group))


def split_part(t: ExprTranslator, e: exp.Expr) -> Expr:
    sep = constant(e.args.get("delimiter"), str, "the separator", e)
    if sep == "":
        raise ConfigError(f"SQL: {sql_text(e)}: split_part on an empty separator is not supported")
    return Func("split_part", (t(e.this),), (sep, int(constant(e.args.get("part_index"), int, "the part", e))))


def concat_ws(t: ExprTranslator, e: exp.Expr) -> Expr:
    """``concat_ws(sep, a, b, ...)``: the non-null ones joined by ``sep`` ('' when none is)."""
    sep, *parts = e.expressions
    return Func("concat_str", tuple(t(p) for p in parts), (constant(sep, str, "the separator", e), True))


def make_date(t: ExprTranslator, e: exp.Expr) -> Expr:
    parts = [e.args.get(k) for k in ("year", "month", "day")]
    if any(p is None for p in parts):
        raise ConfigError(f"SQL: {sql_text(e)}: make_date needs a year, a month and a day")
    return Func("make_date", tuple(t(p) for p in parts), ())


HANDLERS: dict[type, Callable[[ExprTranslator, Any], Expr]] = {
    exp.DayOfWeek: _part("weekday", 7),
    exp.DayOfWeekIso: _part("weekday"),
    exp.DayOfYear: _part("ordinal_day"),
    exp.DayOfMonth: _part("day"),
    exp.Week: _part("week"),
    exp.WeekOfYear: _part("week"),
    exp.Quarter: _part("quarter"),
    exp.TimestampTrunc: date_trunc,
    exp.DateTrunc: date_trunc,
    exp.TimeToStr: strftime,
    exp.RegexpLike: regexp_matches,
    exp.Contains: _literal_text("contains", True),
    exp.StartsWith: _literal_text("starts_with"),
    exp.EndsWith: _literal_text("ends_with"),
    exp.Replace: replace,
    exp.Left: _ends("head"),
    exp.Right: _ends("tail"),
    exp.Sign: lambda t, e: sign(t(e.this), t.dtype(t(e.this))),
    exp.Ln: lambda t, e: Func("log", (t(e.this).cast(pl.Float64),), (math.e,)),
    exp.Log: log,
    exp.Exp: lambda t, e: Func("exp", (t(e.this).cast(pl.Float64),), ()),
    exp.Pow: power,
    exp.DateDiff: date_diff,
    exp.StrPosition: strpos,
    exp.Pad: pad,
    exp.Reverse: lambda t, e: Func("reverse", (t(e.this),), ()),
    exp.Trunc: trunc,
    exp.NullSafeEQ: null_safe_eq,
    exp.Sin: _double("sin"),
    exp.Cos: _double("cos"),
    exp.Tan: _double("tan"),
    exp.Cot: _double("cot"),
    exp.Asin: _double("arcsin"),
    exp.Acos: _double("arccos"),
    exp.Atan: _double("arctan"),
    exp.Atan2: lambda t, e: Func("arctan2", (t(e.this).cast(pl.Float64), t(e.expression).cast(pl.Float64)), ()),
    exp.Degrees: _double("degrees"),
    exp.Radians: _double("radians"),
    exp.Cbrt: _double("cbrt"),
    exp.Pi: lambda t, e: lit(math.pi),
    exp.IsNan: _double("is_nan"),
    exp.IsInf: _double("is_infinite"),
    exp.RegexpReplace: regexp_replace,
    exp.RegexpExtract: regexp_extract,
    exp.SplitPart: split_part,
    exp.Repeat: lambda t, e: Func("repeat", (t(e.this),), (max(0, int(constant(e.args.get("times"), int, "the count", e))),)),
    exp.ConcatWs: concat_ws,
    exp.ByteLength: lambda t, e: Func("len_bytes", (t(e.this),), ()).cast(pl.Int64),
    exp.BitLength: lambda t, e: (Func("len_bytes", (t(e.this),), ()).cast(pl.Int64) * 8),
    exp.LastDay: lambda t, e: Func("month_end", (t(e.this).cast(pl.Date),), ()),
    exp.Dayname: lambda t, e: Func("strftime", (t(e.this),), ("%A",)),
    exp.Monthname: lambda t, e: Func("strftime", (t(e.this),), ("%B",)),
    exp.DateFromParts: make_date,
    exp.TimeToUnix: lambda t, e: Func("epoch_seconds", (t(e.this),), ()),
    exp.NullSafeNEQ: lambda t, e: ~null_safe_eq(t, e),
}
