"""TeraSort on this machine: Croupier beside DuckDB and Polars on the same data, then on SeaweedFS.

Prints wall times, the ratio Croupier/peer, and valsort's verdict for every output. Timings are
measured here, in one run, on the same generated data in the same folder; nothing is asserted.

    python bench/sort_vs_peers.py --size 2GB [--workers 4] [--dir /dev/shm/croupier-bench] [--skip-s3]

Data: gensort records (Croupier's own ``gensort``), also written as Parquet (key, payload) for the
peers, which sort Parquet into Parquet. Croupier is timed both gensort->gensort and
Parquet->Parquet. By default the folder is in /dev/shm when it has room (a memory-backed local
folder: the disk of this VM throttles sustained writes and makes timings noisy); --dir changes it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

from croupier.config import Config
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.ops.formats import read_records, write_records
from croupier.storage import open_store
from croupier.testing import SeaweedFS
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, s3_config, timed  # noqa: E402


def to_parquet(src: str, dst: str, config: Config) -> None:
    """Write every gensort object of ``src`` as a Parquet object of ``dst`` (not timed)."""
    source, target = open_store(src, config), open_store(dst, config)
    for obj in source.list():
        if obj.key.endswith(".dat"):
            records = read_records(source.get(obj.key), "gensort", obj.key)
            target.put(obj.key.replace(".dat", ".parquet"), write_records(records, "parquet"))


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
    parser.add_argument("--workers", type=int, default=4, help="Croupier's P (mappers = reducers)")
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="runs per engine; the best is reported")
    args = parser.parse_args()

    size = parse_size(args.size)
    root = Path(args.dir).resolve() if args.dir else default_dir(size, "croupier-bench")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    config = Config(concurrency=args.concurrency, progress=False)
    url = lambda name: (root / name).as_uri()  # noqa: E731
    print(f"data: {format_bytes(size)} ({size // 100:,} records) in {root}; Croupier P={args.workers}, concurrency {args.concurrency}")
    try:
        gen = gensort(url("in"), size, max(args.concurrency, size // 100_000_000), config, seed=1)
        print(f"gensort: {gen.wall_seconds:.2f} s")
        to_parquet(url("in"), url("in-parquet"), config)

        runs: dict[str, tuple[float, str]] = {}

        def bench(name: str, fn: Callable[[], object], out: str, inp: str) -> None:
            best = float("inf")
            for _ in range(args.repeat):
                shutil.rmtree(root / out, ignore_errors=True)
                best = min(best, timed(fn))
            runs[name] = (best, check(url(out), url(inp), config))
            print(f"  {name:<34} {best:7.2f} s  {runs[name][1]}", flush=True)

        bench("croupier gensort->gensort (local)", lambda: sort(url("in"), url("out-c"), args.workers, config), "out-c", "in")
        bench("croupier parquet->parquet (local)", lambda: sort(url("in-parquet"), url("out-cp"), args.workers, config, "parquet"), "out-cp", "in-parquet")
        bench("duckdb parquet->parquet", lambda: run_duckdb(root / "in-parquet", root / "out-d"), "out-d", "in-parquet")
        bench("polars parquet->parquet", lambda: run_polars(root / "in-parquet", root / "out-p"), "out-p", "in-parquet")
        if not args.skip_s3:
            bench_s3(size, args, config, runs)
        report(runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_s3(size: int, args: argparse.Namespace, config: Config, runs: dict[str, tuple[float, str]]) -> None:
    """The same sort with both input and output on a SeaweedFS server on loopback."""
    with tempfile.TemporaryDirectory(prefix="croupier-weed-") as tmp, SeaweedFS(Path(tmp)) as server:
        server.wait_ready("bench")
        s3 = s3_config(config, server)
        gensort("s3://bench/in", size, max(args.concurrency, size // 100_000_000), s3, seed=1)
        seconds = timed(lambda: sort("s3://bench/in", "s3://bench/out", args.workers, s3))
        verdict = check("s3://bench/out", "s3://bench/in", s3)
        runs["croupier gensort->gensort (SeaweedFS)"] = (seconds, verdict)
        print(f"  {'croupier gensort->gensort (SeaweedFS)':<34} {seconds:7.2f} s  {verdict}", flush=True)


def report(runs: dict[str, tuple[float, str]]) -> None:
    peers = {k: v[0] for k, v in runs.items() if not k.startswith("croupier")}
    print("\n" + f"{'engine':<38} {'seconds':>8}  " + "  ".join(f"{'/' + p.split()[0]:>8}" for p in peers) + "  valsort")
    for name, (seconds, verdict) in runs.items():
        ratios = "  ".join(f"{seconds / t:>8.2f}" for t in peers.values())
        print(f"{name:<38} {seconds:>8.2f}  {ratios}  {verdict}")


if __name__ == "__main__":
    main()
