"""Relations and name resolution while SQL is translated into a logical plan.

A :class:`Relation` is a plan node plus the map from SQL column references (table alias, column)
to the node's column names. Inside a query every source's columns are renamed ``alias.column``
so joined sources never collide; a query's own output columns carry its select-list names.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import polars as pl

from croupier.errors import ConfigError
from croupier.expr import Col, Expr
from croupier.plan.logical import Node, Project

Key = tuple[str, str]


@dataclass
class Relation:
    """A plan node and how SQL names its columns: (alias, column) -> the node's column name."""

    node: Node
    columns: dict[Key, str] = field(default_factory=dict)

    def resolve(self, table: str, name: str) -> str | None:
        """The node's column for ``table.name`` (any table when ``table`` is empty and the name is unique)."""
        key = (table.lower(), name.lower())
        if table:
            return self.columns.get(key)
        found = {v for (t, n), v in self.columns.items() if n == key[1]}
        if len(found) > 1:
            raise ConfigError(f"SQL: column {name} is ambiguous; qualify it with its table")
        return next(iter(found), None)

    def with_node(self, node: Node) -> Relation:
        return Relation(node, dict(self.columns))


class Names:
    """Fresh names for helper columns: ``__<prefix><n>``, unique within one translation."""

    def __init__(self) -> None:
        self._ids = itertools.count()

    def fresh(self, prefix: str = "t") -> str:
        return f"__{prefix}{next(self._ids)}"


def source(node: Node, alias: str) -> Relation:
    """``node`` (a table, a CTE, a derived table) read under ``alias``: columns renamed ``alias.column``."""
    alias = alias.lower()
    renamed = tuple(Col(c).alias(f"{alias}.{c}") for c in node.schema)
    return Relation(Project(node, renamed, "select"), {(alias, c.lower()): f"{alias}.{c}" for c in node.schema})


def dtype_of(expr: Expr, schema: pl.Schema) -> pl.DataType:
    """The dtype ``expr`` has over rows of ``schema``: Polars' answer over an empty frame of the
    columns ``expr`` reads (a frame of a joined relation's every column took 1 ms to make)."""
    from croupier.plan.logical import for_schema

    if isinstance(expr, Col) and expr.name in schema:
        return schema[expr.name]  # most calls: a comparison's operands
    expr = for_schema(expr)
    used = expr.columns()  # every column it reads (projection pushdown relies on the same)
    try:
        return pl.DataFrame(schema={c: t for c, t in schema.items() if c in used}).select(expr.to_polars().alias("x")).schema["x"]
    except pl.exceptions.PolarsError as exc:
        raise ConfigError(f"SQL: {expr.show()}: {exc}") from exc


def supertype(a: pl.DataType, b: pl.DataType) -> pl.DataType:
    """The type Polars (and SQL) compare or combine ``a`` and ``b`` in."""
    if a == b:
        return a
    try:
        return pl.DataFrame(schema={"a": a, "b": b}).select(pl.coalesce("a", "b")).schema["a"]
    except pl.exceptions.PolarsError as exc:
        raise ConfigError(f"SQL: no common type for {a} and {b}: {exc}") from exc
