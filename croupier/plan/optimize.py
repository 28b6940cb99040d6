"""Rule-based optimisation of logical plans: lowering, predicate pushdown, projection pushdown.

1. :func:`croupier.plan.lower.lower` rewrites the plan into core nodes.
2. Predicates move down through projections (when they read only passed-through columns), sorts,
   distinct, unions (into every input), windows (conditions on partition keys), aggregations
   (conditions on grouping keys) and joins (a condition on one side's columns goes to that side
   when the join keeps that side's rows as they are: the left of inner/left/semi/anti/cross
   joins, the right of inner/right/cross joins), and end in the scan, where they prune Parquet
   row groups by min/max statistics and filter rows as soon as they are read.
3. Each scan reads only the columns something above it uses, and at least one (the cheapest),
   so it still yields its rows when nothing reads a column (``select(len())``).

Sharing: a node used by several parents (a CTE read twice, the input of a broadcast aggregate) is
rewritten once and stays one object. Predicates stop above it (each parent keeps its own
filter), and it reads the union of the columns its parents need.
"""

from __future__ import annotations

from dataclasses import replace

from croupier.errors import ConfigError
from croupier.expr import Binary, Col, Expr, conjoin, conjuncts, factor_or
from croupier.expr.analysis import transform
from croupier.expr.nodes import Alias
from croupier.plan.logical import (
    Aggregate,
    Distinct,
    Filter,
    Join,
    Limit,
    Node,
    Project,
    Scan,
    Sort,
    Tagged,
    Union,
    Window,
    walk,
)
from croupier.plan.lower import lower
from croupier.plan.partial import cheapest_column


def optimize(node: Node) -> Node:
    """The optimised equivalent of ``node`` (core nodes only; shared nodes stay shared)."""
    columns = list(node.schema)
    lowered = lower(node)
    pushed = _Predicates(lowered).push(lowered, [])
    out = _Projections(pushed).run()
    if list(out.schema) != columns:  # keys or predicate columns carried up: restore the shape
        out = Project(out, tuple(Col(c) for c in columns), "select")
    return out


def parents(root: Node) -> dict[int, int]:
    """How many parents each node of the plan has (by identity)."""
    count: dict[int, int] = {}
    for n in walk(root):
        for c in n.children():
            count[id(c)] = count.get(id(c), 0) + 1
    return count


def _wrap(node: Node, preds: list[Expr]) -> Node:
    predicate = conjoin(preds)
    return node if predicate is None else Filter(node, predicate)


def passthrough(node: Project) -> dict[str, str]:
    """Columns that leave ``node`` with the values of an input column, renamed or not: {output
    name: input name}. SQL's plans read every table through such a renaming (``l_shipdate`` as
    ``lineitem.l_shipdate``); a filter on the new names goes below it on the old ones, down to
    the scan, where it prunes row groups."""
    out: dict[str, str] = {}
    if node.kind == "with_columns":
        defined = {e.output_name() for e in node.exprs}
        out = {c: c for c in node.input.schema if c not in defined}
    for e in node.exprs:
        source = e.operand if isinstance(e, Alias) else e
        if isinstance(source, Col) and source.name in node.input.schema:
            out[e.output_name()] = source.name
    return out


def _renamed(pred: Expr, names: dict[str, str]) -> Expr | None:
    """``pred`` reading columns by their input names (``names``: output -> input); None when it
    holds a node that names columns otherwise than by ``col`` (it stays where it is)."""
    if all(names[c] == c for c in pred.columns()):
        return pred
    out = transform(pred, lambda e: Col(names[e.name]) if isinstance(e, Col) else e)
    return out if out.columns() == {names[c] for c in pred.columns()} else None


class _Predicates:
    """Predicate pushdown over a plan DAG: shared nodes are rewritten once, with no predicates."""

    def __init__(self, root: Node) -> None:
        self.uses = parents(root)
        self.memo: dict[int, Node] = {}

    def push(self, node: Node, preds: list[Expr]) -> Node:
        """Push the conjuncts ``preds`` (to be applied above ``node``) as far down as they can go."""
        if self.uses.get(id(node), 0) > 1:
            if id(node) not in self.memo:
                self.memo[id(node)] = self._push(node, [])
            return _wrap(self.memo[id(node)], preds)
        return self._push(node, preds)

    def _split(self, preds: list[Expr], allowed: set[str]) -> tuple[list[Expr], list[Expr]]:
        down = [p for p in preds if p.columns() and p.columns() <= allowed]
        return down, [p for p in preds if not any(p is d for d in down)]

    def _push(self, node: Node, preds: list[Expr]) -> Node:
        if isinstance(node, Filter):
            return self.push(node.input, preds + [c for p in conjuncts(node.predicate) for c in conjuncts(factor_or(p))])
        if isinstance(node, Scan):
            parts = ([node.spec.predicate] if node.spec.predicate is not None else []) + preds
            return Scan(replace(node.spec, predicate=conjoin(parts)), node.file_schema)
        if isinstance(node, Project):
            names = passthrough(node)
            down, keep = self._split(preds, set(names))
            renamed = [_renamed(p, names) for p in down]
            keep += [p for p, r in zip(down, renamed) if r is None]
            below = [r for r in renamed if r is not None]
            return _wrap(Project(self.push(node.input, below), node.exprs, node.kind), keep)
        if isinstance(node, Sort):
            return Sort(self.push(node.input, preds), node.by, node.descending, node.nulls_last)
        if isinstance(node, Distinct):
            return Distinct(self.push(node.input, preds))
        if isinstance(node, Union):
            return Union(tuple(self.push(i, list(preds)) for i in node.inputs))
        if isinstance(node, Aggregate):
            down, keep = self._split(preds, {k.name for k in node.keys if isinstance(k, Col)})
            return _wrap(Aggregate(self.push(node.input, down), node.keys, node.aggs), keep)
        if isinstance(node, Window):
            defined = {e.output_name() for e in node.exprs}
            down, keep = self._split(preds, set(node.partition_by) - defined)
            return _wrap(Window(self.push(node.input, down), node.partition_by, node.order_by, node.descending, node.nulls_last, node.exprs), keep)
        if isinstance(node, Join):
            return self._join(node, preds)
        if isinstance(node, Limit):
            return _wrap(Limit(self.push(node.input, []), node.n, node.offset, node.from_end), preds)
        if isinstance(node, Tagged):  # a filter below keeps the kept rows' relative order: the tags still order them
            down, keep = self._split(preds, set(node.input.schema))
            return _wrap(Tagged(self.push(node.input, down), node.name), keep)
        return _wrap(node.with_children(tuple(self.push(c, []) for c in node.children())), preds)

    def _join(self, node: Join, preds: list[Expr]) -> Node:
        left_cols, right_cols = set(node.left.schema), set(node.right.schema)
        left_ok = node.how in ("inner", "left", "semi", "anti", "cross")
        right_ok = node.how in ("inner", "right", "cross")
        # right columns that keep their name in the output (no suffix, not dropped as a key)
        right_named = right_cols - left_cols - (set(node.right_on) if node.how in ("inner", "left") else set())
        to_left, to_right, keep = [], [], []
        for p in preds:
            cols = p.columns()
            if left_ok and cols and cols <= left_cols:
                to_left.append(p)
            elif right_ok and cols and cols <= right_named:
                to_right.append(p)
            else:
                keep.append(p)
        left, right = self.push(node.left, to_left), self.push(node.right, to_right)
        if node.how == "cross":
            pairs = _equi_keys(keep, left_cols, right_named)
            if pairs:  # a cross join filtered on left = right columns is an equi-join on them
                left_on, right_on = zip(*pairs)
                return _wrap(Join(left, right, left_on, right_on, "inner", node.suffix, False), keep)
        return _wrap(node.with_children((left, right)), keep)


def _equi_keys(preds: list[Expr], left: set[str], right: set[str]) -> list[tuple[str, str]]:
    """(left column, right column) of every ``col == col`` conjunct across the two sides."""
    pairs = []
    for p in preds:
        if isinstance(p, Binary) and p.op == "==" and isinstance(p.left, Col) and isinstance(p.right, Col):
            a, b = p.left.name, p.right.name
            pair = (a, b) if a in left and b in right else (b, a) if b in left and a in right else None
            if pair is not None and all(pair[0] != x and pair[1] != y for x, y in pairs):
                pairs.append(pair)
    return pairs


class _Projections:
    """Projection pushdown over a plan DAG: every node learns the union of the columns its
    parents need (parents first), then the plan is rebuilt bottom-up reading only those."""

    def __init__(self, root: Node) -> None:
        self.root = root
        self.need: dict[int, set[str]] = {id(root): set(root.schema)}
        self.memo: dict[int, Node] = {}

    def run(self) -> Node:
        for node in _topological(self.root):
            needed = self.need.get(id(node), set())
            for child, child_need in zip(node.children(), self.child_needs(node, needed)):
                self.need.setdefault(id(child), set()).update(child_need)
        return self.rebuild(self.root)

    # --- what each node needs from its children --------------------------------------------------
    def child_needs(self, node: Node, needed: set[str]) -> list[set[str]]:
        if isinstance(node, Filter):
            return [needed | node.predicate.columns()]
        if isinstance(node, Project):
            exprs = self.kept_exprs(node, needed)
            cols: set[str] = set().union(*(e.columns() for e in exprs))
            if node.kind == "select":
                return [cols]
            defined = {e.output_name() for e in exprs}
            return [((needed - defined) & set(node.input.schema)) | cols]
        if isinstance(node, Aggregate):
            below: set[str] = set().union(*(e.columns() for e in node.keys + self.kept_aggs(node, needed)))
            return [below or {cheapest_column(node.input.schema)}]
        if isinstance(node, Window):
            exprs = self.kept_window(node, needed)
            defined = {e.output_name() for e in exprs}
            cols = set().union(*(e.columns() for e in exprs)) if exprs else set()
            if exprs:
                cols |= set(node.partition_by) | set(node.order_by)
            return [((needed - defined) & set(node.input.schema)) | cols]
        if isinstance(node, Join):
            return list(self.join_needs(node, needed))
        if isinstance(node, Sort):
            return [needed | set().union(*(e.columns() for e in node.by))]
        if isinstance(node, Limit):
            return [set(needed)]
        if isinstance(node, Tagged):
            return [(needed - {node.name}) or {cheapest_column(node.input.schema)}]
        if isinstance(node, Distinct):
            return [set(node.input.schema)]
        if isinstance(node, Union):
            cols = needed & set(node.schema) or {cheapest_column(node.schema)}
            return [set(cols) for _ in node.inputs]
        return [set(c.schema) for c in node.children()]

    @staticmethod
    def kept_exprs(node: Project, needed: set[str]) -> tuple[Expr, ...]:
        exprs = tuple(e for e in node.exprs if e.output_name() in needed)
        if node.kind == "with_columns":
            return exprs
        if not exprs:
            exprs = node.exprs[:1]
        if all(not e.columns() for e in exprs):  # literals only would make one row: keep a column
            readers = [e for e in node.exprs if e.columns()]
            exprs += tuple(readers[:1])
        return tuple(e for e in node.exprs if any(e is k for k in exprs))

    @staticmethod
    def kept_aggs(node: Aggregate, needed: set[str]) -> tuple[Expr, ...]:
        aggs = tuple(a for a in node.aggs if a.output_name() in needed)
        return aggs or (node.aggs[:1] if not node.keys else ())

    @staticmethod
    def kept_window(node: Window, needed: set[str]) -> tuple[Expr, ...]:
        return tuple(e for e in node.exprs if e.output_name() in needed)

    @staticmethod
    def join_needs(node: Join, needed: set[str]) -> tuple[set[str], set[str]]:
        left, right = set(node.left.schema), set(node.right.schema)
        if node.how in ("semi", "anti"):
            return (needed & left) | set(node.left_on), set(node.right_on)
        right_need = {c for c in right if c in needed or c + node.suffix in needed} | set(node.right_on)
        left_need = (needed & left) | set(node.left_on)
        # a name on both sides is suffixed on the right only while the left one exists: keep both
        both = {c for c in left & right if c in needed or c + node.suffix in needed}
        return left_need | both, right_need | both

    # --- rebuilding ---------------------------------------------------------------------------------
    def rebuild(self, node: Node) -> Node:
        if id(node) in self.memo:
            return self.memo[id(node)]
        needed = self.need.get(id(node), set(node.schema))
        children = tuple(self.rebuild(c) for c in node.children())
        out = self._rebuild(node, needed, children)
        missing = [c for c in needed if c in node.schema and (c not in out.schema or out.schema[c] != node.schema[c])]
        if missing:  # a bug in the rules above: say so rather than answer wrongly
            raise ConfigError(f"internal error: projection pushdown lost column(s) {missing} of {node.label()}")
        self.memo[id(node)] = out
        return out

    def _rebuild(self, node: Node, needed: set[str], children: tuple[Node, ...]) -> Node:
        if isinstance(node, Scan):
            return self._scan(node, needed)
        if isinstance(node, Project):
            exprs = self.kept_exprs(node, needed)
            if node.kind == "with_columns" and not exprs:
                return children[0]
            return Project(children[0], exprs, node.kind)
        if isinstance(node, Aggregate):
            return Aggregate(children[0], node.keys, self.kept_aggs(node, needed))
        if isinstance(node, Window):
            exprs = self.kept_window(node, needed)
            if not exprs:
                return children[0]
            return Window(children[0], node.partition_by, node.order_by, node.descending, node.nulls_last, exprs)
        if isinstance(node, Union):
            cols = [c for c in node.schema if c in (needed or {cheapest_column(node.schema)})]
            if not cols:
                cols = [cheapest_column(node.schema)]
            return Union(tuple(c if list(c.schema) == cols else Project(c, tuple(Col(n) for n in cols), "select") for c in children))
        return node.with_children(children) if any(a is not b for a, b in zip(children, node.children())) else node

    @staticmethod
    def _scan(node: Scan, needed: set[str]) -> Node:
        pred = node.spec.predicate.columns() if node.spec.predicate is not None else set()
        columns = tuple(c for c in node.file_schema if c in needed or c in pred)
        if not columns:
            columns = (cheapest_column(node.file_schema),)
        out = Scan(replace(node.spec, columns=columns), node.file_schema)
        kept = [c for c in columns if c in needed]
        if kept and len(kept) < len(columns):
            return Project(out, tuple(Col(c) for c in kept), "select")
        return out


def _topological(root: Node) -> list[Node]:
    """The plan's nodes, every node before its children (reverse post-order of a DFS)."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in node.children())
    return order[::-1]

