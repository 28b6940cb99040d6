"""Group-by on TeraSort records: Croupier beside DuckDB and Polars, few and many groups.

The 20M records of a 2 GB TeraSort input (gensort, seed 1) become a Parquet table with the
record's key and payload plus two group columns cut from the key — ``g16`` (its first two bytes:
65,536 groups) and ``g24`` (its first three bytes: about 12 million groups for 20M records) — and
a value ``v`` (the key's last four bytes). Every engine runs

    SELECT g, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi FROM t GROUP BY g

for g = g16 and g = g24, reading the same files; results are checked equal (sorted). Prints the
median of ``--repeat`` interleaved rounds, the ratios to DuckDB and Polars, and, with
``--profile``, where Croupier's time went per stage and phase (from its run report).

    python bench/groupby_vs_peers.py [--size 2GB] [--repeat 3] [--profile]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

import croupier.frame as cf
from croupier.config import Config
from croupier.frame import col, count
from croupier.ops.gensort import generate
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, timed  # noqa: E402

PARTS = 20


def write_table(root: Path, records: int) -> None:
    """The records as Parquet parts with group and value columns (not timed)."""
    (root / "t").mkdir(parents=True)
    bounds = np.linspace(0, records, PARTS + 1).astype(int)
    for i in range(PARTS):
        recs = generate(int(bounds[i]), int(bounds[i + 1] - bounds[i]), seed=1)
        key = np.ascontiguousarray(recs[:, :10])
        g16 = (key[:, 0].astype(np.uint32) << 8) | key[:, 1]
        g24 = (g16 << 8) | key[:, 2]
        v = np.ascontiguousarray(key[:, 6:10]).view(">u4").ravel().astype(np.int64)
        n = len(recs)
        table = pa.table(
            {
                "key": pa.FixedSizeBinaryArray.from_buffers(pa.binary(10), n, [None, pa.py_buffer(key)]),
                "payload": pa.FixedSizeBinaryArray.from_buffers(pa.binary(90), n, [None, pa.py_buffer(np.ascontiguousarray(recs[:, 10:]))]),
                "g16": pa.array(g16.astype(np.int32)),
                "g24": pa.array(g24.astype(np.int32)),
                "v": pa.array(v),
            }
        )
        pq.write_table(table, root / "t" / f"part-{i:05d}.parquet", compression="lz4")


def croupier_query(root: Path, group: str, config: Config) -> pl.DataFrame:
    lf = cf.scan_parquet(root / "t", config=config)
    q = lf.group_by(group).agg(count().alias("n"), col("v").sum().alias("s"), col("v").min().alias("lo"), col("v").max().alias("hi"))
    out = q.collect()
    croupier_query.last = q  # type: ignore[attr-defined]
    return out


def duckdb_query(root: Path, group: str) -> pl.DataFrame:
    import duckdb

    con = duckdb.connect()
    sql = f"SELECT {group}, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi FROM read_parquet('{root}/t/*.parquet') GROUP BY {group}"
    df = pl.from_arrow(con.execute(sql).to_arrow_table())
    con.close()
    assert isinstance(df, pl.DataFrame)
    return df


def polars_query(root: Path, group: str) -> pl.DataFrame:
    lf = pl.scan_parquet(f"{root}/t/*.parquet")
    return lf.group_by(group).agg(pl.len().alias("n"), pl.col("v").sum().alias("s"), pl.col("v").min().alias("lo"), pl.col("v").max().alias("hi")).collect()


def same(a: pl.DataFrame, b: pl.DataFrame, group: str) -> bool:
    cast = {"n": pl.Int64, "s": pl.Int64, "lo": pl.Int64, "hi": pl.Int64, group: pl.Int64}
    return a.cast(cast).sort(group).equals(b.cast(cast).sort(group))  # type: ignore[arg-type]


def profile(q: cf.LazyFrame) -> None:
    """Where Croupier's time went: per stage, wall and the heaviest phases (task seconds)."""
    report = q.last_run.report  # type: ignore[union-attr]
    for s in report.stages:
        if not s.phases:
            continue
        phases = sorted(s.phases.items(), key=lambda kv: -kv[1][1])[:4]
        text = ", ".join(f"{k} {v[1]:.2f}s ({format_bytes(v[0])})" for k, v in phases)
        print(f"      {s.name:<24} wall {s.wall_seconds:6.2f} s, {s.tasks:>3} tasks: {text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="2GB", help="TeraSort bytes the records come from (100 bytes each)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    size = parse_size(args.size)
    root = default_dir(size * 2, "croupier-groupby")
    shutil.rmtree(root, ignore_errors=True)
    records = size // 100
    config = Config(concurrency=args.concurrency, progress=False, tmp_url=(root / "tmp").as_uri())
    try:
        write_table(root, records)
        print(f"data: {records:,} records ({format_bytes(size)} of TeraSort) as {PARTS} Parquet parts in {root}; median of {args.repeat}")
        for group in ("g16", "g24"):
            engines = {
                "croupier": lambda: croupier_query(root, group, config),
                "duckdb": lambda: duckdb_query(root, group),
                "polars": lambda: polars_query(root, group),
            }
            times: dict[str, list[float]] = {k: [] for k in engines}
            results: dict[str, pl.DataFrame] = {}
            for _ in range(args.repeat):
                for name, fn in engines.items():
                    times[name].append(timed(lambda fn=fn, name=name: results.__setitem__(name, fn())))
            med = {k: statistics.median(v) for k, v in times.items()}
            ok = all(same(results["croupier"], results[k], group) for k in ("duckdb", "polars"))
            groups = results["duckdb"].height
            print(f"\ngroup by {group} ({groups:,} groups): results {'equal' if ok else 'DIFFER'}")
            for name, seconds in med.items():
                print(f"  {name:<9} {seconds:7.2f} s   /duckdb {seconds / med['duckdb']:5.2f}   /polars {seconds / med['polars']:5.2f}")
            if args.profile:
                profile(croupier_query.last)  # type: ignore[attr-defined]
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
