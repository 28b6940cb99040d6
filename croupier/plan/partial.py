"""Splitting an aggregation into a partial step (before the exchange) and a final step (after it).

    input ──pre──> keys, __a0, __a1, ... ──partial──> keys, __p0, ... ══exchange══> final ──> keys, aggs

* ``pre`` (a ``Select``): the grouping keys and every distinct operand of the aggregations found
  in the aggregation expressions (``sum(a) / sum(b)`` has two; ``min(a), max(a)`` one; ``count(k)``
  grouped by k none: it reads the key's column). With nothing to read (``len()`` and
  no keys) it keeps the input's cheapest column, so the rows survive. The helper columns' prefix
  (``__`` above) grows by underscores until no input column, key or output starts with it.
* ``partial`` (an ``Aggregate`` operator, run per task): sum -> sum, count/len/null_count ->
  count, min -> min, max -> max, mean -> sum and count of the operand as Float64.
* ``final``: an ``Aggregate`` that combines partials (sums of sums and of counts, min of mins, max
  of maxes), then mean = sum / count, null where count is 0 (not NaN), then each aggregation is cast
  to the dtype Polars gives it directly (counts are UInt32, a sum keeps its input's sum type, ...)
  and the user's expressions over aggregations are evaluated.

With no keys the final ``Aggregate`` has no keys, so it yields exactly one row even when no
partial rows reach it (empty input): sums 0, counts 0, mean/min/max null, like Polars.

Aggregations that do not split (n_unique, median, quantile, std, var, arg_max/arg_min, string_agg,
list, first/last — whose group's rows reach the final step in input order — and mean of
non-numeric types) make
the whole node run unsplit: ``partial`` is None and ``final`` aggregates the pre-projected rows
after the exchange.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import polars as pl

from croupier.dag.operators import Aggregate as AggregateOp
from croupier.dag.operators import AggSpec, Operator, Select, WithColumns
from croupier.errors import ConfigError
from croupier.expr import Agg, Alias, Col, Expr, Lit, extract, identity, walk, when
from croupier.plan.inference import empty, infer_cached

#: aggregation -> (partial function, final function combining partials)
SPLITS = {"sum": ("sum", "sum"), "count": ("count", "sum"), "len": ("len", "sum"), "null_count": ("null_count", "sum"), "min": ("min", "min"), "max": ("max", "max")}

_WIDTH = {pl.Boolean: 1, pl.Int8: 1, pl.UInt8: 1, pl.Int16: 2, pl.UInt16: 2, pl.Int32: 4, pl.UInt32: 4, pl.Float32: 4, pl.Date: 4}


@dataclass(frozen=True)
class LoweredAgg:
    """An aggregation as the stages run it: pre-projection, partial (before the exchange), final."""

    pre: Select
    partial: AggregateOp | None
    final: tuple[Operator, ...]


def cheapest_column(schema: pl.Schema) -> str:
    """The column that costs least to read (narrowest fixed-width type; the first on a tie)."""
    if not len(schema):
        raise ConfigError("this plan reads a frame without columns")
    return min(schema, key=lambda c: _WIDTH.get(schema[c].base_type(), 8 if schema[c].is_numeric() or schema[c].is_temporal() else 16))


def agg_output_names(aggs: tuple[Expr, ...]) -> list[str]:
    return [a.output_name() for a in aggs]


def validate_aggs(keys: tuple[Expr, ...], aggs: tuple[Expr, ...]) -> None:
    """Raise a ConfigError for keys or aggregations the engine cannot run (with what to do)."""
    for k in keys:
        if k.has_agg() or k.has_window() or k.has_subquery():
            raise ConfigError(f"group_by key {k.show()} must be a row-wise expression (no aggregation, window or subquery)")
    for a in aggs:
        if a.has_window() or a.has_subquery():
            raise ConfigError(f"agg() expression {a.show()} holds a window or a subquery; compute it with with_columns before group_by")
        hole = hidden_prefix(a.columns()) + "x"
        outside = extract(a, lambda e: isinstance(e, Agg), lambda e: hole)
        if outside.columns() - {hole}:
            raise ConfigError(f"in agg(), every column must be inside an aggregation: {a.show()} (for several values per group use separate aggregations)")
        for node in walk(a):
            if isinstance(node, Agg):
                if node.operand is not None and node.operand.has_agg():
                    raise ConfigError(f"nested aggregation {node.show()}: aggregate once in agg(), then again in a second group_by")
                if node.fn in ("std", "var") and node.args not in ((), (0,), (1,)):
                    raise ConfigError(f"{node.show()}: only ddof=0 or ddof=1 is supported for std/var")


def hidden_prefix(taken: Iterable[str], base: str = "__") -> str:
    """A prefix for the helper columns a step adds: ``base`` and as many more underscores as it
    takes for no name in ``taken`` (the input's columns, the keys, the outputs) to start with it,
    so a user's column named like a helper (``__a0``) never clashes with one."""
    names = list(taken)
    prefix = base
    while any(n.startswith(prefix) for n in names):
        prefix += "_"
    return prefix


def _parts(aggs: tuple[Expr, ...], tag: str = "__") -> tuple[list[Agg], list[Expr]]:
    """The distinct aggregations inside ``aggs`` (named {tag}r0, {tag}r1, ...) and ``aggs`` rewritten over them."""
    index: dict[Any, int] = {}
    parts: list[Agg] = []

    def name_for(e: Expr) -> str:
        key = identity(e)
        if key not in index:
            index[key] = len(parts)
            parts.append(e)  # type: ignore[arg-type]
        return f"{tag}r{index[key]}"

    rewritten = [extract(a, lambda e: isinstance(e, Agg), name_for) for a in aggs]
    return parts, rewritten


def _operand_dtype(schema: pl.Schema, agg: Agg) -> pl.DataType | None:
    if agg.operand is None:
        return None
    return pl.DataFrame(schema=schema).select(agg.operand.to_polars().alias("x")).schema["x"]


def _splits(agg: Agg, schema: pl.Schema) -> bool:
    if agg.fn in SPLITS:
        return True
    if agg.fn == "mean":
        dtype = _operand_dtype(schema, agg)
        return dtype is not None and (dtype.is_numeric() and not dtype.is_decimal() or dtype == pl.Boolean)
    return False


def _part_dtypes(schema: pl.Schema, keys: tuple[Expr, ...], parts: list[Agg], tag: str) -> pl.Schema:
    """The dtype Polars gives each aggregation on its own (the final step casts to it);
    remembered as every node's schema is (the optimiser lowers each aggregation it rebuilds)."""
    exprs = [p.to_polars().alias(f"{tag}r{j}") for j, p in enumerate(parts)]
    if not keys:
        return infer_cached("partial aggregates", lambda: empty(schema).select(exprs), "part-aggregate", (schema,), exprs)
    by = [k.to_polars() for k in keys]
    return infer_cached("partial aggregates", lambda: empty(schema).group_by(by).agg(exprs), "part-group_by", (schema,), by + exprs, (len(by),))


def _is_constant(agg: Agg) -> bool:
    """Whether ``agg`` aggregates a value that reads no column (a literal, or an expression of literals)."""
    return agg.operand is not None and not agg.operand.columns()


def _constant(agg: Agg) -> Lit:
    """The value Polars gives ``agg`` of a constant: the aggregation of that one value."""
    value = pl.select(agg.to_polars().alias("x")).to_series()
    return Lit(value.to_list()[0], value.dtype)


def lower_aggregate(schema: pl.Schema, keys: tuple[Expr, ...], aggs: tuple[Expr, ...], target: pl.Schema) -> LoweredAgg:
    """Split ``group_by(keys).agg(aggs)`` over rows of ``schema`` into pre, partial and final steps
    whose result has exactly the ``target`` schema (Polars' own)."""
    names = [k.output_name() for k in keys]
    tag = hidden_prefix([*schema.names(), *names, *target.names()])
    pre: list[Expr] = [k if isinstance(k, Col) else k.alias(n) for k, n in zip(keys, names)]
    parts, rewritten = _parts(aggs, tag)
    if not parts:  # only literals: count rows anyway, so the steps keep one row per group
        parts = [Agg("len", None)]
    dtypes = _part_dtypes(schema, keys, parts, tag)
    # an aggregation of a constant (``lit(1).sum()``) is, in Polars, the aggregation of that one
    # value, not of a column of it per row: its value is known now, and the steps count rows in
    # its place (so a group still yields one row) and put the value in after the final step
    constants = {j: _constant(p) for j, p in enumerate(parts) if _is_constant(p)}
    parts = [Agg("len", None) if j in constants else p for j, p in enumerate(parts)]
    split = all(_splits(p, schema) for p in parts)
    # one pre-projected column per distinct operand: sum(v), min(v) and max(v) all read one
    # column, so a partial aggregation that passes its rows through sends v once, not thrice
    operand_of: list[str] = []
    # an operand that is a key (``count(k)`` grouped by k) reads the key's own column: sent once
    named: dict[Any, str] = {}
    for k, n in zip(keys, names):
        named.setdefault(identity(k.operand if isinstance(k, Alias) else k), n)
    for j, p in enumerate(parts):
        if p.operand is None:
            operand_of.append("")
            continue
        operand = p.operand.cast(pl.Float64) if split and p.fn == "mean" else p.operand
        key = identity(operand)
        if key not in named:
            named[key] = f"{tag}a{j}"
            pre.append(operand.alias(f"{tag}a{j}"))
        operand_of.append(named[key])
    if not pre:
        pre.append(Col(cheapest_column(schema)))
    fixed = (WithColumns(tuple(value.alias(f"{tag}r{j}") for j, value in constants.items())),) if constants else ()
    casts = WithColumns(tuple(Col(f"{tag}r{j}").cast(dtypes[f"{tag}r{j}"]) for j in range(len(parts)))) if parts else None
    out = Select(tuple(Col(n) for n in names) + tuple(e.cast(target[n]).alias(n) for e, n in zip(rewritten, list(target)[len(names):])))
    tail: tuple[Operator, ...] = fixed + ((casts,) if casts else ()) + (out,)
    key_t = tuple(names)
    if not split:
        specs = tuple(AggSpec(p.fn, None if p.operand is None or p.fn == "len" else operand_of[j], f"{tag}r{j}", p.args) for j, p in enumerate(parts))
        return LoweredAgg(Select(tuple(pre)), None, (AggregateOp(key_t, specs),) + tail)
    partial: list[AggSpec] = []
    final: list[AggSpec] = []
    means: list[Expr] = []
    for j, p in enumerate(parts):
        a, r = operand_of[j], f"{tag}r{j}"
        if p.fn == "mean":
            partial += [AggSpec("sum", a, f"{tag}p{j}s"), AggSpec("count", a, f"{tag}p{j}c")]
            final += [AggSpec("sum", f"{tag}p{j}s", f"{tag}p{j}s"), AggSpec("sum", f"{tag}p{j}c", f"{tag}p{j}c")]
            total, n = Col(f"{tag}p{j}s"), Col(f"{tag}p{j}c")
            means.append(when(n > 0).then(total / n).otherwise(Lit(None, pl.Float64)).alias(r))
        else:
            first, combine = SPLITS[p.fn]
            partial.append(AggSpec(first, None if first == "len" else a, f"{tag}p{j}"))
            final.append(AggSpec(combine, f"{tag}p{j}", r))
    steps: tuple[Operator, ...] = (AggregateOp(key_t, tuple(final)),)
    if means:
        steps += (WithColumns(tuple(means)),)
    return LoweredAgg(Select(tuple(pre)), AggregateOp(key_t, tuple(partial)), steps + tail)
