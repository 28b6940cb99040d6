"""Chaos run: sort 1 GB ten times through killed tasks, failing and slow storage requests.

Each chaos run kills the worker of 10% of the tasks at a random point of their first attempt, fails
5% of storage requests with a simulated 503 SlowDown (half of the failed PUTs after the write) and
makes 1% of requests ten times slower; speculation is on (the default policy). Every output is
checked by valsort against the input (order, count, checksum). Prints the jobs completed, the
valsort results, the objects left behind, and the time overhead against clean runs of the same sort.

    python bench/chaos.py [--size 1GB] [--runs 10] [--workers 8] [--store local|s3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from croupier.compute import LocalExecutor
from croupier.config import Config, RetryPolicy
from croupier.errors import CroupierError
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.storage import open_store
from croupier.storage.faults import FaultSpec
from croupier.units import parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, seaweedfs  # noqa: E402


def run(args: argparse.Namespace, root: str, config: Config) -> None:
    size = parse_size(args.size)
    gensort(f"{root}/in", size, args.workers, config, overwrite=True)
    chaos = config.with_(
        faults=FaultSpec(error_rate=0.05, slow_rate=0.01, slow_factor=10.0),
        retry=RetryPolicy(attempts=10, base_delay=0.01, max_delay=0.5),
    )
    clean_times, chaos_times, ok, failed, leftovers, kills, backups, retries = [], [], 0, [], 0, 0, 0, 0
    for i in range(args.runs):
        with LocalExecutor(config) as executor:
            started = time.perf_counter()
            sort(f"{root}/in", f"{root}/out", args.workers, config, overwrite=True, executor=executor)
            clean_times.append(time.perf_counter() - started)
        with LocalExecutor(chaos, kill_rate=0.10, task_attempts=5) as executor:
            started = time.perf_counter()
            took = float("nan")
            try:
                report = sort(f"{root}/in", f"{root}/out", args.workers, chaos, overwrite=True, executor=executor)
                took = time.perf_counter() - started
                chaos_times.append(took)
                retries += report.io.retries
            except CroupierError as exc:
                failed.append(str(exc).splitlines()[0])
            kills += executor.kills
            backups += executor.backups
        result, _ = valsort(f"{root}/out", config, input_url=f"{root}/in")
        ok += result.ok
        left = [o.key for o in open_store(root, config).list("out/_croupier_tmp/")]
        leftovers += len(left)
        print(f"run {i + 1}: clean {clean_times[-1]:.2f} s, chaos {took:.2f} s, valsort {'ok' if result.ok else result.problems}, left behind {len(left)}", flush=True)
    completed = args.runs - len(failed)
    overhead = statistics.median(chaos_times) / statistics.median(clean_times) if chaos_times else float("nan")
    print(f"\n{args.size} sorted {args.runs} times with P={args.workers}, {config.concurrency} functions, store {args.store}")
    print(f"jobs completed: {completed}/{args.runs}" + (f" (failed: {failed})" if failed else ""))
    print(f"valsort passed: {ok}/{args.runs}")
    print(f"objects left behind: {leftovers}")
    print(f"workers killed: {kills}; speculative copies: {backups}; storage requests retried: {retries}")
    print(f"median time: clean {statistics.median(clean_times):.2f} s, chaos {statistics.median(chaos_times) if chaos_times else float('nan'):.2f} s; overhead {overhead:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1GB")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    config = Config(concurrency=args.concurrency, progress=False)
    if args.store == "local":
        root = default_dir(3 * parse_size(args.size), "croupier-bench-chaos")
        run(args, root.as_uri(), config)
        open_store(root.as_uri(), config).delete_prefix()
        return
    with seaweedfs(config) as (_, s3):
        run(args, "s3://bench/chaos", s3)


if __name__ == "__main__":
    main()
