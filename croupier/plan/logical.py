"""The logical plan: what a query computes, as a tree of immutable nodes with known schemas.

Every node knows its output schema, computed by running the same operators the tasks will run on
empty Polars frames, so a plan that would fail on types fails when it is built, not on a worker.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from croupier.dag.operators import Aggregate as AggregateOp
from croupier.dag.operators import AggSpec, HashJoin, Operator, Select, WithColumns, run_pipeline
from croupier.dag.operators import Filter as FilterOp
from croupier.dag.scan import ScanSpec, projected
from croupier.errors import ConfigError
from croupier.expr import AGGREGATIONS, Agg, Alias, Col, Expr

JOIN_HOWS = ("inner", "left", "semi", "anti")


def _empty(schema: pl.Schema) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def _check(op: Operator, schema: pl.Schema, sides: dict[str, pl.DataFrame] | None = None, what: str = "") -> pl.Schema:
    try:
        return run_pipeline(_empty(schema), (op,), sides or {}).schema
    except pl.exceptions.PolarsError as exc:
        raise ConfigError(f"{what or op.describe()}: {exc}") from exc


class Node:
    """A logical plan node."""

    schema: pl.Schema

    def children(self) -> tuple[Node, ...]:
        return ()

    def label(self) -> str:  # pragma: no cover - every node overrides it
        raise NotImplementedError

    def tree(self, indent: int = 0) -> str:
        """The plan below this node, one node per line."""
        lines = ["  " * indent + self.label()]
        for child in self.children():
            lines.append(child.tree(indent + 1))
        return "\n".join(lines)


@dataclass(eq=False)
class Scan(Node):
    spec: ScanSpec
    file_schema: pl.Schema

    def __post_init__(self) -> None:
        self.schema = projected(self.spec, self.file_schema)

    def label(self) -> str:
        cols = "*" if self.spec.columns is None else ", ".join(self.spec.columns)
        pred = f" where {self.spec.predicate.show()}" if self.spec.predicate is not None else ""
        return f"scan {self.spec.format} {self.spec.url} [{cols}]{pred}"


@dataclass(eq=False)
class Filter(Node):
    input: Node
    predicate: Expr

    def __post_init__(self) -> None:
        missing = self.predicate.columns() - set(self.input.schema)
        if missing:
            raise ConfigError(f"filter {self.predicate.show()} reads unknown column(s) {sorted(missing)}; columns are {list(self.input.schema)}")
        self.schema = _check(FilterOp(self.predicate), self.input.schema)

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        return f"filter {self.predicate.show()}"


@dataclass(eq=False)
class Project(Node):
    """select (exactly these columns) or with_columns (add/replace)."""

    input: Node
    exprs: tuple[Expr, ...]
    kind: str = "select"

    def __post_init__(self) -> None:
        self.schema = _check(self.operator(), self.input.schema)

    def operator(self) -> Operator:
        return Select(self.exprs) if self.kind == "select" else WithColumns(self.exprs)

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        return self.operator().describe()


@dataclass(frozen=True)
class LoweredAgg:
    """An aggregation as the stages run it: pre-projection, partial (before the exchange), final."""

    pre: Select
    partial: AggregateOp | None
    final: tuple[Operator, ...]


def _agg_parts(expr: Expr) -> tuple[Agg, str]:
    name = None
    if isinstance(expr, Alias):
        name, expr = expr.name, expr.operand
    if not isinstance(expr, Agg) or expr.fn not in AGGREGATIONS or (expr.operand is not None and expr.operand.has_agg()):
        raise ConfigError(f"agg() takes single aggregations such as col('x').sum().alias('s'); got {expr.show()} (compute ratios with with_columns after agg)")
    return expr, name or expr.output_name()


@dataclass(eq=False)
class Aggregate(Node):
    input: Node
    keys: tuple[Expr, ...]
    aggs: tuple[Expr, ...]

    def __post_init__(self) -> None:
        names = [k.output_name() for k in self.keys] + [_agg_parts(a)[1] for a in self.aggs]
        if len(set(names)) != len(names):
            raise ConfigError(f"group_by/agg output names must be unique, got {names}; use .alias(...)")
        lowered = self.lower()
        schema = _check(lowered.pre, self.input.schema, what="group_by")
        for op in ((lowered.partial,) if lowered.partial else ()) + lowered.final:
            schema = _check(op, schema, what="agg")
        self.schema = schema

    def key_names(self) -> tuple[str, ...]:
        return tuple(k.output_name() for k in self.keys)

    def lower(self) -> LoweredAgg:
        """Split into pre-projection, partial aggregation and final aggregation (SEER's combiner)."""
        keys = self.key_names()
        pre: list[Expr] = [k if isinstance(k, Col) else k.alias(n) for k, n in zip(self.keys, keys)]
        parts = [_agg_parts(a) for a in self.aggs]
        for i, (agg, _) in enumerate(parts):
            if agg.operand is not None:
                pre.append(agg.operand.alias(f"__a{i}"))
        if any(agg.fn == "n_unique" for agg, _ in parts):
            specs = tuple(AggSpec(agg.fn, None if agg.operand is None else f"__a{i}", name) for i, (agg, name) in enumerate(parts))
            return LoweredAgg(Select(tuple(pre)), None, (AggregateOp(keys, specs),))
        partial: list[AggSpec] = []
        final: list[AggSpec] = []
        means: list[Expr] = []
        for i, (agg, name) in enumerate(parts):
            a = f"__a{i}"
            if agg.fn == "mean":
                partial += [AggSpec("sum", a, f"__p{i}s"), AggSpec("count", a, f"__p{i}c")]
                final += [AggSpec("sum", f"__p{i}s", f"__p{i}s"), AggSpec("sum", f"__p{i}c", f"__p{i}c")]
                means.append((Col(f"__p{i}s") / Col(f"__p{i}c")).alias(name))
            else:
                partial.append(AggSpec(agg.fn, None if agg.fn == "len" else a, f"__p{i}"))
                combine = {"sum": "sum", "count": "sum", "len": "sum", "min": "min", "max": "max"}[agg.fn]
                final.append(AggSpec(combine, f"__p{i}", name))
        out: list[Operator] = [AggregateOp(keys, tuple(final))]
        if means:
            out.append(WithColumns(tuple(means)))
        out.append(Select(tuple(Col(n) for n in keys + tuple(name for _, name in parts))))
        return LoweredAgg(Select(tuple(pre)), AggregateOp(keys, tuple(partial)), tuple(out))

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        return f"aggregate by [{', '.join(k.show() for k in self.keys)}]: {', '.join(a.show() for a in self.aggs)}"


@dataclass(eq=False)
class Join(Node):
    left: Node
    right: Node
    left_on: tuple[str, ...]
    right_on: tuple[str, ...]
    how: str = "inner"
    suffix: str = "_right"

    def __post_init__(self) -> None:
        if self.how not in JOIN_HOWS:
            raise ConfigError(f"join how must be one of {JOIN_HOWS}, got {self.how!r}")
        if len(self.left_on) != len(self.right_on) or not self.left_on:
            raise ConfigError(f"join needs the same number of keys on both sides, got {self.left_on} and {self.right_on}")
        for side, keys, schema in (("left", self.left_on, self.left.schema), ("right", self.right_on, self.right.schema)):
            missing = set(keys) - set(schema)
            if missing:
                raise ConfigError(f"join: {side} side has no column(s) {sorted(missing)}; its columns are {list(schema)}")
        op = self.operator("right")
        self.schema = _check(op, self.left.schema, {"right": _empty(self.right.schema)}, what="join")

    def operator(self, side: str) -> HashJoin:
        return HashJoin(side, self.left_on, self.right_on, self.how, self.suffix)

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def label(self) -> str:
        on = ", ".join(f"{a}={b}" for a, b in zip(self.left_on, self.right_on))
        return f"{self.how} join on {on}"


@dataclass(eq=False)
class Sort(Node):
    input: Node
    by: tuple[Expr, ...]
    descending: tuple[bool, ...]
    nulls_last: bool = False

    def __post_init__(self) -> None:
        from croupier.dag.operators import Sort as SortOp

        self.schema = _check(SortOp(self.by, self.descending, self.nulls_last), self.input.schema, what="sort")

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        return "sort by " + ", ".join(f"{e.show()}{' desc' if d else ''}" for e, d in zip(self.by, self.descending))


@dataclass(eq=False)
class Limit(Node):
    input: Node
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ConfigError(f"head/limit needs n >= 0, got {self.n}")
        self.schema = self.input.schema

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        return f"limit {self.n}"


@dataclass(eq=False)
class Distinct(Node):
    input: Node

    def __post_init__(self) -> None:
        self.schema = self.input.schema

    def as_aggregate(self) -> Aggregate:
        return Aggregate(self.input, tuple(Col(c) for c in self.schema), ())

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        return "distinct"
