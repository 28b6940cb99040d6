"""TPC-H 1, 3, 5, 6, 10, 12, 18 and TPC-DS 1: Croupier beside DuckDB and Polars on the same Parquet files.

Tables come from DuckDB's generators (see croupier/examples/tpc.py) and are cached under the data
folder. Per query, each engine runs ``--repeat`` times and its fastest time counts:

* Croupier: the lazy-API query (croupier/examples/tpc.py) on local worker processes, storage the
  local folder (or SeaweedFS with ``--store s3``); worker start-up is paid once, before timing;
* DuckDB: the official query text from DuckDB's extension over ``read_parquet`` views;
* Polars: the same lazy-API query translated with ``LazyFrame.to_polars()`` (local files only).

Every Croupier and Polars result is checked against DuckDB's before its time is printed.

    python bench/tpc_vs_peers.py [--scale 1] [--repeat 3] [--store local|s3]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import duckdb

import croupier.frame as cf
from croupier.compute import LocalExecutor
from croupier.config import Config
from croupier.examples.tpc import TPCDS, TPCH, compare, generate, reference_sql
from croupier.storage import open_store
from croupier.testing import SeaweedFS

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, s3_config  # noqa: E402


def best(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), result


def duck(kind: str, number: int, paths: dict[str, Path]):  # type: ignore[no-untyped-def]
    con = duckdb.connect()
    for table, path in paths.items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{path}')")
    sql = reference_sql(kind, number)
    return lambda: con.execute(sql).to_arrow_table()


def frames(kind: str, paths: dict[str, Path], root: str | None, config: Config) -> dict[str, cf.LazyFrame]:
    if root is None:
        return {n: cf.scan_parquet(p, config=config) for n, p in paths.items()}
    store = open_store(root, config)
    for name, path in paths.items():
        store.put(f"{kind}/{name}.parquet", path.read_bytes())
    return {n: cf.scan_parquet(f"{root}/{kind}/{n}.parquet", config=config) for n in paths}


def run(args: argparse.Namespace, config: Config, root: str | None, data: Path) -> None:
    rows = []
    with LocalExecutor(config) as executor:
        for kind, queries in (("tpch", TPCH), ("tpcds", TPCDS)):
            paths = generate(kind, args.scale, data / f"{kind}-sf{args.scale}")
            local = frames(kind, paths, None, config)
            mine = frames(kind, paths, root, config)
            if kind == "tpch":
                TPCH[6](mine).collect(executor=executor)  # start the workers before timing
            for number, query in queries.items():
                d_time, expected = best(duck(kind, number, paths), args.repeat)
                c_time, got = best(lambda q=query, t=mine: q(t).collect(executor=executor), args.repeat)
                p_time, polars_got = best(lambda q=query, t=local: q(t).to_polars().collect(), args.repeat)
                bad = compare(got, expected) + [f"polars: {p}" for p in compare(polars_got, expected)]  # type: ignore[arg-type]
                rows.append((f"{kind} q{number}", c_time, d_time, p_time, got.height, "ok" if not bad else "; ".join(bad[:2])))  # type: ignore[union-attr]
                print(f"  {rows[-1][0]:<9} croupier {c_time:7.3f} s  duckdb {d_time:7.3f} s  polars {p_time:7.3f} s  {rows[-1][5]}", flush=True)
    print(f"\nscale factor {args.scale}, store {args.store}, {config.concurrency} functions, {os.cpu_count()} cores; best of {args.repeat}")
    print(f"{'query':<10} {'croupier s':>10} {'duckdb s':>9} {'polars s':>9} {'÷ duckdb':>9} {'÷ polars':>9} {'rows':>6}  result")
    for name, c, d, p, n, ok in rows:
        print(f"{name:<10} {c:>10.3f} {d:>9.3f} {p:>9.3f} {c / d:>9.2f} {c / p:>9.2f} {n:>6}  {ok}")
    geo_d = math.exp(sum(math.log(c / d) for _, c, d, _, _, _ in rows) / len(rows))
    geo_p = math.exp(sum(math.log(c / p) for _, c, _, p, _, _ in rows) / len(rows))
    print(f"geometric mean: {geo_d:.2f}x DuckDB, {geo_p:.2f}x Polars")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    data = default_dir(int(args.scale * 2e9), "croupier-bench-tpc")
    config = Config(concurrency=args.concurrency, progress=False)
    if args.store == "local":
        tmp = data / "tmp"
        run(args, config.with_(tmp_url=tmp.as_uri()), None, data)
        return
    with tempfile.TemporaryDirectory(prefix="croupier-weed-") as folder, SeaweedFS(Path(folder)) as server:
        server.wait_ready("bench")
        s3 = s3_config(config, server).with_(tmp_url="s3://bench/tmp")
        run(args, s3, "s3://bench/tpc", data)


if __name__ == "__main__":
    main()
