"""TPC-H queries 1, 3, 5, 6, 10, 12, 18 and TPC-DS query 1 in the lazy frame API, and their data.

Tables come from DuckDB's own generators (the ``duckdb-extension-tpch``/``-tpcds`` packages, loaded
from the files they ship), written as Parquet with DECIMAL columns as DOUBLE, so that every engine
reads identical floating-point data. The reference results are DuckDB running the official query
texts (from the same extensions) over the same Parquet files.

    tables = generate("tpch", 0.1, Path("data/tpch"))           # {name: path}
    frames = {n: cf.scan_parquet(p, config=config) for n, p in tables.items()}
    result = TPCH[5](frames).collect()
"""

from __future__ import annotations

import functools
import glob
import importlib
import os
from datetime import date
from pathlib import Path
from typing import Callable

from croupier.errors import ConfigError
from croupier.frame import LazyFrame, col, count, when

Tables = dict[str, LazyFrame]

TPCH_TABLES = ("lineitem", "orders", "customer", "supplier", "nation", "region", "part", "partsupp")
TPCDS_TABLES = ("store_returns", "date_dim", "store", "customer")
#: Every table of each generator (what the SQL suites read).
ALL_TABLES = {
    "tpch": TPCH_TABLES,
    "tpcds": (
        "call_center", "catalog_page", "catalog_returns", "catalog_sales", "customer", "customer_address",
        "customer_demographics", "date_dim", "household_demographics", "income_band", "inventory", "item",
        "promotion", "reason", "ship_mode", "store", "store_returns", "store_sales", "time_dim", "warehouse",
        "web_page", "web_returns", "web_sales", "web_site",
    ),
}  # fmt: skip


def q1(t: Tables) -> LazyFrame:
    disc = col("l_extendedprice") * (1 - col("l_discount"))
    return (
        t["lineitem"]
        .filter(col("l_shipdate") <= date(1998, 9, 2))
        .group_by("l_returnflag", "l_linestatus")
        .agg(
            col("l_quantity").sum().alias("sum_qty"),
            col("l_extendedprice").sum().alias("sum_base_price"),
            disc.sum().alias("sum_disc_price"),
            (disc * (1 + col("l_tax"))).sum().alias("sum_charge"),
            col("l_quantity").mean().alias("avg_qty"),
            col("l_extendedprice").mean().alias("avg_price"),
            col("l_discount").mean().alias("avg_disc"),
            count().alias("count_order"),
        )
        .sort("l_returnflag", "l_linestatus")
    )


def q3(t: Tables) -> LazyFrame:
    customer = t["customer"].filter(col("c_mktsegment") == "BUILDING")
    orders = t["orders"].filter(col("o_orderdate") < date(1995, 3, 15)).join(customer, left_on="o_custkey", right_on="c_custkey")
    return (
        t["lineitem"]
        .filter(col("l_shipdate") > date(1995, 3, 15))
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .group_by("l_orderkey", "o_orderdate", "o_shippriority")
        .agg((col("l_extendedprice") * (1 - col("l_discount"))).sum().alias("revenue"))
        .select("l_orderkey", "revenue", "o_orderdate", "o_shippriority")
        .sort("revenue", "o_orderdate", descending=[True, False])
        .head(10)
    )


def q5(t: Tables) -> LazyFrame:
    region = t["region"].filter(col("r_name") == "ASIA")
    nation = t["nation"].join(region, left_on="n_regionkey", right_on="r_regionkey")
    supplier = t["supplier"].join(nation, left_on="s_nationkey", right_on="n_nationkey")
    orders = (
        t["orders"]
        .filter((col("o_orderdate") >= date(1994, 1, 1)) & (col("o_orderdate") < date(1995, 1, 1)))
        .join(t["customer"], left_on="o_custkey", right_on="c_custkey")
    )
    return (
        t["lineitem"]
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .join(supplier, left_on=["l_suppkey", "c_nationkey"], right_on=["s_suppkey", "s_nationkey"])
        .group_by("n_name")
        .agg((col("l_extendedprice") * (1 - col("l_discount"))).sum().alias("revenue"))
        .sort("revenue", descending=True)
    )


def q6(t: Tables) -> LazyFrame:
    return (
        t["lineitem"]
        .filter(
            (col("l_shipdate") >= date(1994, 1, 1))
            & (col("l_shipdate") < date(1995, 1, 1))
            & col("l_discount").is_between(0.05, 0.07)
            & (col("l_quantity") < 24)
        )
        .group_by()
        .agg((col("l_extendedprice") * col("l_discount")).sum().alias("revenue"))
    )


def q10(t: Tables) -> LazyFrame:
    orders = t["orders"].filter((col("o_orderdate") >= date(1993, 10, 1)) & (col("o_orderdate") < date(1994, 1, 1)))
    customer = t["customer"].join(t["nation"], left_on="c_nationkey", right_on="n_nationkey")
    return (
        t["lineitem"]
        .filter(col("l_returnflag") == "R")
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .join(customer, left_on="o_custkey", right_on="c_custkey")
        .group_by(col("o_custkey").alias("c_custkey"), "c_name", "c_acctbal", "c_phone", "n_name", "c_address", "c_comment")
        .agg((col("l_extendedprice") * (1 - col("l_discount"))).sum().alias("revenue"))
        .select("c_custkey", "c_name", "revenue", "c_acctbal", "n_name", "c_address", "c_phone", "c_comment")
        .sort("revenue", descending=True)
        .head(20)
    )


def q12(t: Tables) -> LazyFrame:
    urgent = col("o_orderpriority").is_in(["1-URGENT", "2-HIGH"])
    return (
        t["lineitem"]
        .filter(
            col("l_shipmode").is_in(["MAIL", "SHIP"])
            & (col("l_commitdate") < col("l_receiptdate"))
            & (col("l_shipdate") < col("l_commitdate"))
            & (col("l_receiptdate") >= date(1994, 1, 1))
            & (col("l_receiptdate") < date(1995, 1, 1))
        )
        .join(t["orders"], left_on="l_orderkey", right_on="o_orderkey")
        .group_by("l_shipmode")
        .agg(
            when(urgent).then(1).otherwise(0).sum().alias("high_line_count"),
            when(~urgent).then(1).otherwise(0).sum().alias("low_line_count"),
        )
        .sort("l_shipmode")
    )


def q18(t: Tables) -> LazyFrame:
    big = t["lineitem"].group_by("l_orderkey").agg(col("l_quantity").sum().alias("q")).filter(col("q") > 300).select("l_orderkey")
    orders = (
        t["orders"]
        .join(big, left_on="o_orderkey", right_on="l_orderkey", how="semi")
        .join(t["customer"], left_on="o_custkey", right_on="c_custkey")
    )
    return (
        t["lineitem"]
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .group_by("c_name", col("o_custkey").alias("c_custkey"), col("l_orderkey").alias("o_orderkey"), "o_orderdate", "o_totalprice")
        .agg(col("l_quantity").sum().alias("sum_qty"))
        .sort("o_totalprice", "o_orderdate", descending=[True, False])
        .head(100)
    )


def ds_q1(t: Tables) -> LazyFrame:
    ctr = (
        t["store_returns"]
        .join(t["date_dim"].filter(col("d_year") == 2000), left_on="sr_returned_date_sk", right_on="d_date_sk")
        .group_by(col("sr_customer_sk").alias("ctr_customer_sk"), col("sr_store_sk").alias("ctr_store_sk"))
        .agg(col("sr_return_amt").sum().alias("ctr_total_return"))
    )
    limits = ctr.group_by("ctr_store_sk").agg(col("ctr_total_return").mean().alias("avg_return")).with_columns((col("avg_return") * 1.2).alias("limit"))
    return (
        ctr.join(limits, on="ctr_store_sk")
        .filter(col("ctr_total_return") > col("limit"))
        .join(t["store"].filter(col("s_state") == "TN"), left_on="ctr_store_sk", right_on="s_store_sk")
        .join(t["customer"], left_on="ctr_customer_sk", right_on="c_customer_sk")
        .select("c_customer_id")
        .sort("c_customer_id")
        .head(100)
    )


TPCH: dict[int, Callable[[Tables], LazyFrame]] = {1: q1, 3: q3, 5: q5, 6: q6, 10: q10, 12: q12, 18: q18}
TPCDS: dict[int, Callable[[Tables], LazyFrame]] = {1: ds_q1}


# --- data and reference answers ---------------------------------------------------------------------


def _extension(kind: str) -> str:
    module = f"duckdb_extension_{kind}"
    try:
        package = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"TPC data needs the {module.replace('_', '-')} package: pip install -e '.[test]'") from exc
    files = glob.glob(os.path.join(os.path.dirname(package.__file__ or ""), "extensions", "*", f"{kind}.duckdb_extension"))
    if not files:
        raise ConfigError(f"{module} ships no extension file for this platform")
    return files[0]


def _connect(kind: str):  # type: ignore[no-untyped-def]
    import duckdb

    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute(f"LOAD '{_extension(kind)}'")
    return con


def generate(kind: str, scale: float, folder: Path, row_group_rows: int = 100_000, tables: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Generate the ``kind`` ("tpch"/"tpcds") tables at ``scale`` as Parquet under ``folder``
    (``tables``: which ones, default those the frame-API queries read; ``ALL_TABLES[kind]`` for all).

    Reuses files already there for the same scale (a ``.scale`` marker records it).
    """
    if tables is None:
        tables = TPCH_TABLES if kind == "tpch" else TPCDS_TABLES
    folder.mkdir(parents=True, exist_ok=True)
    paths = {t: folder / f"{t}.parquet" for t in tables}
    marker = folder / ".scale"
    if marker.exists() and marker.read_text() == str(scale) and all(p.exists() for p in paths.values()):
        return paths
    con = _connect(kind)
    con.execute(f"CALL {'dbgen' if kind == 'tpch' else 'dsdgen'}(sf={scale})")
    for table, path in paths.items():
        columns = []
        for name, dtype, *_ in con.execute(f"DESCRIBE {table}").fetchall():
            columns.append(f'CAST("{name}" AS DOUBLE) AS "{name}"' if dtype.startswith("DECIMAL") else f'"{name}"')
        con.execute(f"COPY (SELECT {', '.join(columns)} FROM {table}) TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE {row_group_rows})")
    con.close()
    marker.write_text(str(scale))
    return paths


def reference_sql(kind: str, number: int) -> str:
    """The official text of query ``number``, as DuckDB's extension ships it."""
    return _official_texts(kind)[number]


@functools.cache
def _official_texts(kind: str) -> dict[int, str]:
    """Every official query text of ``kind``, read once per process through one connection (a
    connection and an extension load per text took 0.1 s; the test suite reads the 121 texts
    several times, and the benchmarks every TPC-H text per run)."""
    con = _connect(kind)
    try:
        rows = con.execute(f"SELECT query_nr, query FROM {kind}_queries()").fetchall()
    finally:
        con.close()
    return {int(number): str(text) for number, text in rows}


def reference(kind: str, number: int, paths: dict[str, Path]):  # type: ignore[no-untyped-def]
    """DuckDB's answer to query ``number`` over the Parquet files ``paths`` (a pyarrow Table)."""
    import duckdb

    sql = reference_sql(kind, number)
    con = duckdb.connect()
    for table, path in paths.items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{path}')")
    try:
        return con.execute(sql).to_arrow_table()
    finally:
        con.close()


def compare(result, expected, rel_tol: float = 1e-9) -> list[str]:  # type: ignore[no-untyped-def]
    """Differences between Croupier's ``result`` (polars) and DuckDB's ``expected`` (Arrow), by
    column position and in row order: floats within ``rel_tol`` (relative), all else exactly."""
    import math
    from decimal import Decimal

    got = result.to_arrow() if hasattr(result, "to_arrow") else result
    problems = []
    if got.num_columns != expected.num_columns:
        return [f"{got.num_columns} columns {got.column_names}, DuckDB has {expected.num_columns} {expected.column_names}"]
    if got.num_rows != expected.num_rows:
        return [f"{got.num_rows} rows, DuckDB has {expected.num_rows}"]
    for i in range(got.num_columns):
        mine, theirs = got.column(i).to_pylist(), expected.column(i).to_pylist()
        for row, (a, b) in enumerate(zip(mine, theirs)):
            a = int(a) if isinstance(a, Decimal) and a == a.to_integral_value() else a
            b = int(b) if isinstance(b, Decimal) and b == b.to_integral_value() else b
            if isinstance(a, float) or isinstance(b, float):
                ok = a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=1e-12)
            else:
                ok = a == b
            if not ok:
                problems.append(f"column {i} ({expected.column_names[i]}) row {row}: {a!r} != DuckDB {b!r}")
                break
    return problems
