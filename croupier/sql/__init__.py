"""SQL in DuckDB's dialect, translated into the same logical plan as the frame API.

    import croupier
    q = croupier.sql(
        "SELECT l_returnflag, sum(l_quantity) AS qty FROM lineitem GROUP BY 1 ORDER BY 1",
        tables={"lineitem": "s3://bucket/tpch/lineitem/"},
    )
    q.collect()          # runs on Croupier's workers
    q.to_polars()        # the same plan in Polars, on local files

DuckDB is the reference: answers (values, NULLs, names, order under ORDER BY) and types (mapped
as :mod:`croupier.sql.types` documents) are DuckDB's. sqlglot parses and optimises the text
(:mod:`croupier.sql.parse`); :mod:`croupier.sql.query` and :mod:`croupier.sql.exprs` translate it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from croupier.errors import ConfigError

if TYPE_CHECKING:
    from croupier.config import Config
    from croupier.plan.logical import Node

# This package's ``__init__`` is imported by ``import croupier`` (which re-exports :func:`sql`), so
# it imports sqlglot, Polars and the planner only when a query is translated.


def sql(text: str, tables: Mapping[str, Any], config: Config | None = None) -> Any:
    """A LazyFrame for the query ``text`` over ``tables``: name -> LazyFrame, or a URL/path of
    Parquet (or ``.csv``) files (a file, a folder/prefix or a glob)."""
    from croupier.config import Config
    from croupier.frame.lazy import LazyFrame
    from croupier.sql.parse import parse, parse_query, referenced_tables
    from croupier.sql.query import QueryTranslator

    config = config or Config.from_env()
    try:
        tree = parse_query(text)
    except ConfigError:
        tree = None  # parse() below says why, once the tables are opened (as before)
    used = referenced_tables(tree) if tree is not None else None
    # only the tables the text reads: each other one would cost a listing and a footer read
    nodes = {name: _table(source, config) for name, source in tables.items() if used is None or name.lower() in used}
    parsed = parse(text, {name: node.schema for name, node in nodes.items()}, _stored_bytes(nodes, config), tables, tree)
    node = QueryTranslator(nodes).query(parsed.tree)
    names = parsed.names if parsed.names is not None and len(parsed.names) == len(node.schema) else [parsed.case.get(n.lower(), n) for n in node.schema]
    node = _renamed(node, names)
    return LazyFrame(node, config)


def _table(source: Any, config: Config) -> Node:
    from croupier.frame.lazy import LazyFrame, scan_csv, scan_parquet

    if isinstance(source, LazyFrame):
        return source._node
    if isinstance(source, (str, Path)):
        text = str(source)
        frame = scan_csv(text, config=config) if text.lower().rstrip("/").endswith(".csv") else scan_parquet(text, config=config)
        return frame._node
    raise ConfigError(f"SQL tables must be LazyFrames or URLs, got {type(source).__name__}")


def _stored_bytes(nodes: dict[str, Node], config: Config) -> dict[str, int]:
    """Stored bytes of each table that is a plain scan (one listing each), for join ordering."""
    from croupier.frame.lazy import _Stores
    from croupier.plan.logical import Scan
    from croupier.dag.scan import resolve

    stores = _Stores(config)
    out = {}
    for name, node in nodes.items():
        if isinstance(node, Scan):
            _, objects = resolve(node.spec.url, stores.store)
            out[name] = sum(o.size for o in objects)
    return out


def _renamed(node: Node, names: list[str]) -> Node:
    from croupier.expr import Col
    from croupier.plan.logical import Project
    from croupier.sql.query import _unique

    names = _unique(names)
    if names == list(node.schema):
        return node
    return Project(node, tuple(Col(old).alias(new) for old, new in zip(node.schema, names)), "select")


__all__ = ["sql"]
