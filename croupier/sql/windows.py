"""SQL window functions to Croupier windows (``Over``), with DuckDB's semantics.

* ``rank()``, ``dense_rank()``, ``row_number()``, ``percent_rank()``, ``cume_dist()`` and
  ``ntile(n)`` rank NULL order keys (last by default) instead of leaving them NULL; ranks are
  Int64, ``percent_rank`` ((rank - 1) / (rows - 1), 0 for one row) and ``cume_dist`` (rows up to
  the last peer / rows) Float64, ``ntile`` gives the first rows % n buckets one row more.
* ``lag``/``lead`` shift within the ordered partition.
* An aggregate without ORDER BY covers the whole partition. With ORDER BY it needs a ROWS frame:
  ``UNBOUNDED PRECEDING AND CURRENT ROW`` (running sum/min/max/count/avg, NULL until the first
  non-NULL value), ``n PRECEDING AND CURRENT ROW`` or ``n PRECEDING AND n FOLLOWING`` (Polars'
  rolling sum/avg/min/max/count over the rows present: the frame shrinks at the partition's
  edges, and NULLs are skipped as DuckDB skips them). DuckDB's default frame (RANGE UNBOUNDED
  PRECEDING to CURRENT ROW, which takes the current row's peers too) runs for sum, avg, min, max
  and count (:func:`_through_peers`); a whole-partition frame is the partition's aggregate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl
from sqlglot import exp

from croupier.errors import ConfigError
from croupier.expr import Agg, Expr, Func, Lit, Over, coalesce, int_range, when
from croupier.sql.parse import sql_text

if TYPE_CHECKING:
    from croupier.sql.exprs import ExprTranslator

#: Rank of a NULL order key placed last (above any dense rank of a real value).
_NULL_LAST = 2**40
_RANKS = {exp.Rank: "min", exp.DenseRank: "dense", exp.RowNumber: "ordinal"}
_ROLLING = {exp.Sum: "rolling_sum", exp.Avg: "rolling_mean", exp.Min: "rolling_min", exp.Max: "rolling_max", exp.Count: "rolling_sum"}
FRAMES = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW, ROWS BETWEEN n PRECEDING AND CURRENT ROW, ROWS BETWEEN n PRECEDING AND n FOLLOWING"


def window(t: ExprTranslator, e: exp.Window) -> Expr:
    """``fn OVER (PARTITION BY ... ORDER BY ... frame)`` over the rows of ``t.rel``."""
    partition = tuple(t(p) for p in e.args.get("partition_by") or [])
    order = e.args.get("order")
    ordered = list(order.expressions) if order is not None else []
    keys = [t(o.this) for o in ordered]
    desc = [bool(o.args.get("desc")) for o in ordered]
    nulls_first = [bool(o.args.get("nulls_first")) for o in ordered]
    fn = e.this
    if isinstance(fn, (exp.Rank, exp.DenseRank, exp.RowNumber, exp.PercentRank, exp.CumeDist, exp.Ntile)):
        ranked = _ranking(fn, keys, desc, nulls_first)
        return Over(ranked, partition) if partition else ranked
    if isinstance(fn, (exp.Lag, exp.Lead)):
        n = int(fn.args["offset"].this) if fn.args.get("offset") is not None else 1
        shifted = t(fn.this).shift(n if isinstance(fn, exp.Lag) else -n, _default(fn))
        return _ordered_over(shifted, partition, keys, desc, nulls_first)
    if not isinstance(fn, exp.AggFunc):
        raise ConfigError(f"SQL: window function {sql_text(fn)} is not supported")
    if not keys or _whole_partition(e):
        agg = t.aggregate(fn)
        return Over(agg, partition) if partition else agg
    if _up_to_peers(e):
        return _through_peers(t, fn, partition, keys, desc, nulls_first)
    return _ordered_over(_framed(t, e, fn), partition, keys, desc, nulls_first)


def _frame(e: exp.Window) -> tuple[str, str, str]:
    """The window's frame as (kind, start, end) in upper case ("" where not written)."""
    spec = e.args.get("spec")
    if spec is None:
        return "", "", ""
    return str(spec.args.get("kind", "")).upper(), str(spec.args.get("start", "")).upper(), str(spec.args.get("end", "")).upper()


def _up_to_peers(e: exp.Window) -> bool:
    """Whether the frame is DuckDB's default with ORDER BY: every row up to the current row's last
    peer (RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW, written or not)."""
    return _frame(e) in (("", "", ""), ("RANGE", "UNBOUNDED", "CURRENT ROW"))


def _whole_partition(e: exp.Window) -> bool:
    """Whether the frame is the whole partition (UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)."""
    kind, start, end = _frame(e)
    return kind in ("ROWS", "RANGE") and start == end == "UNBOUNDED"


def _through_peers(t: ExprTranslator, fn: exp.Expr, partition: tuple[Expr, ...], keys: list[Expr], desc: list[bool], nulls_first: list[bool]) -> Expr:
    """A running aggregate that takes the current row's peers (rows of equal ORDER BY keys) too.

    Running counts, sums of the positive and of the negative parts, maxima and minima never go
    back, so over its peers the largest (the smallest, for a minimum) is the value at the last
    peer, whatever order the ties ran in: a sum is the positive part's less the negative part's
    (exact for integers; for floating-point values it may round in the last digits otherwise than
    a direct sum, and loses precision where the two parts nearly cancel at large magnitudes).
    """
    peers = (*partition, *keys)

    def last(running: Expr, agg: str = "max") -> Expr:
        return Over(Agg(agg, _ordered_over(running, partition, keys, desc, nulls_first)), peers)

    if isinstance(fn, exp.Count) and (fn.this is None or isinstance(fn.this, exp.Star)):
        return last(int_range(1, Agg("len", None) + 1)).cast(pl.Int64)
    if isinstance(fn.this, exp.Distinct):
        raise ConfigError(f"SQL: {sql_text(fn)} over an ordered window is not supported")
    x = t(fn.this)
    counted = last(x.cum_count()).cast(pl.Int64)
    if isinstance(fn, exp.Count):
        return counted
    if isinstance(fn, exp.Max):
        return last(x.cum_max().forward_fill())
    if isinstance(fn, exp.Min):
        return last(x.cum_min().forward_fill(), "min")
    if not isinstance(fn, (exp.Sum, exp.Avg)):
        raise ConfigError(f"SQL: running {sql_text(fn)} is not supported (sum, avg, min, max, count are)")
    dtype = t.dtype(x)
    if not (dtype.is_numeric() or dtype == pl.Null):
        raise ConfigError(f"SQL: {sql_text(fn)} needs a numeric argument (got {dtype}); cast it first")
    v = x.cast(pl.Int64) if dtype.is_integer() and isinstance(fn, exp.Sum) else x.cast(pl.Float64) if dtype == pl.Float32 or isinstance(fn, exp.Avg) else x
    up = last(Func("cum_sum", (when(v > 0).then(v).otherwise(Lit(0)),), (False,)))
    down = last(Func("cum_sum", (when(v < 0).then(-v).otherwise(Lit(0)),), (False,)))
    total = up - down
    if isinstance(fn, exp.Avg):
        total = total / counted.cast(pl.Float64)
    return when(counted > 0).then(total).otherwise(Lit(None))


def _ranking(fn: exp.Expr, keys: list[Expr], desc: list[bool], nulls_first: list[bool]) -> Expr:
    """A ranking function over one partition's rows (the caller wraps it in the partition)."""
    if not keys:  # no order: every row is a peer of every other (row_number/ntile: any order)
        if isinstance(fn, (exp.Rank, exp.DenseRank, exp.PercentRank, exp.CumeDist)):
            return Lit(0.0 if isinstance(fn, exp.PercentRank) else 1.0 if isinstance(fn, exp.CumeDist) else 1, pl.Float64() if isinstance(fn, (exp.PercentRank, exp.CumeDist)) else pl.Int64())
        keys, desc, nulls_first = [row_order()], [False], [False]
    rows = Agg("len", None).cast(pl.Int64)
    if isinstance(fn, exp.PercentRank):
        rank = order_rank(keys, desc, nulls_first, "min").cast(pl.Float64)
        return when(rows > 1).then((rank - 1) / (rows - 1).cast(pl.Float64)).otherwise(Lit(0.0))
    if isinstance(fn, exp.CumeDist):
        return order_rank(keys, desc, nulls_first, "max").cast(pl.Float64) / rows.cast(pl.Float64)
    if isinstance(fn, exp.Ntile):
        return _ntile(fn, order_rank(keys, desc, nulls_first, "ordinal").cast(pl.Int64) - 1, rows)
    return order_rank(keys, desc, nulls_first, _RANKS[type(fn)]).cast(pl.Int64)


def row_order() -> Expr:
    """0, 1, 2... over the rows as they come: an order key for a window without ORDER BY (a
    constant key would rank every row 1)."""
    return int_range(0, Agg("len", None))


def _ntile(fn: exp.Ntile, index: Expr, rows: Expr) -> Expr:
    """``ntile(n)`` of the row at 0-based ``index`` among ``rows``: buckets of rows // n rows, the
    first rows % n of them one row larger (DuckDB's and PostgreSQL's split)."""
    arg = fn.this
    if not isinstance(arg, exp.Literal) or arg.is_string or int(float(arg.this)) < 1:
        raise ConfigError(f"SQL: {sql_text(fn)}: ntile needs a constant positive number of buckets")
    n = int(float(arg.this))
    size = rows // n
    large = rows - size * n
    small_start = large * (size + 1)
    return when(index < small_start).then(index // (size + 1) + 1).otherwise(large + (index - small_start) // size + 1)


def _framed(t: ExprTranslator, e: exp.Window, fn: exp.Expr) -> Expr:
    """An ordered window aggregate over its ROWS frame (see the module's docstring)."""
    kind, start_text, end_text = _frame(e)
    if (kind, start_text, end_text) == ("ROWS", "UNBOUNDED", "CURRENT ROW"):
        return _running(t, fn)
    spec = e.args.get("spec")
    start = spec.args.get("start") if spec is not None else None
    end = spec.args.get("end") if spec is not None else None
    before = _offset(start, spec, "preceding")
    if kind == "ROWS" and before is not None and type(fn) in _ROLLING:
        if end_text == "CURRENT ROW":
            return _rolling(t, fn, before + 1, False)
        if _offset(end, spec, "following") == before:
            return _rolling(t, fn, 2 * before + 1, True)
    raise ConfigError(f"SQL: {sql_text(e)}: an ordered window aggregate needs one of these frames: {FRAMES} (sum, avg, min, max, count), or DuckDB's default frame (RANGE UNBOUNDED PRECEDING to CURRENT ROW)")


def _offset(bound: exp.Expr | None, spec: exp.Expr, side: str) -> int | None:
    """The constant n of ``n PRECEDING``/``n FOLLOWING`` (None for another bound)."""
    which = "start_side" if side == "preceding" else "end_side"
    if not isinstance(bound, exp.Literal) or bound.is_string or str(spec.args.get(which, "")).lower() != side:
        return None
    return int(float(bound.this))


def _default(fn: exp.Expr) -> Any:
    """The constant ``lag(x, n, default)``/``lead`` answers past the partition's ends (None: NULL)."""
    given = fn.args.get("default")
    if given is None:
        return None
    try:
        return given.to_py()  # a literal, -1 included
    except ValueError as exc:
        raise ConfigError(f"SQL: {sql_text(fn)}: the default must be a constant") from exc


def _rolling(t: ExprTranslator, fn: exp.Expr, size: int, center: bool) -> Expr:
    """sum/avg/min/max/count over a sliding frame of ``size`` rows (ending at the row, or centred
    on it), over the rows present: Polars' rolling with min_samples=1 skips NULLs as SQL does."""
    if isinstance(fn.this, exp.Star) or isinstance(fn.this, exp.Distinct):
        raise ConfigError(f"SQL: {sql_text(fn)} over a sliding frame is not supported; count a column")
    x = t(fn.this)
    dtype = t.dtype(x)
    if not isinstance(fn, exp.Count) and not (dtype.is_numeric() or dtype.is_temporal() or dtype == pl.Boolean):
        raise ConfigError(f"SQL: {sql_text(fn)} of {dtype} values over a sliding frame is not supported (numbers, dates and times are)")
    if isinstance(fn, exp.Count):
        x = x.is_not_null().cast(pl.Int64)
    elif isinstance(fn, exp.Sum) and dtype.is_integer():
        x = x.cast(pl.Int64)
    elif isinstance(fn, exp.Sum) and dtype == pl.Float32:
        x = x.cast(pl.Float64)  # DOUBLE, as DuckDB sums a FLOAT
    elif isinstance(fn, exp.Avg):
        x = x.cast(pl.Float64)
    return Func(_ROLLING[type(fn)], (x,), (size, 1, center))


def _running(t: ExprTranslator, fn: exp.Expr) -> Expr:
    """A running (cumulative) aggregate, NULL until the first non-NULL value (DuckDB's frame)."""
    x = t(fn.this)
    if isinstance(fn, exp.Sum):
        dtype = t.dtype(x)
        return Func("cum_sum", ((x.cast(pl.Int64) if dtype.is_integer() else x.cast(pl.Float64) if dtype == pl.Float32 else x),), (False,)).forward_fill()
    if isinstance(fn, exp.Avg):
        total = Func("cum_sum", (x.cast(pl.Float64),), (False,)).forward_fill()
        return total / x.cum_count().cast(pl.Float64)
    if isinstance(fn, exp.Max):
        return x.cum_max().forward_fill()
    if isinstance(fn, exp.Min):
        return x.cum_min().forward_fill()
    if isinstance(fn, exp.Count):
        return x.cum_count().cast(pl.Int64)
    raise ConfigError(f"SQL: running {sql_text(fn)} is not supported (sum, avg, min, max, count are)")


def _ordered_over(e: Expr, partition: tuple[Expr, ...], keys: list[Expr], desc: list[bool], nulls_first: list[bool]) -> Expr:
    if len(set(desc)) > 1 or len(set(nulls_first)) > 1:
        raise ConfigError("SQL: an ordered window needs all ORDER BY keys in one direction and one NULLS order")
    return Over(e, partition, tuple(keys), desc[0], not nulls_first[0])


def order_rank(keys: list[Expr], desc: list[bool], nulls_first: list[bool], method: str) -> Expr:
    """SQL rank of the order keys: each key as an ascending dense rank with NULLs placed as asked."""
    parts = []
    for key, d, nf in zip(keys, desc, nulls_first):
        parts.append(coalesce(key.rank("dense", descending=d), Lit(0 if nf else _NULL_LAST, pl.UInt64())))
    if len(parts) == 1:
        return parts[0].rank(method)
    return Func("struct", tuple(parts), ()).rank(method)
