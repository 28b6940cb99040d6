"""Named functions of expressions, each with its Polars translation and its kind.

A function is applied to operand expressions plus constant arguments (:class:`croupier.expr.nodes.Func`).
Its *kind* tells the planner where it can run:

* ``row``: one output per input row, computed from that row alone (arithmetic, strings, dates,
  ``coalesce``...). Runs anywhere, in any task, on any split of the rows.
* ``window``: one output per row that depends on other rows of the column (``rank``, ``cum_sum``,
  ``shift``, ``int_range``). Runs in a window node, over a whole partition (``.over(...)``) or over
  the whole frame.

Every translation is the Polars call of the same name, so the semantics are Polars'; except the
DuckDB functions Polars has no call for (``split_part``, ``ascii``, ``translate``, the shifts,
``even``, ``yearweek``...), built from Polars calls with DuckDB's semantics, and the few no
Polars calls can compute (``gcd``, ``lcm``: numpy; ``md5``: hashlib), which run as Python on
each batch of rows. Where DuckDB raises an error on some rows (a left shift past its type) they
raise Polars' InvalidOperationError too.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import numpy as np
import polars as pl

ROW = "row"
WINDOW = "window"


@dataclass(frozen=True)
class Function:
    """How to translate one named function, what kind it is, and how ``show`` prints it."""

    kind: str
    build: Callable[..., pl.Expr]
    method: bool = True  # printed as operand.fn(args) (else fn(operands, args))
    variadic: bool = False  # build takes the list of operands, then the constant arguments


def like_regex(pattern: str, case_insensitive: bool = False) -> str:
    """SQL LIKE pattern (% any run, _ one character) as an anchored regular expression."""
    out = []
    for ch in pattern:
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
    return ("(?si)" if case_insensitive else "(?s)") + "^" + "".join(out) + "$"


def _str_slice(e: pl.Expr, offset: pl.Expr, length: pl.Expr | None = None) -> pl.Expr:
    return e.str.slice(offset, length)


def _strpos(e: pl.Expr, sub: pl.Expr) -> pl.Expr:
    """1 + the characters before ``sub``'s first occurrence in ``e``, 0 where it does not occur
    (SQL's strpos; an empty ``sub`` is at 1); null where either is null."""
    found = e.str.contains(sub, literal=True)
    before = e.str.split(sub).list.first().str.len_chars().cast(pl.Int64)
    missing = pl.lit(None, pl.Int64)
    return pl.when(found.is_null()).then(missing).when(sub.str.len_bytes() == 0).then(pl.lit(1, pl.Int64)).when(found).then(before + 1).otherwise(pl.lit(0, pl.Int64))


def _split_part(e: pl.Expr, sep: str, index: int) -> pl.Expr:
    """DuckDB's ``split_part``: the ``index``-th part (1-based; negative from the end), '' past
    either end or at 0; null for null."""
    if index == 0:
        return pl.when(e.is_not_null()).then(pl.lit(""))
    part = e.str.split(sep).list.get(index - 1 if index > 0 else index, null_on_oob=True)
    return pl.when(e.is_not_null()).then(part.fill_null(""))


def _ascii(e: pl.Expr) -> pl.Expr:
    """DuckDB's ``ascii``: the first character's Unicode code point as INTEGER (0 for '', null
    for null). Polars has no code-point function: the character's UTF-8 bytes, read in hex as
    one big-endian number, are decoded by arithmetic (a '0' in front makes '' read as 0)."""
    first = e.str.head(1)
    size = first.str.len_bytes()
    value = pl.concat_str([pl.lit("0"), first.str.encode("hex")]).str.to_integer(base=16).cast(pl.Int64)

    def byte(i: int, keep: int) -> pl.Expr:
        """The ``i``-th byte from the right, its low bits below ``keep``."""
        return (value // 256**i) % keep

    two = byte(1, 32) * 64 + byte(0, 64)
    three = byte(2, 16) * 4096 + byte(1, 64) * 64 + byte(0, 64)
    four = byte(3, 8) * 262144 + byte(2, 64) * 4096 + byte(1, 64) * 64 + byte(0, 64)
    return pl.when(size <= 1).then(value).when(size == 2).then(two).when(size == 3).then(three).otherwise(four).cast(pl.Int32)


def translation(source: str, target: str) -> dict[str, str]:
    """``translate``'s map of characters: the i-th character of ``source`` to the i-th of
    ``target``, to nothing past its end; a character given twice keeps its first (DuckDB's)."""
    out: dict[str, str] = {}
    for i, ch in enumerate(source):
        out.setdefault(ch, target[i] if i < len(target) else "")
    return out


def _translate(e: pl.Expr, source: str, target: str) -> pl.Expr:
    """DuckDB's ``translate(s, source, target)``: every character of ``source`` replaced in one
    pass (a replaced character is not replaced again)."""
    mapping = translation(source, target)
    return e.str.replace_many(list(mapping), list(mapping.values())) if mapping else e


def _even(e: pl.Expr) -> pl.Expr:
    """DuckDB's ``even`` of a double: rounded away from zero to the next even integer, as its
    kernel computes it (so -0.0 stays -0.0 and NaN stays NaN)."""
    up = pl.when(e >= 0).then(e.ceil()).otherwise(-((-e).ceil()))
    odd = (up / 2).floor() * 2 != up
    return pl.when(odd).then(pl.when(e >= 0).then(up + 1).otherwise(up - 1)).otherwise(up)


def _raise_where(message: str, columns: list[pl.Series]) -> pl.Series:
    """The first column, or an InvalidOperationError saying ``message`` where the second (a
    boolean column) holds for some row."""
    if columns[1].any():
        raise pl.exceptions.InvalidOperationError(message)
    return columns[0]


def _failing(value: pl.Expr, bad: pl.Expr, dtype: pl.DataType, message: str) -> pl.Expr:
    """``value`` (of ``dtype``), failing with ``message`` where ``bad`` holds: DuckDB's errors
    of single rows (Polars has no expression that raises). The error is InvalidOperationError,
    one a task is not tried again for: the same rows fail again."""
    return pl.map_batches([value, bad.fill_null(False)], partial(_raise_where, message), return_dtype=dtype, is_elementwise=True)


#: The largest BIGINT: a gcd or lcm beyond it fails, as DuckDB's does.
_INT64_MAX = np.uint64(2**63 - 1)


def _magnitudes(columns: list[pl.Series]) -> tuple[np.ndarray, np.ndarray]:
    """Two BIGINT columns' absolute values as UInt64 (exact, -2**63 too), a null as 0."""
    a, b = (np.abs(c.fill_null(0).to_numpy().astype(np.int64)).view(np.uint64) for c in columns)
    return a, b


def _gcd_batch(columns: list[pl.Series]) -> pl.Series:
    """The greatest common divisors of two BIGINT columns (gcd(0, 0) = 0), failing where it is
    2**63 (DuckDB's abs(-2**63) overflows)."""
    out = np.gcd(*_magnitudes(columns))
    if (out > _INT64_MAX).any():
        raise pl.exceptions.InvalidOperationError("gcd: Overflow on abs(-9223372036854775808) (DuckDB raises it too)")
    return pl.Series(out.astype(np.int64))


def _lcm_batch(columns: list[pl.Series]) -> pl.Series:
    """The least common multiples of two BIGINT columns (0 where either is 0), failing where one
    leaves BIGINT, as DuckDB's does."""
    a, b = _magnitudes(columns)
    zero = (a == 0) | (b == 0)
    factor = np.where(zero, 1, b // np.where(zero, 1, np.gcd(a, b)))
    if (~zero & (a > _INT64_MAX // factor)).any():
        raise pl.exceptions.InvalidOperationError("lcm value is out of range (DuckDB raises it too)")
    return pl.Series(np.where(zero, 0, a * factor).astype(np.int64))


def _pairwise(batch: Callable[[list[pl.Series]], pl.Series], a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """``batch`` of two BIGINT columns, row by row; null where either is null."""
    both = a.is_not_null() & b.is_not_null()
    out = pl.map_batches([a.cast(pl.Int64), b.cast(pl.Int64)], batch, return_dtype=pl.Int64, is_elementwise=True)
    return pl.when(both).then(out)


def _md5_batch(s: pl.Series) -> pl.Series:
    """The MD5 digests (hex) of a string column's UTF-8 bytes; null for null."""
    return pl.Series([None if v is None else hashlib.md5(v.encode()).hexdigest() for v in s], dtype=pl.String)


#: Integer dtypes' widths in bits.
INTEGER_BITS = {pl.Int8: 8, pl.Int16: 16, pl.Int32: 32, pl.Int64: 64, pl.UInt8: 8, pl.UInt16: 16, pl.UInt32: 32, pl.UInt64: 64}


def _power_of_two(n: pl.Expr, most: int) -> pl.Expr:
    """2 ** n as Int128, n taken at least 0 and at most ``most`` (<= 64)."""
    return pl.lit(2, pl.Int128).pow(n.clip(0, most).cast(pl.UInt32))


def _shift_left(x: pl.Expr, n: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """DuckDB's ``x << n`` in the integer type ``dtype``: x times 2**n (computed in Int128),
    failing where DuckDB raises an error: a negative x or n, or a result past the type (0
    shifts to 0 however far)."""
    bits = INTEGER_BITS[type(dtype)]
    wide, k = x.cast(pl.Int128), n.cast(pl.Int64)
    out = wide * _power_of_two(k, bits)
    most = 2 ** (bits - 1) - 1 if dtype.is_signed_integer() else 2**bits - 1
    bad = (wide < 0) | (k < 0) | ((wide != 0) & ((k >= bits) | (out > most)))
    value = pl.when(bad).then(pl.lit(0, pl.Int128)).otherwise(out).cast(dtype)
    return _failing(value, bad, dtype, "Out of Range Error: a left shift of a negative number, by a negative number or past its type (DuckDB raises it too)")


def _shift_right(x: pl.Expr, n: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """DuckDB's ``x >> n`` in the integer type ``dtype``: x divided by 2**n rounding down (an
    arithmetic shift), 0 where n is negative or not below the type's width."""
    bits = INTEGER_BITS[type(dtype)]
    k = n.cast(pl.Int64)
    shifted = x.cast(pl.Int128) // _power_of_two(k, bits - 1)
    out = pl.when(x.is_not_null() & ((k < 0) | (k >= bits))).then(pl.lit(0, pl.Int128)).otherwise(shifted)
    return out.cast(dtype)


def _string_split(e: pl.Expr, sep: str | None) -> pl.Expr:
    """DuckDB's ``string_split``: the parts between separators ('' between two in a row), one
    per character on an empty separator, the string whole on a NULL one; '' is [''], null null."""
    whole = pl.concat_list([e])
    if sep is None:
        return pl.when(e.is_not_null()).then(whole)
    parts = e.str.split(sep)
    return pl.when(e.str.len_bytes() == 0).then(whole).otherwise(parts) if sep == "" else parts


def _yearweek(e: pl.Expr) -> pl.Expr:
    """DuckDB's ``yearweek``: the ISO year times 100 plus the ISO week, the week subtracted in
    years up to 0 (as DuckDB: 0 BC's week 52 is -52)."""
    year, week = e.dt.iso_year().cast(pl.Int64), e.dt.week().cast(pl.Int64)
    return year * 100 + pl.when(year > 0).then(week).otherwise(-week)


def _int_range(start: pl.Expr, end: pl.Expr, step: int, dtype: Any) -> pl.Expr:
    return pl.int_range(start, end, step, dtype=dtype)


FUNCTIONS: dict[str, Function] = {
    # numbers
    "abs": Function(ROW, lambda e: e.abs()),
    "round": Function(ROW, lambda e, d, mode="half_to_even": e.round(d, mode=mode)),
    "floor": Function(ROW, lambda e: e.floor()),
    "ceil": Function(ROW, lambda e: e.ceil()),
    "sqrt": Function(ROW, lambda e: e.sqrt()),
    "exp": Function(ROW, lambda e: e.exp()),
    "log": Function(ROW, lambda e, base: e.log(base)),
    "sign": Function(ROW, lambda e: e.sign()),
    "pow": Function(ROW, lambda e, x: e.pow(x)),
    "is_nan": Function(ROW, lambda e: e.is_nan()),
    "is_infinite": Function(ROW, lambda e: e.is_infinite()),
    "sin": Function(ROW, lambda e: e.sin()),
    "cos": Function(ROW, lambda e: e.cos()),
    "tan": Function(ROW, lambda e: e.tan()),
    "cot": Function(ROW, lambda e: e.cot()),
    "arcsin": Function(ROW, lambda e: e.arcsin()),
    "arccos": Function(ROW, lambda e: e.arccos()),
    "arctan": Function(ROW, lambda e: e.arctan()),
    "arctan2": Function(ROW, lambda y, x: pl.arctan2(y, x), method=False),
    "degrees": Function(ROW, lambda e: e.degrees()),
    "radians": Function(ROW, lambda e: e.radians()),
    "cbrt": Function(ROW, lambda e: e.cbrt()),
    "fill_null": Function(ROW, lambda e, v: e.fill_null(v)),
    "eq_missing": Function(ROW, lambda a, b: a.eq_missing(b)),
    "fill_nan": Function(ROW, lambda e, v: e.fill_nan(v)),
    "coalesce": Function(ROW, lambda es: pl.coalesce(es), method=False, variadic=True),
    "max_horizontal": Function(ROW, lambda es: pl.max_horizontal(es), method=False, variadic=True),
    "sum_horizontal": Function(ROW, lambda es: pl.sum_horizontal(es), method=False, variadic=True),
    "clip": Function(ROW, lambda e, lower, upper: e.clip(lower, upper)),
    "min_horizontal": Function(ROW, lambda es: pl.min_horizontal(es), method=False, variadic=True),
    "even": Function(ROW, _even),
    "gcd": Function(ROW, lambda a, b: _pairwise(_gcd_batch, a, b), method=False),
    "lcm": Function(ROW, lambda a, b: _pairwise(_lcm_batch, a, b), method=False),
    "bit_count": Function(ROW, lambda e: e.bitwise_count_ones()),
    "bitwise_and": Function(ROW, lambda a, b: a & b),
    "bitwise_or": Function(ROW, lambda a, b: a | b),
    "bitwise_xor": Function(ROW, lambda a, b: a ^ b),
    "bitwise_not": Function(ROW, lambda e: ~e),
    "shift_left": Function(ROW, _shift_left),
    "shift_right": Function(ROW, _shift_right),
    # strings
    "contains": Function(ROW, lambda e, s, literal: e.str.contains(s, literal=literal)),
    "starts_with": Function(ROW, lambda e, s: e.str.starts_with(s)),
    "ends_with": Function(ROW, lambda e, s: e.str.ends_with(s)),
    "like": Function(ROW, lambda e, pattern, ci=False: e.str.contains(like_regex(pattern, ci))),
    "slice": Function(ROW, _str_slice),
    "to_uppercase": Function(ROW, lambda e: e.str.to_uppercase()),
    "to_lowercase": Function(ROW, lambda e: e.str.to_lowercase()),
    "len_chars": Function(ROW, lambda e: e.str.len_chars()),
    "len_bytes": Function(ROW, lambda e: e.str.len_bytes()),
    "strpos": Function(ROW, lambda e, sub: _strpos(e, sub)),
    "pad": Function(ROW, lambda e, width, fill, left: (e.str.pad_start(width, fill) if left else e.str.pad_end(width, fill)).str.slice(0, width)),
    "strip_chars": Function(ROW, lambda e, chars=None: e.str.strip_chars(chars)),
    "strip_chars_start": Function(ROW, lambda e, chars=None: e.str.strip_chars_start(chars)),
    "strip_chars_end": Function(ROW, lambda e, chars=None: e.str.strip_chars_end(chars)),
    "replace_all": Function(ROW, lambda e, old, new, literal=True: e.str.replace_all(old, new, literal=literal)),
    "reverse": Function(ROW, lambda e: e.str.reverse()),
    "regex_replace": Function(ROW, lambda e, pattern, value, every: e.str.replace_all(pattern, value) if every else e.str.replace(pattern, value, n=1)),
    "regex_extract": Function(ROW, lambda e, pattern, group: pl.when(e.is_not_null()).then(e.str.extract(pattern, group).fill_null(""))),
    "split_part": Function(ROW, lambda e, sep, index: _split_part(e, sep, index)),
    "string_split": Function(ROW, _string_split),
    "ascii": Function(ROW, _ascii),
    "translate": Function(ROW, _translate),
    "md5": Function(ROW, lambda e: e.map_batches(_md5_batch, return_dtype=pl.String, is_elementwise=True)),
    "repeat": Function(ROW, lambda e, n: pl.concat_str([e] * n) if n > 0 else pl.when(e.is_not_null()).then(pl.lit(""))),
    "find": Function(ROW, lambda e, s: e.str.find(s, literal=True)),
    "head": Function(ROW, lambda e, n: e.str.head(n)),
    "tail": Function(ROW, lambda e, n: e.str.tail(n)),
    "struct": Function(ROW, lambda es: pl.struct(es), method=False, variadic=True),
    "concat_list": Function(ROW, lambda es: pl.concat_list(es), method=False, variadic=True),
    "concat_str": Function(ROW, lambda es, separator="", ignore_nulls=False: pl.concat_str(es, separator=separator, ignore_nulls=ignore_nulls), method=False, variadic=True),
    # dates
    "year": Function(ROW, lambda e: e.dt.year()),
    "month": Function(ROW, lambda e: e.dt.month()),
    "day": Function(ROW, lambda e: e.dt.day()),
    "quarter": Function(ROW, lambda e: e.dt.quarter()),
    "weekday": Function(ROW, lambda e: e.dt.weekday()),
    "ordinal_day": Function(ROW, lambda e: e.dt.ordinal_day()),
    "week": Function(ROW, lambda e: e.dt.week()),
    "yearweek": Function(ROW, _yearweek),
    "offset_by": Function(ROW, lambda e, by: e.dt.offset_by(by)),
    "truncate": Function(ROW, lambda e, every: e.dt.truncate(every)),
    "total_days": Function(ROW, lambda e: e.dt.total_days()),
    "strftime": Function(ROW, lambda e, fmt: e.dt.strftime(fmt)),
    "month_end": Function(ROW, lambda e: e.dt.month_end()),
    "epoch_seconds": Function(ROW, lambda e: e.cast(pl.Datetime("us")).dt.epoch("us").cast(pl.Float64) / 1e6),
    "make_date": Function(ROW, lambda es: pl.date(*es), method=False, variadic=True),
    # depend on other rows: window functions
    "rank": Function(WINDOW, lambda e, method, descending: e.rank(method, descending=descending)),
    "cum_sum": Function(WINDOW, lambda e, reverse=False: e.cum_sum(reverse=reverse)),
    "cum_count": Function(WINDOW, lambda e, reverse=False: e.cum_count(reverse=reverse)),
    "cum_min": Function(WINDOW, lambda e, reverse=False: e.cum_min(reverse=reverse)),
    "cum_max": Function(WINDOW, lambda e, reverse=False: e.cum_max(reverse=reverse)),
    "forward_fill": Function(WINDOW, lambda e: e.forward_fill()),
    "rolling_sum": Function(WINDOW, lambda e, size, min_samples=1, center=False: e.rolling_sum(size, min_samples=min_samples, center=center)),
    "rolling_mean": Function(WINDOW, lambda e, size, min_samples=1, center=False: e.rolling_mean(size, min_samples=min_samples, center=center)),
    "rolling_min": Function(WINDOW, lambda e, size, min_samples=1, center=False: e.rolling_min(size, min_samples=min_samples, center=center)),
    "rolling_max": Function(WINDOW, lambda e, size, min_samples=1, center=False: e.rolling_max(size, min_samples=min_samples, center=center)),
    "shift": Function(WINDOW, lambda e, n, fill=None: e.shift(n, fill_value=fill)),
    "int_range": Function(WINDOW, _int_range, method=False),
}

#: Window functions whose operands are scalars of the frame (``int_range(0, len())``), so an
#: aggregation inside them does not make the expression an aggregation.
ABSORBS_AGGREGATIONS = frozenset({"int_range"})


# --- aggregations beyond Polars' plain methods ----------------------------------------------------


def _arg_extreme(e: pl.Expr, largest: bool) -> pl.Expr:
    """SQL ``arg_max(v, k)`` / ``arg_min``: ``v`` of the row with the largest (smallest) ``k``;
    ``e`` is ``struct(v, k)``. Rows where either is null are skipped; null when none is left."""
    v, k = e.struct.field("v"), e.struct.field("k")
    kept = v.is_not_null() & k.is_not_null()
    return v.filter(kept).sort_by(k.filter(kept), descending=largest).first()


def _ordered_values(e: pl.Expr, descending: tuple[bool, ...], nulls_last: tuple[bool, ...]) -> pl.Expr:
    """The field ``v`` of the struct ``e`` sorted by its fields ``k0``, ``k1``... (SQL's
    ``agg(v ORDER BY k0, k1)``); unsorted without keys."""
    v = e.struct.field("v")
    if not descending:
        return v
    keys = [e.struct.field(f"k{i}") for i in range(len(descending))]
    return v.sort_by(keys, descending=list(descending), nulls_last=list(nulls_last), maintain_order=True)


def _string_agg(e: pl.Expr, separator: str, descending: tuple[bool, ...], nulls_last: tuple[bool, ...]) -> pl.Expr:
    """SQL ``string_agg(v, separator ORDER BY ...)``: the non-null strings joined, null when none."""
    v = _ordered_values(e, descending, nulls_last)
    return pl.when(v.count() > 0).then(v.drop_nulls().str.join(separator)).otherwise(pl.lit(None, pl.String))


def _list(e: pl.Expr, descending: tuple[bool, ...], nulls_last: tuple[bool, ...]) -> pl.Expr:
    """SQL ``list(v ORDER BY ...)`` (``array_agg``): every value, nulls too, as one list."""
    return _ordered_values(e, descending, nulls_last).implode()


#: Aggregations that are not one Polars method of the operand (``Agg(fn, operand, args)``).
AGG_BUILDERS: dict[str, Callable[..., pl.Expr]] = {
    "quantile": lambda e, q, interpolation: e.quantile(q, interpolation),
    "arg_max": lambda e: _arg_extreme(e, True),
    "arg_min": lambda e: _arg_extreme(e, False),
    "string_agg": _string_agg,
    "list": _list,
}


def polars_agg(fn: str, e: pl.Expr, args: tuple[Any, ...] = ()) -> pl.Expr:
    """The aggregation ``fn`` of ``e`` in Polars: a builder of :data:`AGG_BUILDERS`, else the
    Polars method of that name."""
    builder = AGG_BUILDERS.get(fn)
    return builder(e, *args) if builder is not None else getattr(e, fn)(*args)
