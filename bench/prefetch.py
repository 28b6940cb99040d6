"""Look-ahead prefetch: the same sort with and without it, P several times the concurrency.

With P = 8 x concurrency each function runs 8 tasks per stage in turn; with prefetch it fetches its
next task's inputs while it computes the current one. Runs alternate (on, off) ``--repeat`` times;
prints the median exchange time of each, the ratio, and how many requests prefetch served.

    python bench/prefetch.py [--size 400MB] [--workers 16] [--repeat 3] [--store local|s3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from croupier.compute import LocalExecutor
from croupier.config import Config
from croupier.exchange.plan import ExchangePlan
from croupier.exchange.topology import Topology
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.calibrate import _exchange_seconds as exchange_seconds
from croupier.storage import open_store
from croupier.units import parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, seaweedfs  # noqa: E402


def run(args: argparse.Namespace, root: str, config: Config) -> None:
    gensort(f"{root}/in", parse_size(args.size), args.workers, config, overwrite=True)
    plan = ExchangePlan(Topology((args.workers,)), True)
    times: dict[bool, list[float]] = {True: [], False: []}
    served = 0
    with LocalExecutor(config) as executor:
        for _ in range(args.repeat):
            for prefetch in (True, False):
                report = sort(f"{root}/in", f"{root}/out", args.workers, config.with_(prefetch=prefetch), overwrite=True, executor=executor, plan=plan)
                times[prefetch].append(exchange_seconds(report))
                if prefetch:
                    served += sum(k.prefetched for k in report.io.kinds.values())
                print(f"  prefetch {'on ' if prefetch else 'off'}: {times[prefetch][-1]:.3f} s", flush=True)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"\n{args.size}, P={args.workers}, {config.concurrency} functions, store {args.store}, {plan.name}")
    print(f"median exchange time: prefetch on {on:.3f} s, off {off:.3f} s; on/off = {on / off:.3f}")
    print(f"requests served by prefetch: {served / args.repeat:.0f} per sort")
    open_store(root, config).delete_prefix()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="400MB")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    config = Config(concurrency=args.concurrency, progress=False, speculation=None)
    if args.store == "local":
        run(args, default_dir(3 * parse_size(args.size), "croupier-bench-prefetch").as_uri(), config)
        return
    with seaweedfs(config) as (_, s3):
        run(args, "s3://bench/prefetch", s3)


if __name__ == "__main__":
    main()
