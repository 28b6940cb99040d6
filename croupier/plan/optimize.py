"""Rule-based optimisation of logical plans: predicate pushdown, then projection pushdown.

* Predicates move down through projections (when they read only passed-through columns), sorts,
  aggregations (conditions on grouping keys), and joins (a condition on one side's columns goes
  to that side; to the right side only for inner joins), and end in the scan, where they prune
  Parquet row groups by min/max statistics and filter rows as soon as they are read.
* Each scan reads only the columns something above it uses.
"""

from __future__ import annotations

from dataclasses import replace

from croupier.expr import Col, Expr, conjoin, conjuncts
from croupier.plan.logical import Aggregate, Distinct, Filter, Join, Limit, Node, Project, Scan, Sort


def optimize(node: Node) -> Node:
    """The optimised equivalent of ``node``."""
    columns = list(node.schema)
    out = push_projections(push_predicates(node, []), set(columns))
    if list(out.schema) != columns:  # keys or predicate columns carried up: restore the shape
        out = Project(out, tuple(Col(c) for c in columns), "select")
    return out


def _wrap(node: Node, preds: list[Expr]) -> Node:
    predicate = conjoin(preds)
    return node if predicate is None else Filter(node, predicate)


def _passthrough(node: Project) -> set[str]:
    """Columns that leave ``node`` unchanged from its input."""
    if node.kind == "with_columns":
        defined = {e.output_name() for e in node.exprs}
        return set(node.input.schema) - defined
    return {e.name for e in node.exprs if isinstance(e, Col)}


def push_predicates(node: Node, preds: list[Expr]) -> Node:
    """Push the conjuncts ``preds`` (to be applied above ``node``) as far down as they can go."""
    if isinstance(node, Filter):
        return push_predicates(node.input, preds + conjuncts(node.predicate))
    if isinstance(node, Scan):
        parts = ([node.spec.predicate] if node.spec.predicate is not None else []) + preds
        return Scan(replace(node.spec, predicate=conjoin(parts)), node.file_schema)
    if isinstance(node, Project):
        through = _passthrough(node)
        down = [p for p in preds if p.columns() <= through]
        keep = [p for p in preds if not p.columns() <= through]
        return _wrap(Project(push_predicates(node.input, down), node.exprs, node.kind), keep)
    if isinstance(node, Sort):
        return Sort(push_predicates(node.input, preds), node.by, node.descending, node.nulls_last)
    if isinstance(node, Aggregate):
        keys = {k.name for k in node.keys if isinstance(k, Col)}
        down = [p for p in preds if p.columns() <= keys]
        keep = [p for p in preds if not p.columns() <= keys]
        return _wrap(Aggregate(push_predicates(node.input, down), node.keys, node.aggs), keep)
    if isinstance(node, Join):
        return _push_join(node, preds)
    if isinstance(node, Distinct):
        return Distinct(push_predicates(node.input, preds))
    if isinstance(node, Limit):
        return _wrap(Limit(push_predicates(node.input, []), node.n), preds)
    return _wrap(node, preds)


def _push_join(node: Join, preds: list[Expr]) -> Node:
    left_cols = set(node.left.schema)
    right_only = set(node.right.schema) - left_cols - set(node.right_on)
    to_left, to_right, keep = [], [], []
    for p in preds:
        cols = p.columns()
        if cols <= left_cols:
            to_left.append(p)
        elif node.how == "inner" and cols <= right_only:
            to_right.append(p)
        else:
            keep.append(p)
    left = push_predicates(node.left, to_left)
    right = push_predicates(node.right, to_right)
    return _wrap(Join(left, right, node.left_on, node.right_on, node.how, node.suffix), keep)


def push_projections(node: Node, needed: set[str]) -> Node:
    """Rebuild ``node`` reading only what produces the columns in ``needed``."""
    if isinstance(node, Scan):
        read = set(needed) | (node.spec.predicate.columns() if node.spec.predicate is not None else set())
        columns = tuple(c for c in node.file_schema if c in read)
        out = Scan(replace(node.spec, columns=columns), node.file_schema)
        extra = [c for c in columns if c not in needed]
        if extra and any(c in needed for c in columns):
            return Project(out, tuple(Col(c) for c in columns if c in needed), "select")
        return out
    if isinstance(node, Filter):
        return Filter(push_projections(node.input, needed | node.predicate.columns()), node.predicate)
    if isinstance(node, Project):
        if node.kind == "select":
            exprs = tuple(e for e in node.exprs if e.output_name() in needed) or node.exprs
            below: set[str] = set().union(*(e.columns() for e in exprs))
            return Project(push_projections(node.input, below), exprs, "select")
        exprs = tuple(e for e in node.exprs if e.output_name() in needed)
        defined = {e.output_name() for e in exprs}
        below = (needed - defined) | set().union(*(e.columns() for e in exprs))
        child = push_projections(node.input, below & set(node.input.schema))
        return Project(child, exprs, "with_columns") if exprs else child
    if isinstance(node, Aggregate):
        below = set().union(*(e.columns() for e in node.keys + node.aggs))
        return Aggregate(push_projections(node.input, below or {next(iter(node.input.schema))}), node.keys, node.aggs)
    if isinstance(node, Join):
        left_need = (needed & set(node.left.schema)) | set(node.left_on)
        if node.how in ("semi", "anti"):
            right_need = set(node.right_on)
        else:
            right_need = {c for c in node.right.schema if c in needed or c + node.suffix in needed} | set(node.right_on)
            # a kept right column whose name the left side also has is renamed with the suffix only
            # while the left one exists: keep the left one so names do not change
            left_need |= {c for c in right_need if c in node.left.schema and c not in node.right_on}
        return Join(push_projections(node.left, left_need), push_projections(node.right, right_need), node.left_on, node.right_on, node.how, node.suffix)
    if isinstance(node, Sort):
        below = needed | set().union(*(e.columns() for e in node.by))
        return Sort(push_projections(node.input, below), node.by, node.descending, node.nulls_last)
    if isinstance(node, Limit):
        return Limit(push_projections(node.input, needed), node.n)
    if isinstance(node, Distinct):
        return Distinct(push_projections(node.input, set(node.input.schema)))
    return node
