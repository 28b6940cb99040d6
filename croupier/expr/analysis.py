"""Analyses and rewrites of expression trees used by the planner.

* :func:`conjuncts` / :func:`conjoin`: split and join ``a & b & c`` (predicate pushdown).
* :func:`may_match`: can a Parquet row group with these min/max statistics hold a matching row?
* :func:`selectivity`: about what share of such a row group's rows match?
* :func:`transform` / :func:`extract`: rebuild a tree bottom-up, or cut chosen subtrees out of it
  (replacing each by a column) so they can be computed by another plan node.
* :func:`identity`: a key equal for expressions equal in every field, to share one computation.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from decimal import Decimal
from typing import Any, Callable, Iterator

from croupier.expr.nodes import BINARY, FLIP, Agg, Binary, Col, Expr, Func, IsIn, Lit, Over, Unary


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of ``expr``, parents first."""
    yield expr
    for child in expr.children():
        yield from walk(child)


def transform(expr: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """Rebuild ``expr`` bottom-up, passing every (rebuilt) node through ``fn``."""
    children = expr.children()
    if children:
        new = tuple(transform(c, fn) for c in children)
        if any(a is not b for a, b in zip(new, children)):
            expr = expr.with_children(new)
    return fn(expr)


def extract(expr: Expr, is_target: Callable[[Expr], bool], name_for: Callable[[Expr], str], descend: Callable[[Expr], bool] = lambda e: True) -> Expr:
    """``expr`` with every outermost subtree for which ``is_target`` holds replaced by
    ``col(name_for(subtree))``; ``descend`` says whether to look inside a (non-target) node."""
    if is_target(expr):
        return Col(name_for(expr))
    if not descend(expr):
        return expr
    children = expr.children()
    if not children:
        return expr
    new = tuple(extract(c, is_target, name_for, descend) for c in children)
    if all(a is b for a, b in zip(new, children)):
        return expr
    return expr.with_children(new)


def is_agg_root(expr: Expr) -> bool:
    """An aggregation evaluated over the frame or group (not the inside of a window)."""
    return isinstance(expr, Agg)


def outside_windows(expr: Expr) -> bool:
    """Whether to look for aggregations inside ``expr``: not inside ``over`` or int_range."""
    return not isinstance(expr, Over) and not (isinstance(expr, Func) and expr.fn == "int_range")


def is_window_root(expr: Expr) -> bool:
    """A window: ``over(...)`` or a window function not under ``over``."""
    return isinstance(expr, Over) or (isinstance(expr, Func) and expr.is_window_function())


def conjuncts(expr: Expr) -> list[Expr]:
    """Split ``a & b & c`` into [a, b, c]."""
    if isinstance(expr, Binary) and expr.op == "&":
        return conjuncts(expr.left) + conjuncts(expr.right)
    return [expr]


def disjuncts(expr: Expr) -> list[Expr]:
    """Split ``a | b | c`` into [a, b, c]."""
    if isinstance(expr, Binary) and expr.op == "|":
        return disjuncts(expr.left) + disjuncts(expr.right)
    return [expr]


def factor_or(expr: Expr) -> Expr:
    """Conjuncts every branch of a disjunction shares, taken out: ``(a & b) | (a & c)`` becomes
    ``a & (b | c)`` (distributivity, which holds in SQL's three-valued logic too). A join
    condition written inside every branch of an OR (TPC-H q19) becomes a join key this way."""
    branches = [conjuncts(b) for b in disjuncts(expr)]
    if len(branches) < 2:
        return expr
    common = set.intersection(*({c.show() for c in b} for b in branches))
    if not common:
        return expr
    shared = [c for c in branches[0] if c.show() in common]
    rests = [conjoin([c for c in b if c.show() not in common]) for b in branches]
    if any(r is None for r in rests):  # a branch is all common: (a) | (a & c) is a
        out = conjoin(shared)
        return expr if out is None else out
    either: Expr = rests[0]  # type: ignore[assignment]
    for r in rests[1:]:
        either = Binary("|", either, r)  # type: ignore[arg-type]
    out = conjoin([*shared, either])
    return expr if out is None else out


def conjoin(parts: list[Expr]) -> Expr | None:
    """The AND of ``parts`` (None when empty)."""
    out: Expr | None = None
    for part in parts:
        out = part if out is None else Binary("&", out, part)
    return out


def fold(expr: Expr) -> Any:
    """Python value of a constant expression (literals and operators on them), else raise LookupError."""
    if isinstance(expr, Lit):
        return expr.value
    if isinstance(expr, Binary) and expr.op in ("+", "-", "*", "/"):
        return BINARY[expr.op](fold(expr.left), fold(expr.right))
    raise LookupError(expr)


Stats = dict[str, tuple[Any, Any]]


def may_match(expr: Expr, stats: Stats) -> bool:
    """False only when no row whose columns lie in ``stats`` [min, max] ranges can satisfy ``expr``.

    Used to prune Parquet row groups: conjunctions and disjunctions of comparisons between a
    column and a constant, ``is_in`` and ``is_between``; anything else may match.
    """
    try:
        return _may_match(expr, stats)
    except (TypeError, LookupError, ValueError, ArithmeticError):
        return True


def _may_match(expr: Expr, stats: Stats) -> bool:
    if isinstance(expr, Binary):
        if expr.op == "&":
            return _may_match(expr.left, stats) and _may_match(expr.right, stats)
        if expr.op == "|":
            return _may_match(expr.left, stats) or _may_match(expr.right, stats)
        if expr.op in FLIP:
            op, column, value = expr.op, expr.left, expr.right
            if not isinstance(column, Col):
                op, column, value = FLIP[op], expr.right, expr.left
            if not isinstance(column, Col) or column.name not in stats:
                return True
            low, high = stats[column.name]
            v = fold(value)
            if low is None or high is None or v is None:
                return True
            return {
                "==": lambda: low <= v <= high,
                "!=": lambda: not (low == high == v),
                "<": lambda: low < v,
                "<=": lambda: low <= v,
                ">": lambda: high > v,
                ">=": lambda: high >= v,
            }[op]()
    if isinstance(expr, IsIn) and isinstance(expr.operand, Col) and expr.operand.name in stats:
        low, high = stats[expr.operand.name]
        if low is None or high is None or (expr.nulls_equal and None in expr.values):
            return True
        return any(v is not None and low <= v <= high for v in expr.values)
    return True


#: Shares of rows a condition is guessed to keep where statistics cannot tell (System R's): an
#: equality with a constant, and anything else (a range on a column without statistics, a
#: comparison of two columns, a function's result).
EQUAL_SHARE = 0.1
OTHER_SHARE = 1 / 3


def selectivity(expr: Expr, stats: Stats) -> float:
    """About the share of rows whose columns lie in ``stats`` [min, max] ranges that satisfy
    ``expr``: conjunctions multiply (as if independent), disjunctions add their shares' union, a
    range on a numeric or date column is where its constant falls between min and max (values
    spread evenly), an equality is :data:`EQUAL_SHARE`, anything else :data:`OTHER_SHARE`; and
    0 where :func:`may_match` rules out every row. The planner's guess of what a filtered scan
    keeps, from the row groups' statistics it has read anyway."""
    try:
        return min(1.0, max(0.0, _selectivity(expr, stats)))
    except (TypeError, LookupError, ValueError, ArithmeticError, OverflowError):
        return OTHER_SHARE


def _selectivity(expr: Expr, stats: Stats) -> float:
    if not may_match(expr, stats):
        return 0.0
    if isinstance(expr, Unary) and expr.op == "not":
        return 1.0 - _selectivity(expr.operand, stats)
    if isinstance(expr, IsIn):
        return min(1.0, len(expr.values) * _equal_share(expr.operand, stats))
    if not isinstance(expr, Binary):
        return OTHER_SHARE
    if expr.op == "&":
        return _selectivity(expr.left, stats) * _selectivity(expr.right, stats)
    if expr.op == "|":
        a, b = _selectivity(expr.left, stats), _selectivity(expr.right, stats)
        return a + b - a * b
    if expr.op not in FLIP:
        return OTHER_SHARE
    op, column, value = expr.op, expr.left, expr.right
    if not isinstance(column, Col):
        op, column, value = FLIP[op], expr.right, expr.left
    if not isinstance(column, Col) or value.columns():
        return EQUAL_SHARE if op == "==" else OTHER_SHARE
    if op in ("==", "!="):
        share = _equal_share(column, stats)
        return share if op == "==" else 1.0 - share
    below = _position(fold(value), stats.get(column.name))
    if below is None:
        return OTHER_SHARE
    return below if op in ("<", "<=") else 1.0 - below


def _equal_share(operand: Expr, stats: Stats) -> float:
    """Share of rows equal to one constant: all of them where min = max, else EQUAL_SHARE."""
    if isinstance(operand, Col) and operand.name in stats:
        low, high = stats[operand.name]
        if low is not None and low == high:
            return 1.0
    return EQUAL_SHARE


def _position(value: Any, bounds: tuple[Any, Any] | None) -> float | None:
    """Where ``value`` lies between ``bounds`` (0 at min, 1 at max), for numbers, dates and
    times; None for what has no distance (strings) or no statistics."""
    if bounds is None or value is None or bounds[0] is None or bounds[1] is None:
        return None
    points = [_number(x) for x in (*bounds, value)]
    if any(p is None for p in points) or len({p[0] for p in points}) > 1:  # type: ignore[index]
        return None
    low, high, v = (p[1] for p in points)  # type: ignore[index]
    if high <= low:
        return 0.5
    return min(1.0, max(0.0, (v - low) / (high - low)))


def _number(x: Any) -> tuple[str, float] | None:
    """``x`` on a number line, with the line's name: numbers as they are, dates by day, times
    by second (naive and zoned apart)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float, Decimal)):
        return "number", float(x)
    if isinstance(x, datetime.datetime):
        if x.tzinfo is not None:
            return "zoned", x.timestamp()
        return "time", (x - datetime.datetime(1970, 1, 1)).total_seconds()
    if isinstance(x, datetime.date):
        return "date", float(x.toordinal())
    return None


def identity(value: Any) -> Any:
    """A hashable value that is equal for expressions equal in every field (``show()`` leaves some
    out: a cast's strictness, ``is_in``'s ``nulls_equal``, so two different operands could pass
    for one). Values that cannot be hashed (a subquery's frame) are themselves only."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple(identity(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(identity(v) for v in value))
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    try:
        hash(value)
    except TypeError:
        return ("object", id(value))
    return (type(value).__name__, value)  # the type keeps 1, 1.0 and True apart
