"""Shared by the SQL TPC tests: DuckDB's answer to a query text, with DuckDB's types mapped."""

from __future__ import annotations

import io
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import sqlglot

from croupier.config import Config
from croupier.sql.types import duckdb_dtype
from croupier.storage import open_store


def _views(paths: dict[str, Path]) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection (one thread: one deterministic order for rows that tie under ORDER BY)
    with a view of each Parquet file of ``paths``."""
    con = duckdb.connect()
    con.execute("SET threads = 1")
    for table, path in paths.items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{path}')")
    return con


def duckdb_answer(query: str, paths: dict[str, Path], con: duckdb.DuckDBPyConnection | None = None) -> pl.DataFrame:
    """DuckDB's result for ``query`` over the Parquet files ``paths`` (one thread: one tie order),
    on ``con`` if given (a connection :func:`_views` made for ``paths``), else on a fresh one."""
    own = con is None
    if con is None:
        con = _views(paths)
    try:
        cursor = con.execute(query)
        types = [str(d[1]) for d in cursor.description]
        frame: pl.DataFrame = pl.from_arrow(cursor.to_arrow_table())  # type: ignore[assignment]
    finally:
        if own:
            con.close()
    return frame.with_columns([pl.col(c).cast(duckdb_dtype(t)) for c, t in zip(frame.columns, types) if t != "NULL"])


_ANSWERS: dict[tuple[str, tuple[tuple[str, str], ...]], pl.DataFrame] = {}
_CONNECTIONS: dict[tuple[tuple[str, str], ...], duckdb.DuckDBPyConnection] = {}


def tpc_answer(query: str, paths: dict[str, Path]) -> pl.DataFrame:
    """:func:`duckdb_answer` over the session's TPC tables (``tpc_sql_data``: files no test writes),
    computed once per query and shared: ``test_sql_tpc`` and ``test_sql_engine`` (on each store, and
    again with broadcasts off) check the same queries against the same answers. Callers only read it.
    The queries of one set of tables run on one connection that has their views (a fresh connection
    and 24 views per TPC-DS query took three times as long as the query)."""
    tables = tuple((table, str(path)) for table, path in paths.items())
    key = (query, tables)
    if key not in _ANSWERS:
        if tables not in _CONNECTIONS:
            _CONNECTIONS[tables] = _views(paths)
        _ANSWERS[key] = duckdb_answer(query, paths, _CONNECTIONS[tables])
    return _ANSWERS[key]


def is_ordered(query: str) -> bool:
    """Whether the query's outermost SELECT has an ORDER BY (then row order is part of the answer)."""
    return sqlglot.parse_one(query, dialect="duckdb").args.get("order") is not None


def upload_parts(kind: str, paths: dict[str, Path], root: str, config: Config, parts: int = 3, row_groups: int = 1) -> dict[str, str]:
    """Each table's rows cut into ``parts`` Parquet files (of ``row_groups`` row groups each) under
    ``root/kind/table/``, so every plan runs several tasks; the table folder URLs."""
    store = open_store(root, config)
    urls = {}
    for name, path in paths.items():
        table = pq.read_table(path)
        step = -(-table.num_rows // parts) or 1
        for i in range(parts):
            buf = io.BytesIO()
            pq.write_table(table.slice(i * step, step), buf, row_group_size=max(1, step // row_groups))
            store.put(f"{kind}/{name}/part-{i}.parquet", buf.getvalue())
        urls[name] = f"{root}/{kind}/{name}/"
    return urls
