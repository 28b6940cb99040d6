"""The logical plan: what a query computes, as a graph of immutable nodes with known schemas.

Every node knows its output schema, computed by running the node's Polars equivalent on empty
frames, so a plan that would fail on types fails when it is built, not on a worker.

Core nodes
----------
The optimiser (:func:`croupier.plan.optimize.optimize`) rewrites every plan into these nodes
only (:func:`croupier.plan.lower.lower`); they are what physical planning must run. Each one
*means* exactly the Polars call given, on the Polars frames of its inputs:

=============  ===========================================================================
``Scan``        ``pl.scan_parquet/scan_csv(files).filter(spec.predicate).select(spec.columns)``
``Filter``      ``input.filter(predicate)``; the predicate is row-wise (no aggregation, window
                or subquery)
``Project``     ``input.select(exprs)`` / ``input.with_columns(exprs)``; every expression is
                row-wise, so the node runs on any split of the rows
``Aggregate``   ``input.group_by(keys, maintain_order=True).agg(aggs)``; with no keys
                ``input.select(aggs)``: exactly one row, even on empty input. An aggregation
                may be an expression over aggregations (``sum(a) / sum(b)``); see
                :meth:`Aggregate.lower` for how it runs in partial and final steps
``Join``        ``left.join(right, left_on, right_on, how, suffix, coalesce, maintain_order)``
                for ``how`` in inner, left, right, full, semi, anti, and
                ``left.join(right, how="cross")`` (rows in the left input's order).
                Keys are column names of types Polars joins (equal, or integers of
                any width); a null key matches nothing, or, ``nulls_equal``, a null key.
                ``maintain_order`` "left" (inner, left, semi, anti): rows in the left
                input's order, as the filter an ``is_in`` subquery comes from keeps them
``Sort``        ``input.sort(by, descending, nulls_last, maintain_order=True)``; ``nulls_last``
                is one flag or one per key
``Limit``       ``input.slice(offset, n)`` (``head(n)`` when offset is 0; ``tail(n)`` from the end)
``Distinct``    ``input.unique(maintain_order=True)`` (whole rows)
``Union``       ``pl.concat(inputs, how="vertical")``: inputs of equal schemas, in input order
``Window``      ``input.with_columns([e.over(partition_by, order_by=order_by, descending,
                nulls_last) for e in exprs])``; without partition keys the whole frame is one
                partition (``e.over(order_by=...)``, or just ``e`` without order keys)
``Tagged``      ``input.with_columns(pl.int_range(pl.len()).alias(name))``: a column that
                orders the rows as they come (the engine's values are not consecutive)
=============  ===========================================================================

Other nodes (``SetOperation``, ``GroupingSets``) and expressions outside a node's contract
(aggregations in ``select``, windows, subqueries) are rewritten into core nodes by
:mod:`croupier.plan.lower` before physical planning.

Sharing
-------
A node object used twice (a CTE read twice, the input of a global aggregate broadcast back onto
its own rows) is one object in the plan: a DAG, not a tree. Rewrites keep it one object, so the
physical planner can compute it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import polars as pl

from croupier.dag.operators import HashJoin, Operator, Select, WithColumns
from croupier.dag.scan import ScanSpec, projected
from croupier.errors import ConfigError
from croupier.expr import Col, Expr, IsInFrame, Lit, ScalarFrame, transform
from croupier.plan.inference import empty, infer_cached
from croupier.plan.partial import LoweredAgg, agg_output_names, lower_aggregate, validate_aggs

JOIN_HOWS = ("inner", "left", "right", "full", "semi", "anti", "cross")
#: The row orders a join may be asked to keep (Polars' ``maintain_order``; the engine keeps none
#: or the left input's).
MAINTAIN_ORDERS = ("none", "left")


def for_schema(expr: Expr) -> Expr:
    """``expr`` with subqueries replaced by stand-ins of the same type (for schema inference)."""

    def stand_in(e: Expr) -> Expr:
        if isinstance(e, IsInFrame):
            return e.operand.is_null() & Lit(True)
        if isinstance(e, ScalarFrame):
            return Lit(None, next(iter(e.frame.schema.values())))
        return e

    return transform(expr, stand_in) if expr.has_subquery() else expr


def polars_exprs(exprs: Iterable[Expr]) -> list[pl.Expr]:
    return [for_schema(e).to_polars() for e in exprs]


def _check_columns(what: str, exprs: Iterable[Expr], schema: pl.Schema) -> None:
    missing = set().union(*(e.columns() for e in exprs)) - set(schema)
    if missing:
        raise ConfigError(f"{what} reads unknown column(s) {sorted(missing)}; columns are {list(schema)}")


class Node:
    """A logical plan node. ``schema`` is its output schema."""

    schema: pl.Schema

    def children(self) -> tuple[Node, ...]:
        return ()

    def with_children(self, children: tuple[Node, ...]) -> Node:
        """A copy of this node reading ``children`` (same order as :meth:`children`)."""
        return self

    def label(self) -> str:  # pragma: no cover - every node overrides it
        raise NotImplementedError

    def tree(self, indent: int = 0, seen: dict[int, int] | None = None) -> str:
        """The plan below this node, one node per line; a shared node is printed once and then
        referred to by its number."""
        seen = {} if seen is None else seen
        pad = "  " * indent
        if id(self) in seen:
            return f"{pad}<shared #{seen[id(self)]}: {self.label()}>"
        if self.shared_hint:
            seen[id(self)] = len(seen) + 1
        mark = f"#{seen[id(self)]} " if id(self) in seen else ""
        lines = [pad + mark + self.label()]
        for child in self.children():
            lines.append(child.tree(indent + 1, seen))
        return "\n".join(lines)

    shared_hint: bool = False


def walk(node: Node) -> Iterator[Node]:
    """Every node of the plan below ``node`` once (shared nodes once), parents first."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        stack.extend(reversed(n.children()))


def mark_shared(root: Node) -> Node:
    """Flag the nodes used by more than one parent (for explain output); returns ``root``."""
    uses: dict[int, int] = {}
    for n in walk(root):
        for c in n.children():
            uses[id(c)] = uses.get(id(c), 0) + 1
    for n in walk(root):
        n.shared_hint = uses.get(id(n), 0) > 1
    return root


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
        _check_columns(f"filter {self.predicate.show()}", [self.predicate], self.input.schema)
        pred = polars_exprs([self.predicate])[0]
        self.schema = infer_cached(f"filter {self.predicate.show()}", lambda: empty(self.input.schema).filter(pred), "filter", (self.input.schema,), (pred,))

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return Filter(children[0], self.predicate)

    def label(self) -> str:
        return f"filter {self.predicate.show()}"


@dataclass(eq=False)
class Project(Node):
    """select (exactly these columns) or with_columns (add/replace)."""

    input: Node
    exprs: tuple[Expr, ...]
    kind: str = "select"

    def __post_init__(self) -> None:
        if self.kind not in ("select", "with_columns"):
            raise ConfigError(f"projection kind must be select or with_columns, got {self.kind!r}")
        _check_columns(self.kind, self.exprs, self.input.schema)
        exprs = polars_exprs(self.exprs)
        frame = empty(self.input.schema)
        run = (lambda: frame.select(exprs)) if self.kind == "select" else (lambda: frame.with_columns(exprs))
        self.schema = infer_cached(self.label(), run, self.kind, (self.input.schema,), exprs)

    def operator(self) -> Operator:
        return Select(self.exprs) if self.kind == "select" else WithColumns(self.exprs)

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return Project(children[0], self.exprs, self.kind)

    def label(self) -> str:
        return f"{self.kind} " + ", ".join(e.show() for e in self.exprs)


@dataclass(eq=False)
class Aggregate(Node):
    """Group by ``keys`` (expressions) and compute ``aggs`` (each an aggregation, or an
    expression over aggregations and literals); without keys one row for the whole input."""

    input: Node
    keys: tuple[Expr, ...]
    aggs: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if not self.keys and not self.aggs:
            raise ConfigError("group_by().agg() needs at least one key or one aggregation")
        _check_columns("group_by/agg", self.keys + self.aggs, self.input.schema)
        validate_aggs(self.keys, self.aggs)
        names = list(self.key_names()) + agg_output_names(self.aggs)
        if len(set(names)) != len(names):
            raise ConfigError(f"group_by/agg output names must be unique, got {names}; use .alias(...)")
        self.schema = self.direct_schema()
        self.lower()  # fails now, not on a worker, if the plan cannot be split

    def direct_schema(self) -> pl.Schema:
        """Polars' own result schema for this aggregation."""
        frame = empty(self.input.schema)
        keys, aggs = polars_exprs(self.keys), polars_exprs(self.aggs)
        if not keys:
            return infer_cached(self.label(), lambda: frame.select(aggs), "aggregate", (self.input.schema,), aggs)
        return infer_cached(self.label(), lambda: frame.group_by(keys, maintain_order=True).agg(aggs), "group_by", (self.input.schema,), keys + aggs, (len(keys),))

    def key_names(self) -> tuple[str, ...]:
        return tuple(k.output_name() for k in self.keys)

    def lower(self) -> LoweredAgg:
        """The aggregation as stages run it: a pre-projection, a partial aggregation before the
        exchange (None when some aggregation cannot be split), and final steps after it. See
        :mod:`croupier.plan.partial` for the rules."""
        return lower_aggregate(self.input.schema, self.keys, self.aggs, self.schema)

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return Aggregate(children[0], self.keys, self.aggs)

    def label(self) -> str:
        return f"aggregate by [{', '.join(k.show() for k in self.keys)}]: {', '.join(a.show() for a in self.aggs)}"


@dataclass(eq=False)
class Join(Node):
    """``left.join(right, ...)``; ``coalesce`` None means Polars' default (True except for full);
    ``nulls_equal``: a null key matches a null key (else it matches nothing); ``maintain_order``
    as Polars' ("none": any row order; "left": the left input's, which the physical planner keeps
    where it shows, :func:`croupier.plan.compile.order_seen`)."""

    left: Node
    right: Node
    left_on: tuple[str, ...]
    right_on: tuple[str, ...]
    how: str = "inner"
    suffix: str = "_right"
    coalesce: bool | None = None
    nulls_equal: bool = False
    maintain_order: str = "none"

    def __post_init__(self) -> None:
        if self.how not in JOIN_HOWS:
            raise ConfigError(f"join how must be one of {JOIN_HOWS}, got {self.how!r}")
        self._check_maintain_order()
        if self.how == "cross":
            if self.left_on or self.right_on:
                raise ConfigError("a cross join takes no keys")
        elif len(self.left_on) != len(self.right_on) or not self.left_on:
            raise ConfigError(f"join needs the same number of keys on both sides, got {self.left_on} and {self.right_on}")
        for side, keys, schema in (("left", self.left_on, self.left.schema), ("right", self.right_on, self.right.schema)):
            missing = set(keys) - set(schema)
            if missing:
                raise ConfigError(f"join: {side} side has no column(s) {sorted(missing)}; its columns are {list(schema)}")
        how = (self.left_on, self.right_on, self.how, self.suffix, self.coalesce, self.nulls_equal, self.maintain_order)
        self.schema = infer_cached("join", lambda: self.to_polars(empty(self.left.schema).lazy(), empty(self.right.schema).lazy()).collect(), "join", (self.left.schema, self.right.schema), (), how)

    def to_polars(self, left: pl.LazyFrame, right: pl.LazyFrame) -> pl.LazyFrame:
        """This join in Polars, of the Polars frames of its inputs."""
        if self.how == "cross":
            return left.join(right, how="cross", suffix=self.suffix)
        return left.join(right, left_on=list(self.left_on), right_on=list(self.right_on), how=self.how, suffix=self.suffix, coalesce=self.coalesce, nulls_equal=self.nulls_equal, maintain_order=self.maintain_order)  # type: ignore[arg-type]

    def _check_maintain_order(self) -> None:
        """Refuse an order the engine cannot keep: the left input's is kept only where the left
        side is the stream the build side is joined to (inner, left, semi and anti joins)."""
        if self.maintain_order not in MAINTAIN_ORDERS:
            raise ConfigError(f"join maintain_order must be one of {MAINTAIN_ORDERS}, got {self.maintain_order!r}")
        if self.maintain_order == "left" and self.how not in ("inner", "left", "semi", "anti"):
            raise ConfigError(f"join maintain_order='left' is supported for inner, left, semi and anti joins, not {self.how!r}; sort the result instead")

    def keeps_left_order(self) -> bool:
        """Whether the join's rows come in its left input's order: a cross join's always (each
        left row paired with every right one, as Polars pairs them), others' when asked to."""
        return self.how == "cross" or self.maintain_order == "left"

    def operator(self, side: str, keep_order: bool = False) -> HashJoin:
        """The operator joining a task's (left) rows with the side input ``side``; in their order
        only with ``keep_order`` (the planner asks for it where this join keeps its left order and
        that order shows: Polars' left join of 3M rows with 3,000 keys took 0.14 s keeping
        it, 0.05 s not)."""
        return HashJoin(side, self.left_on, self.right_on, self.how, self.suffix, self.coalesce, self.nulls_equal, "left" if keep_order else "none")

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return Join(children[0], children[1], self.left_on, self.right_on, self.how, self.suffix, self.coalesce, self.nulls_equal, self.maintain_order)

    def label(self) -> str:
        if self.how == "cross":
            return "cross join"
        on = ", ".join(f"{a}={b}" for a, b in zip(self.left_on, self.right_on))
        order = "" if self.maintain_order == "none" else f" in {self.maintain_order} order"
        return f"{self.how} join on {on}" + ("" if self.coalesce is None else f" coalesce={self.coalesce}") + (" nulls equal" if self.nulls_equal else "") + order


@dataclass(eq=False)
class Sort(Node):
    input: Node
    by: tuple[Expr, ...]
    descending: tuple[bool, ...]
    nulls_last: bool | tuple[bool, ...] = False

    def __post_init__(self) -> None:
        if len(self.descending) != len(self.by):
            raise ConfigError(f"sort got {len(self.by)} keys but {len(self.descending)} descending flags")
        if isinstance(self.nulls_last, tuple):
            if len(self.nulls_last) != len(self.by):
                raise ConfigError(f"sort got {len(self.by)} keys but {len(self.nulls_last)} nulls_last flags")
            if len(set(self.nulls_last)) == 1:  # one flag for all keys: kept as a plain bool
                self.nulls_last = self.nulls_last[0]
        _check_columns("sort", self.by, self.input.schema)
        by = polars_exprs(self.by)
        flags = (tuple(self.descending), tuple(self.nulls_flags()))
        self.schema = infer_cached("sort", lambda: empty(self.input.schema).sort(by, descending=list(self.descending), nulls_last=self.nulls_flags()), "sort", (self.input.schema,), by, flags)

    def nulls_flags(self) -> list[bool]:
        """One nulls_last flag per key."""
        return list(self.nulls_last) if isinstance(self.nulls_last, tuple) else [self.nulls_last] * len(self.by)

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return Sort(children[0], self.by, self.descending, self.nulls_last)

    def label(self) -> str:
        flags = self.nulls_flags()
        return "sort by " + ", ".join(f"{e.show()}{' desc' if d else ''}{' nulls last' if n else ''}" for e, d, n in zip(self.by, self.descending, flags))


@dataclass(eq=False)
class Limit(Node):
    """The rows ``offset`` to ``offset + n`` (Polars ``slice``); ``from_end``: the last ``n``
    (Polars ``tail``; no offset)."""

    input: Node
    n: int
    offset: int = 0
    from_end: bool = False

    def __post_init__(self) -> None:
        if self.n < 0 or self.offset < 0:
            raise ConfigError(f"head/limit needs n >= 0 and offset >= 0, got {self.n} and {self.offset}")
        if self.from_end and self.offset:
            raise ConfigError("a limit from the end (tail) takes no offset")
        self.schema = self.input.schema

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return Limit(children[0], self.n, self.offset, self.from_end)

    def label(self) -> str:
        if self.from_end:
            return f"last {self.n}"
        return f"limit {self.n}" + (f" offset {self.offset}" if self.offset else "")


@dataclass(eq=False)
class Distinct(Node):
    input: Node

    def __post_init__(self) -> None:
        self.schema = self.input.schema

    def as_aggregate(self) -> Aggregate:
        return Aggregate(self.input, tuple(Col(c) for c in self.schema), ())

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return Distinct(children[0])

    def label(self) -> str:
        return "distinct"


@dataclass(eq=False)
class Union(Node):
    """The rows of every input, input after input (inputs of one schema)."""

    inputs: tuple[Node, ...]

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ConfigError("concat needs at least one frame")
        first = self.inputs[0].schema
        for i, node in enumerate(self.inputs[1:], 1):
            if node.schema != first:
                raise ConfigError(f"concat: frame {i} has schema {dict(node.schema)}, frame 0 has {dict(first)}; select and cast to match")
        self.schema = first

    def children(self) -> tuple[Node, ...]:
        return self.inputs

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return Union(tuple(children))

    def label(self) -> str:
        return f"union of {len(self.inputs)}"


@dataclass(eq=False)
class Window(Node):
    """Window expressions over partitions: every task holding whole partitions (all rows with
    equal ``partition_by`` values) computes ``exprs`` with plain Polars (:meth:`polars_exprs`).

    ``exprs`` are aliased and contain no ``over``; ``partition_by`` and ``order_by`` are column
    names. The output keeps every input column (replaced in place when an expression has its
    name) and appends the new ones, as ``with_columns``.
    """

    input: Node
    partition_by: tuple[str, ...]
    order_by: tuple[str, ...]
    descending: bool
    nulls_last: bool
    exprs: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if not self.exprs:
            raise ConfigError("a window node needs at least one expression")
        _check_columns("window", [Col(c) for c in self.partition_by + self.order_by] + list(self.exprs), self.input.schema)
        exprs = self.polars_exprs()
        self.schema = infer_cached(self.label(), lambda: empty(self.input.schema).with_columns(exprs), "window", (self.input.schema,), exprs)

    def polars_exprs(self) -> list[pl.Expr]:
        """The window expressions as Polars expressions (run with ``with_columns``)."""
        out = []
        for e in polars_exprs(self.exprs):
            if self.partition_by or self.order_by:
                e = e.over(list(self.partition_by) or None, order_by=list(self.order_by) or None, descending=self.descending, nulls_last=self.nulls_last)
            out.append(e)
        return out

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return Window(children[0], self.partition_by, self.order_by, self.descending, self.nulls_last, self.exprs)

    def label(self) -> str:
        order = f" order by [{', '.join(self.order_by)}]{' desc' if self.descending else ''}{' nulls last' if self.nulls_last else ''}" if self.order_by else ""
        return f"window over [{', '.join(self.partition_by)}]{order}: " + ", ".join(e.show() for e in self.exprs)


# --- nodes that lowering rewrites into core nodes ------------------------------------------------


@dataclass(eq=False)
class SetOperation(Node):
    """SQL INTERSECT or EXCEPT of two inputs of equal schemas, rows compared whole with nulls
    equal; ``distinct`` (the SQL default) removes duplicates, else multiset semantics (ALL)."""

    kind: str
    left: Node
    right: Node
    distinct: bool = True

    def __post_init__(self) -> None:
        if self.kind not in ("intersect", "except"):
            raise ConfigError(f"set operation must be intersect or except, got {self.kind!r}")
        if self.left.schema != self.right.schema:
            raise ConfigError(f"{self.kind}: schemas differ: {dict(self.left.schema)} and {dict(self.right.schema)}")
        self.schema = self.left.schema

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return SetOperation(self.kind, children[0], children[1], self.distinct)

    def label(self) -> str:
        return self.kind + ("" if self.distinct else " all")


@dataclass(eq=False)
class GroupingSets(Node):
    """SQL GROUPING SETS: one aggregation per set of key positions, stacked; keys outside a set
    are null. ``grouping`` adds, per (name, key positions), SQL's GROUPING(keys...): a bit per key,
    first key highest, 1 where the key is not in the set. Columns: keys, grouping, aggs."""

    input: Node
    keys: tuple[Expr, ...]
    sets: tuple[tuple[int, ...], ...]
    aggs: tuple[Expr, ...]
    grouping: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def __post_init__(self) -> None:
        full = Aggregate(self.input, self.keys, self.aggs)
        names = list(full.schema)
        k = len(self.keys)
        fields: dict[str, Any] = {n: full.schema[n] for n in names[:k]}
        fields.update({name: pl.Int64 for name, _ in self.grouping})
        fields.update({n: full.schema[n] for n in names[k:]})
        if len(fields) != len(names) + len(self.grouping):
            raise ConfigError(f"grouping sets: output names collide: {names} and {[g for g, _ in self.grouping]}")
        self.schema = pl.Schema(fields)

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return GroupingSets(children[0], self.keys, self.sets, self.aggs, self.grouping)

    def label(self) -> str:
        keys = [k.show() for k in self.keys]
        sets = ", ".join("(" + ", ".join(keys[i] for i in s) + ")" for s in self.sets)
        return f"grouping sets {sets}: {', '.join(a.show() for a in self.aggs)}"


@dataclass(eq=False)
class Tagged(Node):
    """The input with a column ``name`` (Int64) that orders its rows as they come: increasing in
    input order, not consecutive (each task's rows from ``task index << 40``). What keeps an
    input order through an exchange: group_by(maintain_order=True) aggregates its minimum per
    group and sorts the groups on it."""

    input: Node
    name: str

    def __post_init__(self) -> None:
        if self.name in self.input.schema:
            raise ConfigError(f"a row tag needs a new column name, and {self.name!r} is taken")
        self.schema = pl.Schema({**self.input.schema, self.name: pl.Int64})

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def with_children(self, children: tuple[Node, ...]) -> Node:
        return Tagged(children[0], self.name)

    def label(self) -> str:
        return f"tag rows in input order ({self.name})"


CORE_NODES = (Scan, Filter, Project, Aggregate, Join, Sort, Limit, Distinct, Union, Window, Tagged)
