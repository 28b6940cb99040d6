"""TeraSort on this machine: Croupier (``croupier sort`` and the frame API) beside DuckDB and Polars.

Prints, per engine, the median wall time of ``--repeat`` runs (engines interleaved round by round,
so a slow spell of this noisy VM hits all of them), the ratios to DuckDB and to Polars, and
valsort's verdict for every output. Nothing is asserted.

    python bench/sort_vs_peers.py --size 2GB [--repeat 3] [--workers P] [--dir DIR] [--s3]

Data: gensort records written as Parquet (key, payload), sorted Parquet -> Parquet by every engine:
``croupier sort IN OUT --format parquet``; the frame API's
``scan_parquet(IN).sort("key").sink_parquet(OUT)`` (the same TeraSort plan, so byte-identical
output); DuckDB's ``COPY (SELECT * ... ORDER BY key) TO``; Polars' ``scan_parquet().sort().sink_parquet``.
With ``--s3``, Croupier also sorts with input and output on a SeaweedFS server on loopback. By
default the folder is in /dev/shm when it has room (this VM's disk throttles sustained writes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Callable

import croupier.frame as cf
from croupier.config import Config
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.ops.formats import read_records, write_records
from croupier.storage import open_store
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, seaweedfs, timed  # noqa: E402


def to_parquet(src: str, dst: str, config: Config) -> None:
    """Write every gensort part of ``src`` as a Parquet object of ``dst`` (not timed)."""
    import json

    source, target = open_store(src, config), open_store(dst, config)
    manifest = json.loads(bytes(source.get("_SUCCESS")))
    for i, part in enumerate(manifest["parts"]):
        records = read_records(source.get(part["key"]), "gensort", part["key"])
        target.put(f"part-{i:05d}.parquet", write_records(records, "parquet"))


def check(out_url: str, in_url: str, config: Config) -> str:
    result, _ = valsort(out_url, config, in_url)
    return "valid" if result.ok else "INVALID: " + "; ".join(result.problems)


def run_duckdb(in_dir: Path, out_dir: Path) -> None:
    import duckdb

    out_dir.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * FROM read_parquet('{in_dir}/*.parquet') ORDER BY key) TO '{out_dir}/out.parquet' (FORMAT parquet)")
    con.close()


def run_polars(in_dir: Path, out_dir: Path) -> None:
    import polars as pl

    out_dir.mkdir(parents=True, exist_ok=True)
    pl.scan_parquet(f"{in_dir}/*.parquet").sort("key").sink_parquet(out_dir / "out.parquet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="2GB")
    parser.add_argument("--workers", type=int, default=None, help="force Croupier's P (default: the selector's choice)")
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--s3", action="store_true", help="also sort on a SeaweedFS server")
    parser.add_argument("--repeat", type=int, default=3, help="runs per engine; the median is reported")
    args = parser.parse_args()

    size = parse_size(args.size)
    root = Path(args.dir).resolve() if args.dir else default_dir(size, "croupier-bench")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    config = Config(concurrency=args.concurrency, progress=False, workers=args.workers)
    url = lambda name: (root / name).as_uri()  # noqa: E731
    print(f"data: {format_bytes(size)} ({size // 100:,} records) in {root}; Croupier P={args.workers or 'auto'}, concurrency {args.concurrency}; median of {args.repeat}")
    try:
        gensort(url("gen"), size, max(args.concurrency, size // 100_000_000), config, seed=1)
        to_parquet(url("gen"), url("in"), config)
        shutil.rmtree(root / "gen", ignore_errors=True)
        engines: dict[str, tuple[Callable[[], object], str]] = {
            "croupier sort (parquet->parquet)": (lambda: sort(url("in"), url("out-c"), None, config, "parquet"), "out-c"),
            "croupier frame API (parquet->parquet)": (lambda: cf.scan_parquet(root / "in", config=config).sort("key").sink_parquet(root / "out-f"), "out-f"),
            "duckdb parquet->parquet": (lambda: run_duckdb(root / "in", root / "out-d"), "out-d"),
            "polars parquet->parquet": (lambda: run_polars(root / "in", root / "out-p"), "out-p"),
        }
        times: dict[str, list[float]] = {name: [] for name in engines}
        verdicts: dict[str, str] = {}
        for round_ in range(args.repeat):
            for name, (fn, out) in engines.items():
                shutil.rmtree(root / out, ignore_errors=True)
                times[name].append(timed(fn))
                if round_ == 0:
                    verdicts[name] = check(url(out), url("in"), config)
                print(f"  round {round_ + 1}: {name:<40} {times[name][-1]:7.2f} s  {verdicts[name]}", flush=True)
                shutil.rmtree(root / out, ignore_errors=True)
        medians = {name: statistics.median(t) for name, t in times.items()}
        if args.s3:
            bench_s3(size, args, config, medians, verdicts)
        report(medians, verdicts)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_s3(size: int, args: argparse.Namespace, config: Config, medians: dict[str, float], verdicts: dict[str, str]) -> None:
    """The same sort with both input and output on a SeaweedFS server on loopback."""
    with seaweedfs(config) as (_, s3):
        gensort("s3://bench/in", size, max(args.concurrency, size // 100_000_000), s3, seed=1)
        runs = []
        for i in range(args.repeat):
            runs.append(timed(lambda i=i: sort("s3://bench/in", f"s3://bench/out{i}", None, s3)))
        name = "croupier sort (SeaweedFS, gensort)"
        medians[name] = statistics.median(runs)
        verdicts[name] = check("s3://bench/out0", "s3://bench/in", s3)
        print(f"  {name:<40} {medians[name]:7.2f} s  {verdicts[name]}", flush=True)


def report(medians: dict[str, float], verdicts: dict[str, str]) -> None:
    peers = {k: v for k, v in medians.items() if k.startswith(("duckdb", "polars"))}
    print("\n" + f"{'engine (median s)':<42} {'seconds':>8}  " + "  ".join(f"{'/' + p.split()[0]:>8}" for p in peers) + "  valsort")
    for name, seconds in medians.items():
        ratios = "  ".join(f"{seconds / t:>8.2f}" for t in peers.values())
        print(f"{name:<42} {seconds:>8.2f}  {ratios}  {verdicts[name]}")


if __name__ == "__main__":
    main()
