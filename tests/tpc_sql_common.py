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


def duckdb_answer(query: str, paths: dict[str, Path]) -> pl.DataFrame:
    """DuckDB's result for ``query`` over the Parquet files ``paths`` (one thread: one tie order)."""
    con = duckdb.connect()
    con.execute("SET threads = 1")  # one deterministic order for rows that tie under ORDER BY
    for table, path in paths.items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{path}')")
    cursor = con.execute(query)
    types = [str(d[1]) for d in cursor.description]
    frame: pl.DataFrame = pl.from_arrow(cursor.to_arrow_table())  # type: ignore[assignment]
    con.close()
    return frame.with_columns([pl.col(c).cast(duckdb_dtype(t)) for c, t in zip(frame.columns, types) if t != "NULL"])


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
