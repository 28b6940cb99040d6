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
* ``&``, ``|``, ``xor``, ``~``, ``<<``, ``>>`` compute in DuckDB's type for their integers (an
  integer constant takes the other operand's type where it fits: ``b & 3`` of a TINYINT is
  TINYINT); ``<<`` fails where DuckDB raises (a negative operand, a result past the type),
  ``>>`` is arithmetic and 0 past the type's width. ``gcd``/``lcm`` are BIGINT, ``bit_count``
  TINYINT (a negative number's two's complement bits), ``even`` DOUBLE.
* ``string_split`` (``str_split``, ``string_to_array``, ``split``) and ``list_value`` (``[a, b]``)
  answer lists; ``list_value`` of mixed types only where DuckDB's common type is clear (numbers,
  dates with timestamps).
* ``ascii`` is the first character's code point; ``translate`` and ``md5`` as DuckDB's;
  ``yearweek`` is the ISO year and week. ``format`` takes ``{}``/``{N}`` fields and ``printf``
  ``%s``/``%d`` of strings, integers and booleans, which Polars writes as DuckDB does; format
  specifications, printf's flags and widths, and floats (fmt writes them its own way) are refused.

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
from croupier.expr import Expr, Func, Lit, concat_str, lit, when
from croupier.expr.functions import INTEGER_BITS, translation
from croupier.sql.parse import sql_text
from croupier.sql.scope import supertype

if TYPE_CHECKING:
    from croupier.sql.exprs import ExprTranslator

_TRUNC = {"YEAR": "1y", "QUARTER": "1q", "MONTH": "1mo", "WEEK": "1w", "DAY": "1d", "HOUR": "1h", "MINUTE": "1m", "SECOND": "1s"}
#: strftime specifiers DuckDB and chrono format alike
_STRFTIME = set("YmdHMSyjbBaAp%")


def _signed(e: exp.Expr | None) -> tuple[exp.Expr | None, bool]:
    """A constant as written, ``(3)`` and ``-3`` too: the expression behind the parentheses and
    the minus, and whether a minus stood before it."""
    value = e.this if isinstance(e, exp.Paren) else e
    negative = isinstance(value, exp.Neg)
    return (value.this if negative else value), negative  # type: ignore[union-attr]


def constant(e: exp.Expr | None, kind: type, what: str, whole: exp.Expr) -> Any:
    """The value of a literal argument (``kind`` str, int or float), or a ConfigError naming it."""
    value, negative = _signed(e)
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


# --- DuckDB's functions of strings, numbers and dates that Polars lacks ------------------------------


def _typed(t: ExprTranslator, e: exp.Expr, accepts: Callable[[pl.DataType], bool], what: str, whole: exp.Expr) -> tuple[Expr, pl.DataType]:
    """An argument translated, and its dtype; a ConfigError where DuckDB has no such function of
    it (``what`` says which it has). NULL passes: it is of every type."""
    x = t(e)
    dtype = t.dtype(x)
    if dtype != pl.Null and not accepts(dtype):
        raise ConfigError(f"SQL: {sql_text(whole)}: {what}, not of {dtype}")
    return x, dtype


def _text(t: ExprTranslator, e: exp.Expr, whole: exp.Expr) -> Expr:
    """A string argument (NULL as a null string)."""
    x, dtype = _typed(t, e, lambda d: d == pl.String, "takes strings", whole)
    return x.cast(pl.String) if dtype == pl.Null else x


def _arguments(e: exp.Anonymous, n: int) -> list[exp.Expr]:
    """The ``n`` arguments of a function sqlglot does not know, or a ConfigError."""
    if len(e.expressions) != n:
        raise ConfigError(f"SQL: {sql_text(e)}: {e.name.lower()} takes {n} argument{'s' if n > 1 else ''}")
    return list(e.expressions)


def _null_or_text(e: exp.Expr | None, what: str, whole: exp.Expr) -> str | None:
    """A constant string argument, None for NULL."""
    return None if isinstance(e, exp.Null) else constant(e, str, what, whole)


def translate(t: ExprTranslator, e: exp.Translate) -> Expr:
    """``translate(s, from, to)``: each character of ``from`` replaced by the one at its place in
    ``to`` (removed past its end); NULL where any argument is."""
    s = _text(t, e.this, e)
    source, target = (_null_or_text(e.args.get(k), f"the {k.rstrip('_')} characters", e) for k in ("from_", "to"))
    if source is None or target is None:
        return Lit(None, pl.String())
    return Func("translate", (s,), (source, target)) if translation(source, target) else s


def string_split(t: ExprTranslator, e: exp.Split) -> Expr:
    """``string_split(s, sep)`` (``str_split``, ``string_to_array``, ``split``): VARCHAR[]."""
    if e.args.get("limit") is not None:
        raise ConfigError(f"SQL: {sql_text(e)}: string_split takes a string and a separator")
    return Func("string_split", (_text(t, e.this, e),), (_null_or_text(e.expression, "the separator", e),))


def even(t: ExprTranslator, e: exp.Anonymous) -> Expr:
    """``even(x)``: DOUBLE, away from zero to the next even integer."""
    (arg,) = _arguments(e, 1)
    x, _ = _typed(t, arg, lambda d: d.is_numeric(), "takes numbers", e)
    return Func("even", (x.cast(pl.Float64),), ())


def _divisors(fn: str) -> Callable[[ExprTranslator, exp.Anonymous], Expr]:
    """``gcd(a, b)`` / ``lcm(a, b)`` (also ``greatest_common_divisor`` and
    ``least_common_multiple``) of integers: BIGINT (DuckDB's HUGEINT of UBIGINT is refused)."""

    def translate_(t: ExprTranslator, e: exp.Anonymous) -> Expr:
        a, b = (_typed(t, x, lambda d: d.is_integer() and d != pl.UInt64, "takes integers (not UBIGINT)", e)[0] for x in _arguments(e, 2))
        return Func(fn, (a.cast(pl.Int64), b.cast(pl.Int64)), ())

    return translate_


def bit_count(t: ExprTranslator, e: exp.Anonymous) -> Expr:
    """``bit_count(x)``: the set bits of an integer in its type's width (-1 of an INTEGER: 32), TINYINT."""
    (arg,) = _arguments(e, 1)
    (x,), _ = _common_integer(t, [arg], e)
    return Func("bit_count", (x,), ()).cast(pl.Int8)


def yearweek(t: ExprTranslator, e: exp.Anonymous) -> Expr:
    """``yearweek(d)``: the ISO year times 100 plus the ISO week, BIGINT (of a bare NULL
    refused, as DuckDB cannot tell which yearweek it is)."""
    (arg,) = _arguments(e, 1)
    x, dtype = _typed(t, arg, lambda d: d in (pl.Date, pl.Datetime), "takes dates or timestamps", e)
    if dtype == pl.Null:
        raise ConfigError(f"SQL: {sql_text(e)}: yearweek of NULL: cast it to a DATE")
    return Func("yearweek", (x,), ())


def _integer_literal(e: exp.Expr) -> int | None:
    """The value of an integer constant as the query wrote it (``3``, ``-3``, ``(3)``), else
    None. One sqlglot folded (``(1 + 2)``: a literal without the parser's position) is not one
    to DuckDB: it is an INTEGER expression."""
    value, negative = _signed(e)
    if isinstance(value, exp.Literal) and "start" in value.meta and not value.is_string and value.this.lstrip("-").isdigit():
        return -int(value.this) if negative else int(value.this)
    return None


def _fits(value: int, dtype: pl.DataType) -> bool:
    """Whether the integer ``value`` is in ``dtype``'s range."""
    bits = INTEGER_BITS[type(dtype)]
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if dtype.is_signed_integer() else (0, 2**bits - 1)
    return low <= value <= high


def _common_integer(t: ExprTranslator, args: list[exp.Expr], whole: exp.Expr) -> tuple[list[Expr], pl.DataType]:
    """Integer arguments translated and cast to the type DuckDB computes them in: the widest of
    their types, where an integer constant takes that type when it fits in it (``b & 3`` of a
    TINYINT b is TINYINT, ``b & 300`` INTEGER); constants alone are INTEGER (BIGINT past it),
    NULL alone BIGINT. Unsigned types mixed with signed ones are refused (DuckDB's choice there
    is its own)."""
    exprs = [t(a) for a in args]
    literals = [_integer_literal(a) for a in args]
    typed = [t.dtype(x) for x, v in zip(exprs, literals) if v is None]
    typed = [d for d in typed if d != pl.Null]
    if any(not d.is_integer() for d in typed):
        raise ConfigError(f"SQL: {sql_text(whole)}: takes integers, not {[str(d) for d in typed if not d.is_integer()]}")
    if len({d.is_signed_integer() for d in typed}) > 1:
        raise ConfigError(f"SQL: {sql_text(whole)}: signed and unsigned integers together are not supported")
    common: pl.DataType | None = None
    for d in typed:
        common = d if common is None else supertype(common, d)
    for v in literals:
        if v is not None and (common is None or not _fits(v, common)):
            if common is not None and common.is_unsigned_integer():
                raise ConfigError(f"SQL: {sql_text(whole)}: {v} with an unsigned integer is not supported")
            natural = pl.Int32() if _fits(v, pl.Int32()) else pl.Int64()
            common = natural if common is None else supertype(common, natural)
    common = common or pl.Int64()
    return [x.cast(common) for x in exprs], common


def _bitwise(fn: str) -> Callable[[ExprTranslator, exp.Binary], Expr]:
    """``a & b``, ``a | b``, ``xor(a, b)``: bit by bit, in the operands' common integer type."""

    def translate_(t: ExprTranslator, e: exp.Binary) -> Expr:
        (a, b), _ = _common_integer(t, [e.this, e.expression], e)
        return Func(fn, (a, b), ())

    return translate_


def bitwise_not(t: ExprTranslator, e: exp.BitwiseNot) -> Expr:
    """``~x``: every bit flipped, in x's integer type."""
    (x,), _ = _common_integer(t, [e.this], e)
    return Func("bitwise_not", (x,), ())


def _shift(fn: str) -> Callable[[ExprTranslator, exp.Binary], Expr]:
    """``a << n`` / ``a >> n`` in the operands' common integer type (see ``shift_left``)."""

    def translate_(t: ExprTranslator, e: exp.Binary) -> Expr:
        (a, n), dtype = _common_integer(t, [e.this, e.expression], e)
        return Func(fn, (a, n), (dtype,))

    return translate_


def _decimal_literal(e: exp.Expr) -> bool:
    """A number constant written with a point and no exponent: DuckDB's DECIMAL, which takes a
    FLOAT's type beside one (``1e3`` is a DOUBLE)."""
    value = e.this if isinstance(e, (exp.Paren, exp.Neg)) else e
    return isinstance(value, exp.Literal) and not value.is_string and "." in value.this and "e" not in value.this.lower()


def list_value(t: ExprTranslator, e: exp.Array) -> Expr:
    """``list_value(a, b, ...)`` (``[a, b, ...]``): one list per row, NULLs kept, of DuckDB's
    common type: integers as the bitwise operators type them; FLOAT where the only floats are
    FLOAT (a constant such as 2.5 takes it), else DOUBLE (Croupier's DECIMAL too); DATE with
    TIMESTAMP is TIMESTAMP; other arguments must all be of one type."""
    args = list(e.expressions)
    if not args:
        raise ConfigError(f"SQL: {sql_text(e)}: list_value() of nothing is not supported")
    exprs = [t(a) for a in args]
    dtypes = [t.dtype(x) for x in exprs]
    known = {d for d in dtypes if d != pl.Null}
    if not known:
        raise ConfigError(f"SQL: {sql_text(e)}: a list of NULLs only is not supported")
    if all(d.is_integer() for d in known):
        exprs, dtype = _common_integer(t, args, e)
        return Func("concat_list", tuple(exprs), ())
    if all(d.is_signed_integer() or d.is_float() for d in known):
        floats = {d for d, a in zip(dtypes, args) if d.is_float() and not _decimal_literal(a)}
        dtype = pl.Float32() if floats == {pl.Float32()} else pl.Float64()
    elif known <= {pl.Date(), pl.Datetime("us")}:
        dtype = pl.Datetime("us") if len(known) > 1 else pl.Date()
    elif len(known) == 1:
        dtype = known.pop()
    else:
        raise ConfigError(f"SQL: {sql_text(e)}: a list of {sorted(str(d) for d in known)} together is not supported")
    return Func("concat_list", tuple(x.cast(dtype) for x in exprs), ())


#: format's tokens: an escaped brace, a field ({} or {N}), or a brace of anything else
_FORMAT_TOKEN = re.compile(r"\{\{|\}\}|\{(\d*)\}|[{}]")
#: printf's tokens: % and the character after it
_PRINTF_TOKEN = re.compile(r"%(.?)", re.DOTALL)
#: The types each kind of field writes as Polars casts them to strings, which is how DuckDB
#: writes them: format's ``{}`` strings, integers and booleans ('true'), printf's ``%s`` strings
#: and booleans, its ``%d`` integers and booleans (as 1 and 0; DuckDB's fmt refuses a string
#: there, an integer for %s).
_WRITES: dict[str, Callable[[pl.DataType], bool]] = {
    "{}": lambda d: d in (pl.String, pl.Boolean) or d.is_integer(),
    "s": lambda d: d in (pl.String, pl.Boolean),
    "d": lambda d: d == pl.Boolean or d.is_integer(),
}
#: A template: its text, and its fields as (argument index, kind of field).
Fields = list[str | tuple[int, str]]


def _format_fields(fmt: str, whole: exp.Expr) -> Fields:
    """``format``'s template: ``{}`` the next argument, ``{N}`` the N-th, ``{{``/``}}`` a brace.
    Format specifications (``{:5}``) are refused."""
    out: Fields = []
    automatic, manual, last = 0, False, 0
    for m in _FORMAT_TOKEN.finditer(fmt):
        out.append(fmt[last : m.start()])
        last = m.end()
        token, digits = m.group(0), m.group(1)
        if token in ("{{", "}}"):
            out.append(token[0])
        elif digits is None or (digits and digits != str(int(digits))) or (manual if not digits else automatic):
            raise ConfigError(f"SQL: {sql_text(whole)}: {token!r} is not supported in format: {{}} or {{N}} fields (not both) and {{{{ }}}} escapes are, specifications not")
        elif digits:
            manual = True
            out.append((int(digits), "{}"))
        else:
            out.append((automatic, "{}"))
            automatic += 1
    return out + [fmt[last:]]


def _printf_fields(fmt: str, whole: exp.Expr) -> Fields:
    """``printf``'s template: ``%s``, ``%d``/``%i`` the next argument, ``%%`` a percent sign.
    Flags, widths and other conversions are refused."""
    out: Fields = []
    count, last = 0, 0
    for m in _PRINTF_TOKEN.finditer(fmt):
        out.append(fmt[last : m.start()])
        last = m.end()
        conversion = m.group(1)
        if conversion == "%":
            out.append("%")
        elif conversion in ("s", "d", "i"):
            out.append((count, "s" if conversion == "s" else "d"))
            count += 1
        else:
            raise ConfigError(f"SQL: {sql_text(whole)}: {m.group(0)!r} is not supported in printf: %s, %d, %i and %% are, without flags or widths")
    return out + [fmt[last:]]


def _formatted(t: ExprTranslator, e: exp.Expr, fields: Fields, args: list[exp.Expr]) -> Expr:
    """The template's text with the arguments written in; NULL where any argument is (one the
    template does not use too)."""
    values = [t(a) for a in args]
    pieces: list[Expr] = []
    for field in fields:
        if isinstance(field, str):
            pieces += [Lit(field)] if field else []
            continue
        index, kind = field
        if index >= len(values):
            raise ConfigError(f"SQL: {sql_text(e)}: argument {index + 1} is missing")
        dtype = t.dtype(values[index])
        if dtype != pl.Null and not _WRITES[kind](dtype):
            raise ConfigError(f"SQL: {sql_text(e)}: writing {dtype} this way is not supported (DuckDB writes it its own way, or refuses)")
        pieces.append((values[index].cast(pl.Int8) if kind == "d" and dtype == pl.Boolean else values[index]).cast(pl.String))
    text = Lit("".join(p.value for p in pieces)) if all(isinstance(p, Lit) for p in pieces) else concat_str(pieces, "")  # type: ignore[attr-defined]
    used = {f[0] for f in fields if isinstance(f, tuple)}
    unused = [v.is_not_null() for i, v in enumerate(values) if i not in used]
    if not unused:
        return text
    present = unused[0]
    for other in unused[1:]:
        present = present & other
    return when(present).then(text).otherwise(Lit(None, pl.String()))


def format_(t: ExprTranslator, e: exp.Format) -> Expr:
    """``format(template, args...)`` with ``{}``/``{N}`` fields of strings, integers, booleans."""
    return _formatted(t, e, _format_fields(constant(e.this, str, "the format", e), e), list(e.expressions))


def printf(t: ExprTranslator, e: exp.Anonymous) -> Expr:
    """``printf(template, args...)`` with ``%s`` of strings and booleans, ``%d``/``%i`` of integers."""
    if not e.expressions:
        raise ConfigError(f"SQL: {sql_text(e)}: printf takes a format")
    template, *args = e.expressions
    return _formatted(t, e, _printf_fields(constant(template, str, "the format", e), e), args)


def _anonymous(t: ExprTranslator, e: exp.Anonymous) -> Expr:
    """A DuckDB function sqlglot does not know (``even``, ``gcd``...), by its name; any other is
    refused."""
    handler = _NAMED.get(e.name.lower())
    if handler is None:
        raise ConfigError(f"SQL: Anonymous ({sql_text(e)}) is not supported")
    return handler(t, e)


#: DuckDB functions sqlglot reads as anonymous, by name.
_NAMED: dict[str, Callable[[ExprTranslator, exp.Anonymous], Expr]] = {
    "even": even,
    "gcd": _divisors("gcd"),
    "greatest_common_divisor": _divisors("gcd"),
    "lcm": _divisors("lcm"),
    "least_common_multiple": _divisors("lcm"),
    "bit_count": bit_count,
    "yearweek": yearweek,
    "printf": printf,
}


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
    exp.Ascii: lambda t, e: Func("ascii", (_text(t, e.this, e),), ()),
    exp.Translate: translate,
    exp.MD5: lambda t, e: Func("md5", (_text(t, e.this, e),), ()),
    exp.Split: string_split,
    exp.BitwiseAnd: _bitwise("bitwise_and"),
    exp.BitwiseOr: _bitwise("bitwise_or"),
    exp.BitwiseXor: _bitwise("bitwise_xor"),
    exp.BitwiseNot: bitwise_not,
    exp.BitwiseLeftShift: _shift("shift_left"),
    exp.BitwiseRightShift: _shift("shift_right"),
    exp.Array: list_value,
    exp.Format: format_,
    exp.Anonymous: _anonymous,
}
