"""Where each exchange algorithm wins: exchange time over a grid of P and data sizes, on both stores.

For every (store, size, P) all topology candidates of P (up to --max-levels), each with and without
write combining, sort the same data. "exchange s" is the wall time of the stages that move the
data (map + intermediate levels + reduce; the reduce includes the final sort, the map the
partitioning, identical for every algorithm). The fastest plan of each group is marked with *.

    python bench/exchange_grid.py [--sizes 50MB,200MB] [--workers 4,8,16] [--max-levels 3] [--skip-s3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from croupier.compute import LocalExecutor
from croupier.config import Config
from croupier.exchange.plan import all_plans
from croupier.jobs import exchange_stats
from croupier.jobs.gensort import gensort
from croupier.storage import open_store
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, seaweedfs  # noqa: E402


def grid(store: str, base: str, config: Config, sizes: list[int], workers: list[int], max_levels: int) -> None:
    with LocalExecutor(config) as executor:
        for size in sizes:
            gensort(f"{base}/in", size, max(2, config.concurrency), config, overwrite=True, executor=executor)
            for p in workers:
                runs = exchange_stats.run_all(f"{base}/in", f"{base}/work", p, config, all_plans(p, max_levels), executor)
                times = [sum(s.wall_seconds for s in r.report.stages if s.name not in ("sample", "driver")) for r in runs]
                best = min(times)
                for run, seconds in zip(runs, times):
                    requests = sum(run.plan.predicted_requests().values())
                    print(f"{store:<10} {format_bytes(size):>10} {p:>4} {run.plan.name:<22} {seconds:>10.2f}{'*' if seconds == best else ' '} {requests:>9}", flush=True)
    open_store(base, config).delete_prefix()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50MB,200MB")
    parser.add_argument("--workers", default="4,8,16")
    parser.add_argument("--max-levels", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    workers = [int(p) for p in args.workers.split(",")]
    config = Config(concurrency=args.concurrency, progress=False)
    print(f"{'store':<10} {'size':>10} {'P':>4} {'plan':<22} {'exchange s':>11} {'requests':>9}")
    root = default_dir(max(sizes), "croupier-bench-grid")
    try:
        grid("local", root.as_uri(), config, sizes, workers, args.max_levels)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if not args.skip_s3:
        with seaweedfs(config) as (_, s3):
            grid("seaweedfs", "s3://bench/grid", s3, sizes, workers, args.max_levels)


if __name__ == "__main__":
    main()
