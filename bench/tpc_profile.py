"""Where a TPC-H query's time goes in Croupier: planning, stages, and the tasks' phases by kind.

Each query of ``--queries`` (default: all 22) runs ``--repeat`` times in one warm session over the
files ``bench/tpc_vs_peers.py`` prepares (same ``--sf`` and ``--files``; run that first); the run
with the median time is broken down, from its run report:

* ``plan``: ``croupier.sql()`` (parsing, optimising, reading footers) before the run starts;
* ``run``: ``collect()``; ``stages``: the union of the stages' spans (stages run side by side
  when independent); ``outside``: ``run`` minus that (binding exchanges, committing, cleanup);
* task seconds by kind, over all tasks: ``parquet`` (fetch and decode), ``x-read`` and ``x-write``
  (exchange objects in and out, results included), ``ops`` (joins, aggregates, sorts, filters,
  projections), and ``idle``: function seconds the stages held (span x functions busy) that no
  phase used (dispatch, waiting for the last task of a wave);
* the longest stage and its heaviest phase kind.

    python bench/tpc_profile.py [--sf 1] [--queries 1 12] [--repeat 3] [--files 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import croupier
from croupier.config import Config
from croupier.examples.tpc import ALL_TABLES, generate, reference_sql
from croupier.model.profile import base_kind

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir  # noqa: E402
from tpc_vs_peers import split_tables  # noqa: E402

GROUPS = {"parquet": ("read:parquet", "read:csv"), "x-read": ("read:exchange",), "x-write": ("write:",)}


def group_of(kind: str) -> str:
    """The column a phase kind is counted in."""
    for group, prefixes in GROUPS.items():
        if kind.startswith(prefixes):
            return group
    return "ops"


def profile_run(report: Any, concurrency: int) -> dict[str, Any]:
    """The breakdown of one run report (see the module docstring)."""
    spans = sorted((min(a for *_, a, b, ph in s.timeline), max(b for *_, a, b, ph in s.timeline)) for s in report.stages if s.timeline)
    covered, end = 0.0, -1e18
    for a, b in spans:  # the union of the stages' spans
        covered += max(0.0, b - max(a, end))
        end = max(end, b)
    by_group = dict.fromkeys((*GROUPS, "ops"), 0.0)
    ops: dict[str, float] = {}
    held = 0.0
    for s in report.stages:
        if not s.timeline:
            continue
        span = max(b for *_, a, b, ph in s.timeline) - min(a for *_, a, b, ph in s.timeline)
        held += span * min(s.tasks, concurrency)
        for kind, values in s.phases.items():
            by_group[group_of(kind)] += values[1]
            if group_of(kind) == "ops":
                ops[base_kind(kind)] = ops.get(base_kind(kind), 0.0) + values[1]
    busy = sum(by_group.values())
    longest = max((s for s in report.stages if s.phases), key=lambda s: s.wall_seconds)
    heaviest = max(longest.phases.items(), key=lambda kv: kv[1][1])
    return {
        "stages": sum(1 for s in report.stages if s.timeline),
        "tasks": sum(s.tasks for s in report.stages if s.timeline),
        "covered": covered,
        "groups": by_group,
        "ops": ops,
        "idle": max(0.0, held - busy),
        "longest": f"{longest.name} {1e3 * longest.wall_seconds:.0f} ms, most in {base_kind(heaviest[0])}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--queries", type=int, nargs="*", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args()
    data = args.data or default_dir(int(args.sf * 1.5e9), "croupier-bench-tpch")
    paths = generate("tpch", args.sf, data / f"sf{args.sf:g}", tables=ALL_TABLES["tpch"])
    folders = split_tables(paths, data / f"sf{args.sf:g}-files{args.files}", args.files)
    urls = {t: str(f) for t, f in folders.items()}
    config = Config(progress=False, tmp_url=(data / "tmp").as_uri())
    print(f"TPC-H SF {args.sf:g}, {args.files} files per table, {config.concurrency} functions; the median of {args.repeat} warm runs per query")
    print("task seconds (all tasks): parquet = fetch + decode, x-read/x-write = exchange objects in/out, ops = operators, idle = functions held but not in a phase")
    print(f"{'query':<6}{'total':>7}{'plan':>7}{'run':>7}{'stages':>8}{'outside':>8} {'st/tasks':>9}{'parquet':>9}{'x-read':>8}{'x-write':>8}{'ops':>7}{'idle':>7}  longest stage; heaviest operators")
    with croupier.Session(config) as session:
        executor = session.executor(config)
        for number in args.queries or range(1, 23):
            text = reference_sql("tpch", number)
            croupier.sql(text, urls, config=config).collect(executor=executor)  # warm-up
            runs = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                frame = croupier.sql(text, urls, config=config)
                planned = time.perf_counter()
                frame.collect(executor=executor)
                done = time.perf_counter()
                assert frame.last_run is not None
                runs.append((done - started, planned - started, done - planned, frame.last_run.report))
            total, plan, run, report = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
            p = profile_run(report, config.concurrency)
            g = p["groups"]
            ops = ", ".join(f"{k} {v:.2f}" for k, v in sorted(p["ops"].items(), key=lambda kv: -kv[1])[:3])
            print(
                f"q{number:<5}{total:>7.3f}{plan:>7.3f}{run:>7.3f}{p['covered']:>8.3f}{run - p['covered']:>8.3f} {p['stages']:>3}/{p['tasks']:<5}"
                f"{g['parquet']:>9.2f}{g['x-read']:>8.2f}{g['x-write']:>8.2f}{g['ops']:>7.2f}{p['idle']:>7.2f}  {p['longest']}; {ops}",
                flush=True,
            )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
