"""Lowering: rewrite any logical plan into the core nodes physical planning runs.

The core nodes and their meaning are listed in :mod:`croupier.plan.logical`. Each rewrite below
keeps the result exactly equal to Polars' result for the plan as written (values, nulls, dtypes,
names, column order):

1. **Aggregations over the whole frame in** ``select`` / ``with_columns`` / ``filter``.
   ``select`` of scalars only (aggregations, literals, scalar subqueries: Polars gives one row)
   becomes ``Aggregate(keys=())`` followed by a ``select`` over its one row (of literals only:
   a ``select`` over ``Limit(input, 0)``, which one task gathers). Anywhere else an
   aggregation is broadcast to the frame's height: ``Aggregate(keys=())`` of the distinct
   aggregations, cross-joined back onto the rows (the input is one shared node, read twice),
   then the expressions read the aggregated columns::

       input ──────────────┬──> cross join ──> select/with_columns/filter ──> (drop helpers)
         └─> Aggregate () ─┘

2. **Windows** (``over``, and rank/cum_sum/shift/int_range without ``over``, which use the
   whole frame): each window becomes a column of a ``Window`` node (one node per distinct
   partition/order specification, innermost windows first; computed partition or order keys are
   materialised as helper columns first); the expression then reads that column.
3. **Subqueries in expressions.** ``x.is_in(frame)`` as a conjunct of a filter becomes a semi join
   (``~x.is_in(frame)``: an anti join plus ``x is not null``, since a null ``x`` gives null in
   Polars), keeping the filter input's row order (``maintain_order="left"``: the physical
   planner puts shuffled rows back in that order where it shows; SQL's IN keeps none); elsewhere
   a left join with the distinct values of ``frame`` and a marker column, keeping the input's
   order too: null where ``x`` is null, else whether the marker matched. ``scalar(frame)`` becomes a cross
   join with ``Aggregate(keys=())`` of ``max`` of its column: one row, null when ``frame`` is empty.
4. **INTERSECT / EXCEPT** (``SetOperation``): both inputs tagged 1 and 2, concatenated, grouped by
   every column (groups treat nulls as equal, as SQL set operations do), and kept where
   min(tag)=1 and max(tag)=2 (intersect) or max(tag)=1 (except). The ALL forms first number
   duplicates per input (a window partitioned by every column), so the n-th copy of a row pairs
   with the n-th copy on the other side.
5. **GROUPING SETS / ROLLUP / CUBE** (``GroupingSets``): one ``Aggregate`` per set over the one
   shared input, keys outside the set as typed nulls plus the GROUPING() bits as literals,
   stacked with ``Union``.
6. **Sort by aggregations or windows**: the keys are computed as helper columns first.

Helper columns are named ``__l<n>`` and dropped again before the rewritten node's parent sees
its output. Rewrites are memoised by node identity: a node used twice stays one object.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import polars as pl

from croupier.errors import ConfigError
from croupier.expr import (
    Agg,
    Col,
    Expr,
    Func,
    IsInFrame,
    Lit,
    Over,
    ScalarFrame,
    Unary,
    conjoin,
    conjuncts,
    extract,
    identity,
    int_range,
    walk,
    when,
)
from croupier.plan.logical import (
    CORE_NODES,
    Aggregate,
    Distinct,
    Filter,
    GroupingSets,
    Join,
    Limit,
    Node,
    Project,
    SetOperation,
    Sort,
    Union,
    Window,
)


def lower(root: Node) -> Node:
    """``root`` rewritten into core nodes only (see the module docstring); shared nodes stay shared."""
    return _Lowering().node(root)


def is_core(root: Node) -> bool:
    """True when every node of the plan is a core node with expressions within its contract."""
    from croupier.plan.logical import walk as walk_nodes

    for n in walk_nodes(root):
        if not isinstance(n, CORE_NODES):
            return False
        exprs: tuple[Expr, ...] = ()
        if isinstance(n, Filter):
            exprs = (n.predicate,)
        elif isinstance(n, Project):
            exprs = n.exprs
        elif isinstance(n, Sort):
            exprs = n.by
        if any(e.has_agg() or e.has_window() or e.has_subquery() for e in exprs):
            return False
        if isinstance(n, Window) and any(isinstance(x, Over) for e in n.exprs for x in walk(e)):
            return False
    return True


def _needs_lowering(e: Expr) -> bool:
    return e.has_agg() or e.has_window() or e.has_subquery()


class _Lowering:
    """One lowering run: the memo of rewritten nodes and the helper-column counter."""

    def __init__(self) -> None:
        self.memo: dict[int, Node] = {}
        self.keep: list[Node] = []  # originals stay alive, so their ids are not reused
        self.ids = itertools.count()

    def hidden(self, schema: pl.Schema) -> str:
        while True:
            name = f"__l{next(self.ids)}"
            if name not in schema:
                return name

    # --- nodes -------------------------------------------------------------------------------
    def node(self, n: Node) -> Node:
        key = id(n)
        if key not in self.memo:
            children = tuple(self.node(c) for c in n.children())
            if any(a is not b for a, b in zip(children, n.children())):
                rebuilt = n.with_children(children)
            else:
                rebuilt = n
            self.keep.append(n)
            self.memo[key] = self.rewrite(rebuilt, n.schema)
        return self.memo[key]

    def rewrite(self, n: Node, schema: pl.Schema) -> Node:
        constants = isinstance(n, Project) and n.kind == "select" and n.exprs and all(e.is_scalar() and not e.has_agg() and not _needs_lowering(e) for e in n.exprs)
        if constants and not isinstance(n.input, Limit):
            # constants only: one row whatever the input holds (Polars), not one per task
            return Project(Limit(n.input, 0), n.exprs, "select")  # type: ignore[union-attr]
        if isinstance(n, Project) and any(_needs_lowering(e) for e in n.exprs):
            return self.project(n.input, n.exprs, n.kind, schema)
        if isinstance(n, Filter) and _needs_lowering(n.predicate):
            return self.filter(n.input, n.predicate)
        if isinstance(n, Sort) and any(_needs_lowering(e) for e in n.by):
            return self.sort(n)
        if isinstance(n, SetOperation):
            return self.set_operation(n)
        if isinstance(n, GroupingSets):
            return self.grouping_sets(n)
        return n

    def project(self, node: Node, exprs: tuple[Expr, ...], kind: str, schema: pl.Schema) -> Node:
        if kind == "select" and all(e.is_scalar() for e in exprs):
            return self.scalar_select(node, exprs)
        source = node
        node, exprs = self.expressions(node, exprs)
        out: Node = Project(node, exprs, kind)
        if kind == "with_columns" and node is not source:
            out = Project(out, tuple(Col(c) for c in schema), "select")
        return out

    def scalar_select(self, node: Node, exprs: tuple[Expr, ...]) -> Node:
        """A select of scalars only: one row, from an aggregation without keys."""
        parts: dict[Any, tuple[str, Expr]] = {}

        def name_for(e: Expr) -> str:
            return parts.setdefault(identity(e), (self.hidden(node.schema), e))[0]

        rewritten = _renamed(tuple(extract(e, lambda x: isinstance(x, Agg), name_for) for e in exprs), [_name(e) for e in exprs])
        aggs = tuple(e.alias(name) for name, e in parts.values()) or (Agg("len", None).alias(self.hidden(node.schema)),)
        one_row = Aggregate(node, (), aggs)
        if any(_needs_lowering(e) for e in rewritten):  # scalar subqueries: joined onto the one row
            node, rewritten = self.expressions(one_row, rewritten)
            return Project(node, rewritten, "select")
        return Project(one_row, rewritten, "select")

    def filter(self, node: Node, predicate: Expr) -> Node:
        columns = tuple(Col(c) for c in node.schema)
        keep: list[Expr] = []
        for part in conjuncts(predicate):
            joined = self.semi_or_anti(node, part)
            if joined is not None:
                node = joined
            else:
                keep.append(part)
        if not keep:
            return node
        source = node
        node, exprs = self.expressions(node, (conjoin(keep),))  # type: ignore[arg-type]
        out: Node = Filter(node, exprs[0])
        return out if node is source else Project(out, columns, "select")

    def sort(self, n: Sort) -> Node:
        names = tuple(self.hidden(n.input.schema) for _ in n.by)
        keyed = self.project(n.input, tuple(e.alias(h) for e, h in zip(n.by, names)), "with_columns", pl.Schema())
        ordered = Sort(keyed, tuple(Col(h) for h in names), n.descending, n.nulls_last)
        return Project(ordered, tuple(Col(c) for c in n.schema), "select")

    # --- expressions: subqueries, then windows, then aggregations over the whole frame ---------
    def expressions(self, node: Node, exprs: tuple[Expr, ...]) -> tuple[Node, tuple[Expr, ...]]:
        """Add the columns ``exprs`` need beyond row-wise work to ``node``; ``exprs`` rewritten to
        read them, each keeping its output name."""
        names = [_name(e) for e in exprs]
        if any(e.has_subquery() for e in exprs):
            node, exprs = self.subqueries(node, exprs)
        while any(e.has_window() for e in exprs):
            node, exprs = self.windows(node, exprs)
        if any(e.has_agg() for e in exprs):
            node, exprs = self.broadcast_aggs(node, exprs)
        return node, _renamed(exprs, names)

    def subqueries(self, node: Node, exprs: tuple[Expr, ...]) -> tuple[Node, tuple[Expr, ...]]:
        out: list[Expr] = []
        for e in exprs:
            found = [x for x in walk(e) if isinstance(x, (IsInFrame, ScalarFrame))]
            for sub in found:
                node, column = self.subquery_column(node, sub)
                e = extract(e, lambda x, s=sub: x is s, lambda x, c=column: c)  # type: ignore[misc]
            out.append(e)
        return node, tuple(out)

    def subquery_column(self, node: Node, sub: Expr) -> tuple[Node, str]:
        """Join ``node`` with what ``sub`` reads; the name of the column holding its value."""
        if isinstance(sub, ScalarFrame):
            frame = self.node(sub.frame)
            value = self.hidden(node.schema)
            one = Aggregate(frame, (), (Col(next(iter(frame.schema))).max().alias(value),))
            return Join(node, one, (), (), "cross"), value
        assert isinstance(sub, IsInFrame)
        if sub.nulls_equal:
            raise ConfigError("is_in(frame, nulls_equal=True) is not supported; test is_null() separately")
        node, key = self.materialise(node, sub.operand)
        values, marker = self.hidden(node.schema), self.hidden(node.schema)
        frame = self.node(sub.frame)
        dtype = node.schema[key]
        right = Distinct(Project(frame, (Col(next(iter(frame.schema))).cast(dtype, strict=False).alias(values), Lit(True).alias(marker)), "select"))
        joined: Node = Join(node, right, (key,), (values,), "left", maintain_order=_order_of(sub))  # one row per row
        result = self.hidden(joined.schema)
        if sub.sql:  # a match: True; an empty subquery: False; a NULL operand, or a NULL among the values: NULL
            joined, rows, nulls = self.frame_counts(joined, frame)
            unknown = Col(key).is_null() | (Col(nulls) > 0)
            flag = when(Col(marker).is_not_null()).then(Lit(True)).otherwise(when((Col(rows) > 0) & unknown).then(Lit(None, pl.Boolean)).otherwise(Lit(False))).alias(result)
        else:
            flag = when(Col(key).is_null()).then(Lit(None, pl.Boolean)).otherwise(Col(marker).is_not_null()).alias(result)
        return Project(joined, (flag,), "with_columns"), result

    def frame_counts(self, node: Node, frame: Node) -> tuple[Node, str, str]:
        """``node`` with two more columns, the same on every row: how many rows ``frame`` has, and
        how many NULLs its (first) column holds; their names."""
        rows, values, nulls = self.hidden(node.schema), self.hidden(node.schema), self.hidden(node.schema)  # distinct: a counter names them
        column = Col(next(iter(frame.schema)))
        counts = Aggregate(frame, (), (Agg("len", None).cast(pl.Int64).alias(rows), column.count().cast(pl.Int64).alias(values)))
        counts = Project(counts, (Col(rows), (Col(rows) - Col(values)).alias(nulls)), "select")
        return Join(node, counts, (), (), "cross"), rows, nulls

    def semi_or_anti(self, node: Node, part: Expr) -> Node | None:
        """``x.is_in(frame)`` (semi join) or ``~x.is_in(frame)`` (anti join, x not null) as a join."""
        negated = isinstance(part, Unary) and part.op == "not"
        inner = part.operand if negated else part  # type: ignore[attr-defined]
        if not isinstance(inner, IsInFrame) or inner.nulls_equal or inner.operand.has_subquery() or _needs_lowering(inner.operand):
            return None
        columns = tuple(Col(c) for c in node.schema)
        keyed, key = self.materialise(node, inner.operand)
        frame = self.node(inner.frame)
        values = self.hidden(keyed.schema)
        right = Project(frame, (Col(next(iter(frame.schema))).cast(keyed.schema[key], strict=False).alias(values),), "select")
        out: Node = Join(keyed, right, (key,), (values,), "anti" if negated else "semi", maintain_order=_order_of(inner))  # as the filter it stands for
        if negated and inner.sql:  # SQL's NOT IN: true only for a non-NULL operand among no NULLs, or for no values at all
            out, rows, nulls = self.frame_counts(out, frame)
            out = Filter(out, (Col(rows) == 0) | (Col(key).is_not_null() & (Col(nulls) == 0)))
            return Project(out, columns, "select")
        if negated:
            out = Filter(out, Col(key).is_not_null())
        return out if keyed is node else Project(out, columns, "select")

    def materialise(self, node: Node, e: Expr) -> tuple[Node, str]:
        """``node`` with ``e`` as a column (itself when ``e`` is a column); the column's name."""
        if isinstance(e, Col):
            return node, e.name
        name = self.hidden(node.schema)
        return Project(node, (e.alias(name),), "with_columns"), name

    def windows(self, node: Node, exprs: tuple[Expr, ...]) -> tuple[Node, tuple[Expr, ...]]:
        """Compute the innermost windows of ``exprs`` in Window nodes (one per specification)."""
        units: dict[Any, tuple[str, Expr]] = {}

        def innermost(x: Expr) -> bool:
            if isinstance(x, Over):
                return not any(isinstance(y, Over) for c in x.children() for y in walk(c))
            if isinstance(x, Func) and x.is_window_function():
                return not any(isinstance(y, Over) or (isinstance(y, Func) and y.is_window_function()) for c in x.children() for y in walk(c))
            return False

        def name_for(x: Expr) -> str:
            return units.setdefault(identity(x), (self.hidden(node.schema), x))[0]

        rewritten = tuple(extract(e, innermost, name_for) for e in exprs)
        specs: dict[Any, list[tuple[str, Expr]]] = {}
        for name, x in units.values():
            specs.setdefault(_spec_key(x), []).append((name, x))
        for group in specs.values():
            node = self.window_node(node, group)
        return node, rewritten

    def window_node(self, node: Node, group: list[tuple[str, Expr]]) -> Node:
        first = group[0][1]
        if isinstance(first, Over):
            node, keys = self.materialise_all(node, first.partition_by)
            node, order = self.materialise_all(node, first.order_by)
            exprs = tuple(x.operand.alias(name) for name, x in group)  # type: ignore[attr-defined]
            return Window(node, keys, order, first.descending, first.nulls_last, exprs)
        return Window(node, (), (), False, False, tuple(x.alias(name) for name, x in group))

    def materialise_all(self, node: Node, exprs: tuple[Expr, ...]) -> tuple[Node, tuple[str, ...]]:
        names = []
        for e in exprs:
            node, name = self.materialise(node, e)
            names.append(name)
        return node, tuple(names)

    def broadcast_aggs(self, node: Node, exprs: tuple[Expr, ...]) -> tuple[Node, tuple[Expr, ...]]:
        """Aggregate the whole frame once and cross-join the one row back onto every row."""
        parts: dict[Any, tuple[str, Expr]] = {}

        def name_for(e: Expr) -> str:
            return parts.setdefault(identity(e), (self.hidden(node.schema), e))[0]

        rewritten = tuple(extract(e, lambda x: isinstance(x, Agg), name_for) for e in exprs)
        one = Aggregate(node, (), tuple(e.alias(name) for name, e in parts.values()))
        return Join(node, one, (), (), "cross"), rewritten

    # --- set operations and grouping sets --------------------------------------------------------
    def set_operation(self, n: SetOperation) -> Node:
        names = list(n.schema)
        left, right = n.left, n.right
        if not n.distinct:
            copy = self.hidden(left.schema)
            left, right = self.number_copies(left, copy), self.number_copies(right, copy)
        cols = list(left.schema)
        tag = self.hidden(left.schema)
        tagged = Union(tuple(Project(side, tuple(Col(c) for c in cols) + (Lit(i, pl.Int8).alias(tag),), "select") for i, side in ((1, left), (2, right))))
        lo, hi = self.hidden(tagged.schema), self.hidden(tagged.schema)
        grouped = Aggregate(tagged, tuple(Col(c) for c in cols), (Col(tag).min().alias(lo), Col(tag).max().alias(hi)))
        keep = ((Col(lo) == 1) & (Col(hi) == 2)) if n.kind == "intersect" else (Col(hi) == 1)
        return Project(Filter(grouped, keep), tuple(Col(c) for c in names), "select")

    def number_copies(self, node: Node, name: str) -> Node:
        """``node`` plus a column ``name`` numbering the copies of each distinct row 1, 2, ..."""
        return Window(node, tuple(node.schema), (), False, False, (int_range(1, Agg("len", None) + 1).alias(name),))

    def grouping_sets(self, n: GroupingSets) -> Node:
        names = list(n.schema)
        k = len(n.keys)
        key_names = names[:k]
        parts = []
        for members in n.sets:
            agg = Aggregate(n.input, tuple(n.keys[i] for i in members), n.aggs)
            keys: list[Expr] = [Col(key_names[i]) if i in members else Lit(None, n.schema[key_names[i]]).alias(key_names[i]) for i in range(k)]
            bits = [Lit(_grouping_bits(positions, members), pl.Int64).alias(name) for name, positions in n.grouping]
            aggs = [Col(c) for c in names[k + len(n.grouping) :]]
            parts.append(Project(agg, tuple(keys + bits + aggs), "select"))
        return Union(tuple(parts))


def _name(e: Expr) -> str | None:
    """The output name of ``e``, None when it has none (a filter predicate may not)."""
    try:
        return e.output_name()
    except ConfigError:
        return None


def _renamed(exprs: tuple[Expr, ...], names: list[str | None]) -> tuple[Expr, ...]:
    """``exprs`` aliased back to ``names`` where a rewrite changed their output name."""
    out = []
    for e, name in zip(exprs, names):
        out.append(e if name is None or _name(e) == name else e.alias(name))
    return tuple(out)


def _grouping_bits(positions: tuple[int, ...], members: tuple[int, ...]) -> int:
    """SQL GROUPING(k1, k2, ...): bit set (first key highest) where the key is aggregated away."""
    value = 0
    for p in positions:
        value = (value << 1) | (0 if p in members else 1)
    return value


def _spec_key(x: Expr) -> Any:
    if isinstance(x, Over):
        return identity((x.partition_by, x.order_by, x.descending, x.nulls_last))
    return "<frame>"


Rewrite = Callable[[Node], Node]


def _order_of(sub: IsInFrame) -> str:
    """The row order the join an ``is_in(frame)`` becomes keeps: its input's, as Polars' filter
    and with_columns keep it; none for SQL's ``IN (subquery)``, whose rows come in no order
    unless an ORDER BY says so (DuckDB's neither), so that a shuffled join is not sorted back."""
    return "none" if sub.sql else "left"
