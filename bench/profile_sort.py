"""Where a Croupier sort task spends its time: one map and one reduce task, in-process, under cProfile.

Generates ``--size`` of gensort data, runs the sample stage through the normal job code, then runs
mapper 0 and reducer 0 in this process with cProfile and prints where the time goes (storage reads,
partitioning, gathering, storage writes, sorting) as the functions with the most own time.

    python bench/profile_sort.py [--size 2GB] [--workers 4]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
from pathlib import Path

from croupier.compute.context import TaskContext
from croupier.config import Config
from croupier.exchange.plan import ExchangePlan
from croupier.jobs import sort as sortjob
from croupier.jobs.common import list_inputs
from croupier.jobs.gensort import gensort
from croupier.dag.run import Run
from croupier.ops import partition
from croupier.storage import open_store
from croupier.units import parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir  # noqa: E402


def profile(label: str, fn, *args) -> None:  # type: ignore[no-untyped-def]
    """Run ``fn(*args)`` under cProfile; print its wall time and the functions with most own time."""
    prof = cProfile.Profile()
    prof.runcall(fn, *args)
    stats = pstats.Stats(prof)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    total = sum(v[2] for _, v in rows)
    print(f"\n{label}: {total:.2f} s")
    for (filename, line, name), v in rows[:10]:
        where = f"{Path(filename).name}:{line}" if filename != "~" else "builtin"
        print(f"  {v[2]:6.2f} s {100 * v[2] / total:5.1f}%  {name}  ({where})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", default="2GB")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    size, p = parse_size(args.size), args.workers
    root = default_dir(size, "croupier-profile")
    shutil.rmtree(root, ignore_errors=True)
    config = Config(concurrency=2, progress=False)
    inp, shuffle, out = (root / "in").as_uri(), (root / "shuffle").as_uri(), (root / "out").as_uri()
    try:
        gensort(inp, size, 8, config, seed=1)
        run = Run("profile", config)
        objects = list_inputs(run.store(inp))
        rows, samples = sortjob._probe(run, inp, objects, p, p, seed=0)
        run.finish()
        shares = sortjob.plan_pieces(objects, p, rows)
        split = partition.choose_splitters(samples[0], samples[1], p)
        splitters = (split[0].tobytes(), split[1].tobytes())
        plan = ExchangePlan.direct(p)
        ctx = TaskContext("profile", config)
        profile(f"map task (1/{p} of the data)", sortjob.map_share, ctx, inp, shares[0], splitters, shuffle, plan, 0, "raw")
        for m in range(1, p):  # the other mappers' objects, so reducer 0 has all its input
            sortjob.map_share(ctx, inp, shares[m], splitters, shuffle, plan, m, "raw")
        profile(f"reduce task (1/{p} of the data)", sortjob.reduce_partition, ctx, shuffle, plan, 0, None, "raw", out, "part-00000", "gensort")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        open_store(root.as_uri(), config).close()


if __name__ == "__main__":
    main()
