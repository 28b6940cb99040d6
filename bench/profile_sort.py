"""Where a Croupier sort spends its time: per stage, per phase of its tasks (from the run report).

Every task times its phases — reading (and decoding) its input, each operator, cutting and writing
its output — with the bytes that went through and the seconds its storage requests took (see
``croupier/dag/task.py``). This prints them for a TeraSort of ``--size``, gensort or Parquet in and
out, with the total task seconds beside the stage's wall time (2 functions -> about twice the wall).

    python bench/profile_sort.py [--size 2GB] [--format parquet] [--workers P] [--repeat 2]
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
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir  # noqa: E402
from sort_vs_peers import to_parquet  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="2GB")
    parser.add_argument("--format", choices=["gensort", "parquet"], default="parquet", help="input and output format")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=2, help="runs; the last is shown (the first warms the page cache)")
    args = parser.parse_args()
    size = parse_size(args.size)
    root = default_dir(size * 3, "croupier-profile")
    shutil.rmtree(root, ignore_errors=True)
    config = Config(concurrency=args.concurrency, progress=False, workers=args.workers)
    try:
        gensort((root / "gen").as_uri(), size, max(args.concurrency, size // 100_000_000), config, seed=1)
        if args.format == "parquet":
            to_parquet((root / "gen").as_uri(), (root / "in").as_uri(), config)
        else:
            (root / "gen").rename(root / "in")
        for i in range(args.repeat):
            report = sort((root / "in").as_uri(), (root / f"out{i}").as_uri(), None, config, args.format)
            shutil.rmtree(root / f"out{i}", ignore_errors=True)
        print(f"sort of {format_bytes(size)} ({args.format} in and out): {report.wall_seconds:.2f} s, {report.summary['exchange']} P={report.summary['workers']}")
        for stage in report.stages:
            if not stage.phases:
                continue
            print(f"  {stage.name:<18} wall {stage.wall_seconds:6.2f} s, {stage.tasks} tasks, task seconds {stage.task_seconds:6.2f}")
            for kind, (nbytes, wall, io, calls) in sorted(stage.phases.items(), key=lambda kv: -kv[1][1]):
                print(f"      {kind:<44} {wall:6.2f} s  of which requests {io:6.2f} s  {format_bytes(nbytes):>11}  {int(calls)} calls")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
