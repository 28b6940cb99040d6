"""The reference semantics of a logical plan: its translation, node by node, into Polars' lazy API.

Every node of :mod:`croupier.plan.logical` *means* the Polars call this module makes for it, so
``to_polars(plan).collect()`` is the answer the distributed engine must return. Translating the
optimised plan (lowered into core nodes, predicates and projections pushed down) checks the
rewrites; translating the plan as written gives Polars' own answer. With ``partials`` > 0 every
aggregation runs the way the stages run it (:meth:`Aggregate.lower`): pre-projection, a partial
aggregation over ``partials`` interleaved chunks of the rows, then the final steps, so the split
itself is checked too.

A node used twice is translated once: the same Polars frame object appears twice, and Polars'
common-subplan elimination computes it once.
"""

from __future__ import annotations


import polars as pl

from croupier.config import Config
from croupier.dag.operators import Aggregate as AggregateOp
from croupier.dag.operators import Operator, Select, WithColumns
from croupier.dag.scan import resolve
from croupier.errors import ConfigError
from croupier.expr import Expr, IsIn, IsInFrame, Lit, ScalarFrame, transform
from croupier.plan.logical import (
    Aggregate,
    Distinct,
    Filter,
    GroupingSets,
    Join,
    Limit,
    Tagged,
    Node,
    Project,
    Scan,
    SetOperation,
    Sort,
    Union,
    Window,
)
from croupier.plan.lower import lower
from croupier.plan.partial import hidden_prefix
from croupier.storage import open_store, parse_location


def to_polars(node: Node, partials: int = 0) -> pl.LazyFrame:
    """``node`` as a Polars LazyFrame reading the same (local) files."""
    return _Translator(partials).frame(node)


class _Translator:
    def __init__(self, partials: int) -> None:
        self.partials = partials
        self.memo: dict[int, pl.LazyFrame] = {}
        self.keep: list[Node] = []

    def frame(self, node: Node) -> pl.LazyFrame:
        if id(node) not in self.memo:
            self.keep.append(node)
            self.memo[id(node)] = self._frame(node)
        return self.memo[id(node)]

    def expr(self, e: Expr) -> pl.Expr:
        """``e`` in Polars; a subquery is evaluated here (Polars has no lazy equivalent)."""
        if e.has_subquery():
            e = transform(e, self._inline)
        return e.to_polars()

    def _inline(self, e: Expr) -> Expr:
        if isinstance(e, IsInFrame):
            values = self.frame(e.frame).collect().to_series()
            return IsIn(e.operand, tuple(values.to_list()), e.nulls_equal)
        if isinstance(e, ScalarFrame):
            values = self.frame(e.frame).collect().to_series()
            if len(values) > 1:
                raise ConfigError(f"a scalar subquery returned {len(values)} rows, expected at most one")
            return Lit(values[0] if len(values) else None, values.dtype)
        return e

    def _frame(self, node: Node) -> pl.LazyFrame:
        if isinstance(node, Scan):
            return _scan(node)
        if isinstance(node, Filter):
            return self.frame(node.input).filter(self.expr(node.predicate))
        if isinstance(node, Project):
            exprs = [self.expr(e) for e in node.exprs]
            child = self.frame(node.input)
            return child.select(exprs) if node.kind == "select" else child.with_columns(exprs)
        if isinstance(node, Aggregate):
            return self._aggregate(node)
        if isinstance(node, Join):
            return node.to_polars(self.frame(node.left), self.frame(node.right))
        if isinstance(node, Sort):
            by = [self.expr(e) for e in node.by]
            return self.frame(node.input).sort(by, descending=list(node.descending), nulls_last=node.nulls_flags(), maintain_order=True)
        if isinstance(node, Limit):
            return self.frame(node.input).tail(node.n) if node.from_end else self.frame(node.input).slice(node.offset, node.n)
        if isinstance(node, Distinct):
            return self.frame(node.input).unique(maintain_order=True)
        if isinstance(node, Tagged):
            return self.frame(node.input).with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(node.name))
        if isinstance(node, Union):
            return pl.concat([self.frame(i) for i in node.inputs], how="vertical")
        if isinstance(node, Window):
            return self.frame(node.input).with_columns(node.polars_exprs())
        if isinstance(node, (SetOperation, GroupingSets)):  # SQL constructs: their meaning is their lowering
            return self.frame(lower(node))
        raise ConfigError(f"to_polars() cannot translate {node.label()}")

    def _aggregate(self, node: Aggregate) -> pl.LazyFrame:
        child = self.frame(node.input)
        if self.partials <= 0:
            aggs = [self.expr(a) for a in node.aggs]
            keys = [self.expr(k) for k in node.keys]
            if not keys:
                return child.select(aggs)
            return child.group_by(keys, maintain_order=True).agg(aggs)
        lowered = node.lower()
        frame = _apply(child, lowered.pre)
        if lowered.partial is not None:
            chunk = hidden_prefix(lowered.partial.keys, "__chunk")
            frame = frame.with_row_index(chunk).with_columns(pl.col(chunk) % self.partials)
            keys = list(lowered.partial.keys) + [chunk]
            frame = frame.group_by(keys, maintain_order=True).agg([a.to_polars() for a in lowered.partial.aggs]).drop(chunk)
        for op in lowered.final:
            frame = _apply(frame, op)
        return frame


def _apply(frame: pl.LazyFrame, op: Operator) -> pl.LazyFrame:
    """One step of a lowered aggregation, lazily."""
    if isinstance(op, Select):
        return frame.select([e.to_polars() for e in op.exprs])
    if isinstance(op, WithColumns):
        return frame.with_columns([e.to_polars() for e in op.exprs])
    if isinstance(op, AggregateOp):
        exprs = [a.to_polars() for a in op.aggs]
        if not op.keys:
            return frame.select(exprs)
        if not exprs:
            return frame.select(list(op.keys)).unique(maintain_order=True)
        return frame.group_by(list(op.keys), maintain_order=True).agg(exprs)
    raise ConfigError(f"to_polars() cannot translate the aggregation step {op.describe()}")


def _scan(node: Scan) -> pl.LazyFrame:
    if not parse_location(node.spec.url).is_local:
        raise ConfigError(f"to_polars() reads local files only, not {node.spec.url}")
    if node.spec.format == "gensort":
        raise ConfigError("to_polars() cannot read gensort files")
    config = Config()
    base, objects = resolve(node.spec.url, lambda url: open_store(url, config))
    files = [parse_location(base).join(o.key).path for o in objects]
    csv = node.spec.csv
    if node.spec.format == "parquet":
        scan = pl.scan_parquet(files)
    else:
        scan = pl.scan_csv(files, separator=csv.separator, has_header=csv.has_header, null_values=list(csv.null_values) or None)
    if node.spec.predicate is not None:
        scan = scan.filter(node.spec.predicate.to_polars())
    return scan.select(list(node.schema))
