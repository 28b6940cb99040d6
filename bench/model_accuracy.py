"""Model accuracy and selector regret, on the local folder and on SeaweedFS (issues 13 and 15).

Per store, first a fresh self-calibration (``croupier.jobs.calibrate.calibrate``, the quick workload
a first run does), whose profile is then fixed for the store's runs (saved to a file and passed as
``Config.profile``, so runs neither recalibrate nor refine it while being measured). Then:

* sort (issue 15): a grid of data sizes x P x every plan of P (direct, k-level, each with and
  without write combining). Each plan's exchange time (map + levels + reduce) is predicted
  *before* the run by ``croupier.model.perf.predict`` (what the selector compares) and measured
  by running the sort with that plan forced; the median of ``--repeat`` runs counts, run in
  rounds over the grid (every plan once per round, so that a slow minute on this shared machine
  costs one run of each point, as for the TPC-H grid below).
* TPC-H query stages (issue 13): queries run through ``croupier.sql`` with a forced grid of plan
  family (direct, direct+wc, 2-level) x P; each is run ``--repeat`` times and every stage's
  measured wall time is the median over the repeats. A stage's prediction is the model's time for
  the stage's *measured* facts (rows, bytes, requests: what the run report holds). The full mode
  reads TPC-H SF1 from ``--tpch-data`` (``<table>/part-*.parquet``, read only; copied to
  SeaweedFS for the S3 runs); ``--quick`` generates SF 0.05. Each stage is predicted twice: by
  the fresh calibration, and after the profile learned from one earlier (warm-up) run of the
  query at the selector's own plan, as every run teaches a store's profile what each operator
  costs (``learned`` rows; the forced runs are never learned from).

Prints each point (predicted vs measured, with the machine's 1-minute load average beside it),
the mean absolute error per store and per (store, family), the run-to-run spread of the points
(the noise the errors include), and the selector's regret: per
(store, sort size) the measured time of the plan the selector picks over the best measured
plan's; per (store, query) the same over the forced grid (by the predicted query total); a regret
whose plan's runs overlap the best plan's runs says so (the two were not told apart).
Targets: TPC-H stages MAE <= 15% per store, regret <= 1.10 (issue 13); sort grid MAE <= 10% per
store, regret <= 1.05 for >= 95% of the cases (issue 15). Timings on a shared machine are noisy.

    python bench/model_accuracy.py [--quick] [--sizes 20MB,100MB,400MB] [--workers 2,4,8,16]
        [--tpch-data DIR] [--queries 1,3,12] [--tpch-workers 2,4,8] [--repeat 5]
        [--skip-s3] [--skip-local] [--no-tpch] [--no-sort] [--plot acc.png]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

import croupier
from croupier.compute import LocalExecutor
from croupier.config import Config
from croupier.examples.tpc import ALL_TABLES, generate, reference_sql
from croupier.exchange.plan import all_plans
from croupier.jobs.calibrate import _exchange_seconds as exchange_seconds
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.model.cache import Entry, learn
from croupier.model.fit import Observation, observations_from_report
from croupier.model.profile import StorageProfile
from croupier.model.perf import predict
from croupier.model.selector import robust
from croupier.model.stage import predict_stage
from croupier.storage import open_store
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, fresh_profile, interleaved, seaweedfs  # noqa: E402

#: (label, store, family, predicted s, measured s) of one run.
Point = tuple[str, str, str, float, float]
#: (what, regret, whether the picked plan's runs overlap the best plan's: at this many repeats the
#: two were not told apart) of one (store, sort size) or (store, query).
Regret = tuple[str, float, bool]
#: Per (store, kind): each point's run-to-run spread (the mean |run - median| / median of its
#: repeats), the noise floor its error and regret are read against.
SPREAD: dict[tuple[str, str], list[float]] = defaultdict(list)


def spread(runs: list[float]) -> float:
    """Mean absolute deviation of runs from their median, relative to it (0 for one run)."""
    middle = float(np.median(runs))
    return float(np.mean([abs(r - middle) for r in runs])) / middle if middle > 0 else 0.0


def overlap(picked: list[float], best: list[float]) -> bool:
    """Whether the picked plan's fastest run was no slower than the best plan's slowest one."""
    return min(picked) <= max(best)


def regret_of(grid: list[tuple[Any, float, float]]) -> tuple[Any, Any, float]:
    """(chosen, best, measured(chosen) / measured(best)) over (what, predicted, measured) rows."""
    chosen = min(grid, key=lambda g: g[1])
    best = min(grid, key=lambda g: g[2])
    return chosen, best, chosen[2] / best[2]


def line(label: str, predicted: float, measured: float, load: float | None = None) -> str:
    """One point's line, with the machine's 1-minute load average (other users' work slows runs):
    ``load`` (the median over the point's repeats), else now."""
    load = os.getloadavg()[0] if load is None else load
    return f"  {label:<52} predicted {predicted:7.3f} s  measured {measured:7.3f} s  error {100 * (predicted - measured) / measured:+6.1f}%  load {load:4.1f}"


def sort_grid(store: str, base: str, config: Config, sizes: list[int], workers: list[int], max_levels: int, repeat: int, tidy: Callable[[], object]) -> tuple[list[Point], list[Regret]]:
    """The sort grid on one store; returns the points and the regret per size. ``tidy`` runs
    between rounds (SeaweedFS: reclaim the space of the runs' deleted objects)."""
    assert config.profile is not None
    profile = StorageProfile.load(config.profile)
    points: list[Point] = []
    regrets: list[Regret] = []
    with LocalExecutor(config) as executor:
        for size in sizes:
            gensort(f"{base}/in", size, max(2, config.concurrency), config, overwrite=True, executor=executor)
            sort(f"{base}/in", f"{base}/out", 2, config, overwrite=True, executor=executor)  # warm-up, not counted
            grid = []
            predictions: list[tuple[Any, float]] = []
            plans = [plan for p in workers for plan in all_plans(p, max_levels)]
            runs = interleaved(plans, lambda plan: exchange_seconds(sort(f"{base}/in", f"{base}/out", plan.workers, config, overwrite=True, executor=executor, plan=plan)), repeat, tidy)
            for plan in plans:
                prediction = predict(plan, size, profile, config.concurrency)
                predicted = prediction.seconds
                measured = float(np.median(runs[plan]))
                SPREAD[(store, "sort")].append(spread(runs[plan]))
                grid.append((plan, predicted, measured))
                predictions.append((prediction, measured))
                label = f"{store} sort {format_bytes(size)} P={plan.workers} {plan.name}"
                points.append((label, store, f"sort {plan.family}", predicted, measured))
                print(line(label, predicted, measured), flush=True)
            chosen, best, point_regret = regret_of(grid)
            pool = [pr for pr, _ in predictions]
            picked = robust(min(pool, key=lambda pr: pr.seconds), pool)  # what the selector picks (ranges)
            regret = dict((id(pr), m) for pr, m in predictions)[id(picked)] / best[2]
            told = overlap(runs[picked.plan], runs[best[0]])
            regrets.append((f"{store} sort {format_bytes(size)}", regret, told))
            print(
                f"  -> {store} sort {format_bytes(size)}: selector (robust) picks {picked.plan.name} P={picked.workers}; best point estimate "
                f"{chosen[0].name} P={chosen[0].workers} ({chosen[2]:.3f} s, regret {point_regret:.3f}); best measured {best[0].name} P={best[0].workers} "
                f"({best[2]:.3f} s); regret {regret:.3f}; runs {_runs(runs[picked.plan])} against {_runs(runs[best[0]])}{' (overlapping)' if told and regret > 1 else ''}",
                flush=True,
            )
    return points, regrets


#: TPC-H plan families: (name, Config changes). Broadcast: joins of a small side broadcast.
FAMILIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("direct", {"algorithm": "direct", "broadcast_limit": 0}),
    ("direct+wc", {"algorithm": "direct+wc", "broadcast_limit": 0}),
    ("2-level", {"algorithm": "2-level", "broadcast_limit": 0}),
)
#: Broadcast joins (the default broadcast limit): only with --broadcast. On main at 08:30 UTC
#: 2026-11-23, TPC-H Q3 (SF 0.05, concurrency 2, workers 2, algorithm direct) with broadcast joins
#: hung in the DAG runner (a stage waiting for its sides, runner.py:137, the executor's map idle).
BROADCAST = ("broadcast", {"algorithm": "direct", "broadcast_limit": parse_size("64MiB")})


def _runs(runs: list[float]) -> str:
    """A point's runs, fastest to slowest, in seconds."""
    return "[" + ", ".join(f"{r:.3f}" for r in sorted(runs)) + "]"


def tpch_queries(store: str, config: Config, entry: Entry, tables: dict[str, str], queries: list[int], workers: list[int], repeat: int, families: tuple[tuple[str, dict[str, Any]], ...] = FAMILIES) -> tuple[list[Point], list[Regret]]:
    """Each query under each plan family and P, ``repeat`` times: per stage the median predicted
    and measured time over the repeats; per query the regret over the grid.

    Every run is predicted twice, from the same measured facts: by the fresh calibration
    (``entry.profile``), and by that profile after learning from the warm-up run of this query and
    of the queries before it — one run each, at the selector's own P and plan (the grid's forced
    runs are never learned from) — as a store's profile learns from every run, so that a query's
    operators are priced by what they cost the last time it ran (issue 15 item 2)."""
    points: list[Point] = []
    regrets: list[Regret] = []
    fresh = entry.profile
    for number in queries:
        text = reference_sql("tpch", number)
        warm = croupier.sql(text, tables, config=config.with_(broadcast_limit=0))
        warm.collect()  # warm-up, not counted: the learned profile learns from it
        assert warm.last_run is not None
        entry = learn(entry, observations_from_report(warm.last_run.report, config.concurrency, f"Q{number} warm-up"))
        grid = [(family, p) for family, _ in families for p in workers if not (family == "2-level" and p < 4)]
        changes = dict(families)

        def run(point: tuple[str, int]) -> tuple[list[Observation], float]:
            family, p = point
            frame = croupier.sql(text, tables, config=config.with_(workers=p, **changes[family]))
            frame.collect()
            assert frame.last_run is not None
            # stages run in one executor call ("shared") report the call's wall each: one
            # observation together, as the fit sees them (model.fit.observations_from_report)
            return [o for o in observations_from_report(frame.last_run.report, config.concurrency) if o.wall > 0], os.getloadavg()[0]

        done = interleaved(grid, run, repeat)  # rounds over the grid: a slow minute hits one run of each point
        runs = {point: [observed for observed, _ in done[point]] for point in grid}
        loads = {point: float(np.median([load for _, load in done[point]])) for point in grid}
        for prefix, profile in (("", fresh), ("learned ", entry.profile)):
            pts, regret, told = _query_points(store, number, runs, loads, profile, config.concurrency, prefix)
            points += pts
            regrets.append((f"{store} Q{number}{' (learned)' if prefix else ''}", regret, told))
    return points, regrets


def _query_points(store: str, number: int, runs: dict[tuple[str, int], list[list[Observation]]], loads: dict[tuple[str, int], float], profile: StorageProfile, concurrency: int, prefix: str) -> tuple[list[Point], float, bool]:
    """The points of one query's grid under ``profile`` (per stage: median predicted and measured
    over the repeats; per run: their sums), the selector's regret over the grid, and whether the
    picked plan's runs overlap the best one's."""
    points: list[Point] = []
    grid = []
    totals = {f"{family} P={p}": [sum(o.wall for o in run) for run in observed] for (family, p), observed in runs.items()}
    for (family, p), observed in runs.items():
        by_stage: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for run in observed:
            for o in run:
                by_stage[o.facts.name].append((predict_stage(o.facts, profile, concurrency).seconds, o.wall))
        stages = [(name, float(np.median([x for x, _ in r])), float(np.median([y for _, y in r]))) for name, r in by_stage.items()]
        if not prefix:  # (the learned pass reads the same runs)
            SPREAD[(store, "tpch-stage")] += [spread([y for _, y in r]) for r in by_stage.values()]
        for name, x, y in stages:
            label = f"{prefix}{store} Q{number} {family} P={p} {name}"
            points.append((label, store, f"{prefix}tpch-stage {family}", x, y))
            print(line(label, x, y, loads[(family, p)]), flush=True)
        predicted, measured = sum(x for _, x, _ in stages), sum(y for _, _, y in stages)
        label = f"{prefix}{store} Q{number} P={p} {family} ({len(stages)} stages, median of {len(observed)})"
        points.append((label, store, f"{prefix}tpch-query {family}", predicted, measured))
        print(line(label, predicted, measured, loads[(family, p)]), flush=True)
        grid.append((f"{family} P={p}", predicted, measured))
    chosen, best, regret = regret_of(grid)
    told = overlap(totals[chosen[0]], totals[best[0]])
    print(
        f"  -> {prefix}{store} Q{number}: best-predicted {chosen[0]} ({chosen[2]:.3f} s); best {best[0]} ({best[2]:.3f} s); regret {regret:.3f}; "
        f"runs {_runs(totals[chosen[0]])} against {_runs(totals[best[0]])}{' (overlapping)' if told and regret > 1 else ''}",
        flush=True,
    )
    return points, regret, told


def run_store(store: str, base: str, config: Config, args: argparse.Namespace, folder: Path, tables: dict[str, str] | None, tidy: Callable[[], object] = lambda: None) -> tuple[list[Point], list[Regret]]:
    print(f"\n=== {store}: load {os.getloadavg()[0]:.1f} at the start ===", flush=True)
    config, entry = fresh_profile(store, base, config, folder)
    points: list[Point] = []
    regrets: list[Regret] = []
    if not args.no_sort:
        points, regrets = sort_grid(store, base, config, args.size_list, args.worker_list, args.max_levels, args.repeat, tidy)
    if tables is not None:
        pts, reg = tpch_queries(store, config.with_(tmp_url=f"{base}/tmp"), entry, tables, args.query_list, args.tpch_workers, args.repeat, FAMILIES + ((BROADCAST,) if args.broadcast else ()))
        points += pts
        regrets += reg
    open_store(base, config).delete_prefix()
    return points, regrets


#: A stage shorter than this is mostly noise on a shared machine (reported apart, never dropped).
SHORT = 0.2


def mae(rows: list[Point]) -> str:
    """Mean absolute % error of points, its median and mean signed error, and how many."""
    if not rows:
        return "no points"
    e = [abs(p - m) / m * 100 for *_, p, m in rows]
    signed = [(p - m) / m * 100 for *_, p, m in rows]
    return f"MAE {np.mean(e):6.1f}% (median {np.median(e):5.1f}%, mean signed {np.mean(signed):+6.1f}%) over {len(e)}"


def summary(points: list[Point], regrets: list[Regret]) -> None:
    """The error per store (the issues' figures), per (store, family), and the regret."""
    stores = sorted({p[1] for p in points})
    print("\n== mean absolute error ==")
    for store in stores:
        for prefix, stages_label, queries_label in (("", "stages (target <= 15%) ", "queries (sum of stages)"), ("learned ", "stages, learned profile", "queries, learned profile")):
            stages = [p for p in points if p[1] == store and p[2].startswith(f"{prefix}tpch-stage")]
            queries = [p for p in points if p[1] == store and p[2].startswith(f"{prefix}tpch-query")]
            print(f"{store:<10} TPC-H {stages_label:<27} {mae(stages)}")
            print(f"{store:<10}   of them stages >= {SHORT} s            {mae([p for p in stages if p[4] >= SHORT])}")
            print(f"{store:<10} TPC-H {queries_label:<27} {mae(queries)}")
        print(f"{store:<10} sort grid (target <= 10%)         {mae([p for p in points if p[1] == store and p[2].startswith('sort ')])}")
    print("\n== run-to-run spread (mean |run - median| / median of a point's repeats: the noise the errors include) ==")
    for (store, kind), values in sorted(SPREAD.items()):
        print(f"{store:<10} {kind:<12} {100 * float(np.mean(values)):5.1f}% (median {100 * float(np.median(values)):5.1f}%) over {len(values)} points")
    print("\n== per (store, family) ==")
    by_family: dict[tuple[str, str], list[Point]] = defaultdict(list)
    for point in points:
        by_family[(point[1], point[2])].append(point)
    for (store, family), rows in sorted(by_family.items()):
        print(f"{store:<10} {family:<28} {mae(rows)}")
    print("\n== selector regret (sort: target <= 1.05 for >= 95%; TPC-H: <= 1.10) ==")
    for what, r, told in regrets:
        note = "  (runs overlap the best plan's)" if told and r > 1 else ""
        print(f"  {what:<28} {r:.3f}{note}")
    for kind, bound, learned in (("sort", 1.05, False), ("Q", 1.10, False), ("Q", 1.10, True)):
        rows = [(r, told) for what, r, told in regrets if what.split()[1].startswith(kind) and what.endswith("(learned)") == learned]
        good = sum(r <= bound for r, _ in rows)
        near = sum(r > bound and told for r, told in rows)
        name = "sort" if kind == "sort" else "TPC-H, learned profile" if learned else "TPC-H"
        print(f"{name}: regret <= {bound} for {good}/{len(rows)} = {100 * good / max(1, len(rows)):.0f}% (of the misses, {near} with runs overlapping the best plan's)")


def sf1_tables(folder: Path) -> dict[str, str]:
    """The TPC-H tables under ``folder`` (``<table>/part-*.parquet``), as glob URLs (read only)."""
    found = {t: f"{folder / t}/part-*.parquet" for t in ALL_TABLES["tpch"] if any((folder / t).glob("part-*.parquet"))}
    missing = set(ALL_TABLES["tpch"]) - set(found)
    if missing:
        raise SystemExit(f"{folder} has no part-*.parquet for {sorted(missing)}; pass --tpch-data or --quick")
    return found


def copy_tables(tables: dict[str, str], root: str, config: Config) -> dict[str, str]:
    """The tables' part files copied under ``root`` (a store the benchmark owns), as glob URLs."""
    store = open_store(root, config)
    out = {}
    for table, pattern in tables.items():
        for path in sorted(Path(pattern).parent.glob(Path(pattern).name)):
            store.put(f"{table}/{path.name}", path.read_bytes())
        out[table] = f"{root}/{table}/part-*.parquet"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small grid: 20MB,80MB; P 2,4,8; TPC-H SF 0.05 (generated), Q1,Q3; one run per point")
    parser.add_argument("--sizes", default=None, help="sort sizes (default 20MB,100MB,400MB)")
    parser.add_argument("--workers", default=None, help="sort P values (default 2,4,8,16)")
    parser.add_argument("--max-levels", type=int, default=3)
    parser.add_argument("--tpch-data", default="/dev/shm/croupier-bench-tpch/sf1-files4", help="TPC-H SF1 tables (<table>/part-*.parquet), read only")
    parser.add_argument("--queries", default=None, help="TPC-H queries (default 1,3,12)")
    parser.add_argument("--tpch-workers", default="2,4,8")
    parser.add_argument("--no-tpch", action="store_true")
    parser.add_argument("--no-sort", action="store_true")
    parser.add_argument("--broadcast", action="store_true", help="also broadcast joins")
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--repeat", type=int, default=None, help="runs per point, the median counts (default 5; --quick 1)")
    parser.add_argument("--plot", default=None, help="PNG of predicted vs measured (needs the plots extra)")
    args = parser.parse_args()
    args.size_list = [parse_size(s) for s in (args.sizes or ("20MB,80MB" if args.quick else "20MB,100MB,400MB")).split(",")]
    args.worker_list = [int(p) for p in (args.workers or ("2,4,8" if args.quick else "2,4,8,16")).split(",")]
    args.query_list = [int(q) for q in (args.queries or ("1,3" if args.quick else "1,3,12")).split(",")]
    args.tpch_workers = [int(p) for p in args.tpch_workers.split(",")]
    # 5: a stage's runs here stray 11% from their median on average (15% for stages under 20 ms),
    # and plans a few per cent apart were told apart at 3 runs by chance: a 20 MB sort's direct
    # and direct+wc medians of 3 differed by 12% where 7 rounds said 2%
    args.repeat = args.repeat or (1 if args.quick else 5)
    config = Config(concurrency=args.concurrency, progress=False, calibration="off")
    points: list[Point] = []
    regrets: list[Regret] = []
    root = default_dir(max(args.size_list), "croupier-bench-model")
    tables = None
    print(f"model accuracy: load {os.getloadavg()}, {os.cpu_count()} cores, concurrency {args.concurrency}, repeat {args.repeat}", flush=True)
    with tempfile.TemporaryDirectory(prefix="croupier-profiles-") as profiles:
        if not args.no_tpch:
            if args.quick:
                paths = generate("tpch", 0.05, default_dir(int(0.05 * 3e9), "tpc-sql-tpch-0.05"), tables=ALL_TABLES["tpch"])
                tables = {t: str(p) for t, p in paths.items()}
            else:
                tables = sf1_tables(Path(args.tpch_data))
        if not args.skip_local:
            try:
                pts, reg = run_store("local", root.as_uri(), config, args, Path(profiles), tables)
                points += pts
                regrets += reg
            finally:
                shutil.rmtree(root, ignore_errors=True)
        if not args.skip_s3:
            with seaweedfs(config) as (server, s3):
                s3_tables = None
                if tables is not None:
                    s3_tables = copy_tables(tables, "s3://bench/tpch", s3) if not args.quick else tables
                pts, reg = run_store("seaweedfs", "s3://bench/model", s3, args, Path(profiles), s3_tables, server.vacuum)
                points += pts
                regrets += reg
    summary(points, regrets)
    if args.plot:
        from croupier.model.plots import plot_accuracy

        plot_accuracy([(label, p, m) for label, _, _, p, m in points], args.plot)
        print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
