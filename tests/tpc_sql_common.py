"""Shared by the SQL TPC tests: DuckDB's answer to a query text, with DuckDB's types mapped."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import sqlglot

from croupier.sql.types import duckdb_dtype


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
