"""All 22 TPC-H queries as SQL: Croupier (warm session and cold) beside DuckDB and Polars, same files.

Tables come from DuckDB's generator (croupier/examples/tpc.py) at ``--sf`` and are cached under the
data folder (``--data``, default /dev/shm when it has room); each table is then split into up to
``--files`` Parquet files (by row groups) in a folder of its own, so Croupier's plans run several
scan tasks. Every engine reads those same files:

* Croupier warm: ``croupier.sql(text, tables).collect()`` inside one :class:`croupier.Session`
  whose worker pool was started (and used once) before timing;
* Croupier cold: the same, each run in a new session (worker start-up and first imports included);
* DuckDB: the official text over ``read_parquet`` views (all cores);
* Polars: the official text through ``pl.SQLContext`` over ``scan_parquet``; where Polars' SQL
  cannot run a text, the equivalent lazy plan (Croupier's plan translated by ``to_polars()``),
  marked ``*``.

Per query each engine runs ``--repeat`` times (interleaved) and the median counts. Croupier refits
its cached profile from finished runs on a background thread once the process is idle; the
script lets that refit finish after each Croupier run, untimed, so that it lands on no engine's
timing (it otherwise took a core for half a second from whichever run came next). Every answer is
checked against DuckDB's (one thread: one order for ties): Croupier's exactly (values, names,
types, order under ORDER BY), Polars' by values. Prints per-query times and ratios, then geometric
means over the queries every engine answered.

    python bench/tpc_vs_peers.py [--sf 1] [--repeat 3] [--files 4] [--queries 1 5 9] [--no-cold]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import duckdb
import polars as pl
import pyarrow.parquet as pq

import croupier
from croupier.config import Config
from croupier.dag.profiles import wait_learning
from croupier.errors import CroupierError
from croupier.examples.tpc import ALL_TABLES, generate, reference_sql

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from _common import default_dir  # noqa: E402
from tests.compare import differences  # noqa: E402
from tests.tpc_sql_common import duckdb_answer, is_ordered  # noqa: E402


def split_tables(paths: dict[str, Path], folder: Path, files: int) -> dict[str, Path]:
    """Each table as a folder of up to ``files`` Parquet files (whole row groups each), cached."""
    out = {}
    for table, path in paths.items():
        target = folder / table
        out[table] = target
        marker = target / ".done"
        if marker.exists() and marker.read_text() == f"{files} {path.stat().st_mtime_ns}":
            continue
        target.mkdir(parents=True, exist_ok=True)
        for old in target.glob("*.parquet"):
            old.unlink()
        source = pq.ParquetFile(path)
        groups = source.num_row_groups
        parts = max(1, min(files, groups))
        for part in range(parts):
            chosen = list(range(part * groups // parts, (part + 1) * groups // parts))
            with pq.ParquetWriter(target / f"part-{part:03d}.parquet", source.schema_arrow) as writer:
                for group in chosen:
                    writer.write_table(source.read_row_group(group))
        marker.write_text(f"{files} {path.stat().st_mtime_ns}")
    return out


def duck_runner(query: str, folders: dict[str, Path]) -> Callable[[], Any]:
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    for table, folder in folders.items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{folder}/*.parquet')")
    return lambda: con.execute(query).to_arrow_table()


def polars_runner(query: str, folders: dict[str, Path], config: Config) -> tuple[Callable[[], pl.DataFrame], str]:
    """Polars' SQL for ``query`` if it can run it, else the equivalent lazy plan (marked ``*``)."""
    ctx = pl.SQLContext({t: pl.scan_parquet(f"{f}/*.parquet") for t, f in folders.items()})
    try:
        ctx.execute(query).collect()
        return (lambda: ctx.execute(query).collect()), ""
    except (pl.exceptions.PolarsError, ValueError, TypeError, AttributeError):  # Polars' SQL dialect gaps
        plan = croupier.sql(query, {t: str(f) for t, f in folders.items()}, config=config).to_polars()
        return (lambda: plan.collect()), "*"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def check(got: pl.DataFrame, expected: pl.DataFrame, ordered: bool, exact: bool) -> str:
    if not exact and len(got.columns) == len(expected.columns):
        got = got.rename(dict(zip(got.columns, expected.columns)))
    problems = differences(got, expected, ordered, dtypes=exact)
    return "ok" if not problems else "; ".join(problems[:2])


def run_query(number: int, folders: dict[str, Path], session: croupier.Session, config: Config, args: argparse.Namespace) -> dict[str, Any]:
    query = reference_sql("tpch", number)
    urls = {t: str(f) for t, f in folders.items()}
    expected = duckdb_answer(query, {t: Path(f"{f}/*.parquet") for t, f in folders.items()})
    ordered = is_ordered(query)
    duck = duck_runner(query, folders)
    polars, mark = polars_runner(query, folders, config)

    def warm() -> pl.DataFrame:
        return croupier.sql(query, urls, config=config).collect(executor=session.executor(config))

    def cold() -> pl.DataFrame:
        with croupier.Session(config) as fresh:
            return croupier.sql(query, urls, config=config).collect(executor=fresh.executor(config))

    engines: dict[str, Callable[[], Any]] = {"croupier": warm, "duckdb": duck, "polars": polars}
    if not args.no_cold:
        engines["cold"] = cold
    times: dict[str, list[float]] = {name: [] for name in engines}
    status: dict[str, str] = {}
    for _ in range(args.repeat):  # interleaved: machine noise hits every engine alike
        for name, fn in engines.items():
            try:
                seconds, value = timed(fn)
                if name in ("croupier", "cold"):
                    wait_learning(60)
            except (CroupierError, pl.exceptions.PolarsError, ValueError) as exc:  # reported per query
                status[name] = f"ERROR {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                continue
            times[name].append(seconds)
            if name != "duckdb" and name not in status:
                frame = value if isinstance(value, pl.DataFrame) else pl.from_arrow(value)
                status[name] = check(frame, expected, ordered, exact=name != "polars")  # type: ignore[arg-type]
    row = {name: statistics.median(ts) if ts and status.get(name, "ok") == "ok" else math.nan for name, ts in times.items()}
    row.update(number=number, rows=expected.height, mark=mark, status={k: v for k, v in status.items() if v != "ok"})
    return row


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def report(rows: list[dict[str, Any]], args: argparse.Namespace, config: Config) -> None:
    cold = not args.no_cold
    print(f"\nTPC-H SF {args.sf}, {args.files} files per table, {config.concurrency} functions, {os.cpu_count()} cores; median of {args.repeat}")
    head = f"{'query':<6} {'croupier':>9} {'cold':>8} {'duckdb':>8} {'polars':>8} {'÷duckdb':>8} {'÷polars':>8} {'cold÷duck':>9} {'rows':>6}"
    print(head)
    for r in rows:
        c, d, p, k = r["croupier"], r["duckdb"], r["polars"], r.get("cold", math.nan)
        problems = "  " + "; ".join(f"{n}: {s}" for n, s in r["status"].items()) if r["status"] else ""
        print(f"q{r['number']:<5} {c:>9.3f} {k:>8.3f} {d:>8.3f} {p:>7.3f}{r['mark'] or ' '} {c / d:>8.2f} {c / p:>8.2f} {k / d:>9.2f} {r['rows']:>6}{problems}")
    ok = [r for r in rows if not any(math.isnan(r[n]) for n in ("croupier", "duckdb", "polars"))]
    print(f"geometric mean over {len(ok)} queries: croupier {geomean([r['croupier'] / r['duckdb'] for r in ok]):.2f}x DuckDB, "
          f"{geomean([r['croupier'] / r['polars'] for r in ok]):.2f}x Polars; polars {geomean([r['polars'] / r['duckdb'] for r in ok]):.2f}x DuckDB")
    if cold:
        both = [r for r in ok if not math.isnan(r["cold"])]
        print(f"cold session: {geomean([r['cold'] / r['duckdb'] for r in both]):.2f}x DuckDB; "
              f"cold - warm: median {statistics.median([r['cold'] - r['croupier'] for r in both]) if both else math.nan:.3f} s")
    wrong = [f"q{r['number']}" for r in rows if r["status"]]
    print("queries with errors or wrong answers:", ", ".join(wrong) or "none")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (1, 10, ...)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", type=int, default=4, help="Parquet files per table (at most its row groups)")
    parser.add_argument("--queries", type=int, nargs="*", default=None)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--data", type=Path, default=None, help="data folder (default: /dev/shm if room, else ./bench-data)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-session runs")
    args = parser.parse_args()
    data = args.data or default_dir(int(args.sf * 1.5e9), "croupier-bench-tpch")
    base = generate("tpch", args.sf, data / f"sf{args.sf:g}", tables=ALL_TABLES["tpch"])
    folders = split_tables(base, data / f"sf{args.sf:g}-files{args.files}", args.files)
    config = Config(concurrency=args.concurrency, progress=False, tmp_url=(data / "tmp").as_uri())
    rows = []
    with croupier.Session(config) as session:
        croupier.sql("SELECT count(*) AS n FROM nation", {"nation": str(folders["nation"])}, config=config).collect(executor=session.executor(config))
        for number in args.queries or range(1, 23):
            rows.append(run_query(number, folders, session, config, args))
            r = rows[-1]
            print(f"  q{number:<3} croupier {r['croupier']:.3f} s, cold {r.get('cold', math.nan):.3f} s, duckdb {r['duckdb']:.3f} s, "
                  f"polars {r['polars']:.3f} s{r['mark']}  {r['status'] or 'ok'}", flush=True)
    report(rows, args, config)


if __name__ == "__main__":
    main()
