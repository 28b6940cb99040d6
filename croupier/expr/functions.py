"""Named functions of expressions, each with its Polars translation and its kind.

A function is applied to operand expressions plus constant arguments (:class:`croupier.expr.nodes.Func`).
Its *kind* tells the planner where it can run:

* ``row``: one output per input row, computed from that row alone (arithmetic, strings, dates,
  ``coalesce``...). Runs anywhere, in any task, on any split of the rows.
* ``window``: one output per row that depends on other rows of the column (``rank``, ``cum_sum``,
  ``shift``, ``int_range``). Runs in a window node, over a whole partition (``.over(...)``) or over
  the whole frame.

Every translation is the Polars call of the same name, so the semantics are Polars'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

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
    "repeat": Function(ROW, lambda e, n: pl.concat_str([e] * n) if n > 0 else pl.when(e.is_not_null()).then(pl.lit(""))),
    "find": Function(ROW, lambda e, s: e.str.find(s, literal=True)),
    "head": Function(ROW, lambda e, n: e.str.head(n)),
    "tail": Function(ROW, lambda e, n: e.str.tail(n)),
    "struct": Function(ROW, lambda es: pl.struct(es), method=False, variadic=True),
    "concat_str": Function(ROW, lambda es, separator="", ignore_nulls=False: pl.concat_str(es, separator=separator, ignore_nulls=ignore_nulls), method=False, variadic=True),
    # dates
    "year": Function(ROW, lambda e: e.dt.year()),
    "month": Function(ROW, lambda e: e.dt.month()),
    "day": Function(ROW, lambda e: e.dt.day()),
    "quarter": Function(ROW, lambda e: e.dt.quarter()),
    "weekday": Function(ROW, lambda e: e.dt.weekday()),
    "ordinal_day": Function(ROW, lambda e: e.dt.ordinal_day()),
    "week": Function(ROW, lambda e: e.dt.week()),
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
