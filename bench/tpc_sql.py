"""All TPC-H and TPC-DS queries from their official SQL texts (DuckDB's ``tpch_queries()`` and
``tpcds_queries()``) through ``croupier.sql``, each answer checked against DuckDB's.

Tables come from DuckDB's generators (croupier/examples/tpc.py), cached under the data folder.
Croupier runs each query either as its plan translated to Polars (``--engine polars``, the
reference semantics, aggregations split into ``--partials`` chunks) or on the engine
(``--engine croupier``: ``collect()`` on local worker processes). Answers are compared with
DuckDB's: values (floats to 1e-9 relative), NULLs, names, DuckDB's types as mapped, and row
order under ORDER BY. Prints one line per query and the list of queries that do not pass.

    python bench/tpc_sql.py [--scale 0.1] [--suite tpch|tpcds|all] [--engine polars|croupier] [--queries 1 5 67]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import sqlglot

import croupier
from croupier.config import Config
from croupier.errors import CroupierError
from croupier.examples.tpc import ALL_TABLES, generate, reference_sql
from croupier.sql.types import duckdb_dtype

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from _common import default_dir  # noqa: E402
from tests.compare import differences  # noqa: E402

COUNTS = {"tpch": 22, "tpcds": 99}


def duckdb_answer(query: str, paths: dict[str, Path]) -> tuple[pl.DataFrame, float]:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    for table, path in paths.items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{path}')")
    started = time.perf_counter()
    cursor = con.execute(query)
    types = [str(d[1]) for d in cursor.description]
    frame: pl.DataFrame = pl.from_arrow(cursor.to_arrow_table())  # type: ignore[assignment]
    seconds = time.perf_counter() - started
    con.close()
    return frame.with_columns([pl.col(c).cast(duckdb_dtype(t)) for c, t in zip(frame.columns, types) if t != "NULL"]), seconds


def run_one(kind: str, number: int, paths: dict[str, Path], engine: str, partials: int, config: Config) -> tuple[str, str]:
    query = reference_sql(kind, number)
    expected, duck_s = duckdb_answer(query, paths)
    started = time.perf_counter()
    try:
        frame = croupier.sql(query, {t: str(p) for t, p in paths.items()}, config=config)
        got = frame.to_polars(partials=partials).collect() if engine == "polars" else frame.collect()
    except (CroupierError, pl.exceptions.PolarsError, ValueError) as exc:  # reported per query; the run goes on
        return "ERROR", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    seconds = time.perf_counter() - started
    ordered = sqlglot.parse_one(query, dialect="duckdb").args.get("order") is not None
    problems = differences(got, expected, ordered=ordered)
    timing = f"croupier {seconds:6.2f} s, duckdb {duck_s:6.2f} s, {expected.height} rows"
    return ("PASS", timing) if not problems else ("FAIL", "; ".join(problems[:3]) + f" ({timing})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--suite", choices=["tpch", "tpcds", "all"], default="all")
    parser.add_argument("--engine", choices=["polars", "croupier"], default="polars")
    parser.add_argument("--partials", type=int, default=2, help="chunks the Polars translation splits aggregations into")
    parser.add_argument("--queries", type=int, nargs="*", default=None)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    config = Config(concurrency=args.concurrency)
    failing: dict[str, list[str]] = {}
    for kind in ("tpch", "tpcds") if args.suite == "all" else (args.suite,):
        paths = generate(kind, args.scale, default_dir(int(args.scale * 3e9), f"tpc-sql-{kind}-{args.scale}"), tables=ALL_TABLES[kind])
        passed = 0
        for number in args.queries or range(1, COUNTS[kind] + 1):
            status, detail = run_one(kind, number, paths, args.engine, args.partials, config)
            print(f"{kind} q{number:<3} {status:<5} {detail}", flush=True)
            passed += status == "PASS"
            if status != "PASS":
                failing.setdefault(kind, []).append(f"q{number}")
        print(f"{kind}: {passed} passed of {len(args.queries or range(1, COUNTS[kind] + 1))} at SF {args.scale}")
    print("not passing:", failing or "none")


if __name__ == "__main__":
    main()
