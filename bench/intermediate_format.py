"""Shuffle-object encoding: raw records against Arrow IPC with lz4 or zstd, on both stores.

For each store (local folder, SeaweedFS) and each encoding, sorts the same data and prints the map
and reduce stage times, the sort's wall time and the bytes shuffled. Croupier's default
(``Config.intermediate_format``) is the encoding that measured fastest here.

    python bench/intermediate_format.py [--size 1GB] [--workers 4] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from croupier.config import Config
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.report import RunReport
from croupier.storage import open_store
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, seaweedfs  # noqa: E402

ENCODINGS = ("raw", "arrow-lz4", "arrow-zstd")


def measure(store_name: str, base: str, config: Config, size: int, workers: int, repeat: int) -> None:
    """Sort ``base``/in with every encoding; print one row each (best wall time of ``repeat``)."""
    gensort(f"{base}/in", size, max(config.concurrency, size // 100_000_000), config, seed=3, overwrite=True)
    for encoding in ENCODINGS:
        best: RunReport | None = None
        for _ in range(repeat):
            report = sort(f"{base}/in", f"{base}/out", workers, config.with_(intermediate_format=encoding), overwrite=True)
            best = report if best is None or report.wall_seconds < best.wall_seconds else best
        assert best is not None
        ok = valsort(f"{base}/out", config, f"{base}/in")[0].ok
        print(
            f"{store_name:<10} {encoding:<11} {best.stage('map').wall_seconds:>7.2f} {best.stage('reduce').wall_seconds:>8.2f} "
            f"{best.wall_seconds:>7.2f} {format_bytes(best.summary['shuffle_bytes']):>11}  {'valid' if ok else 'INVALID'}",
            flush=True,
        )
    open_store(base, config).delete_prefix()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1GB")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()
    size = parse_size(args.size)
    config = Config(concurrency=args.concurrency, progress=False)
    print(f"{format_bytes(size)}, P={args.workers}, concurrency {args.concurrency}, best of {args.repeat}")
    print(f"{'store':<10} {'encoding':<11} {'map s':>7} {'reduce s':>8} {'sort s':>7} {'shuffled':>11}  valsort")
    root = default_dir(size, "croupier-bench-codec")
    try:
        measure("local", root.as_uri(), config, size, args.workers, args.repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if not args.skip_s3:
        with seaweedfs(config) as (_, s3):
            measure("seaweedfs", "s3://bench/codec", s3, size, args.workers, args.repeat)


if __name__ == "__main__":
    main()
