"""Model accuracy and selector regret, on the local folder and on SeaweedFS (issue 13.3, issue 15).

Per store, first a fresh self-calibration (``croupier.jobs.calibrate.calibrate``, the quick workload
a first run does), whose profile is then fixed for the store's runs (saved to a file and passed as
``Config.profile``, so runs neither recalibrate nor refine it while being measured). Then:

* sort: a grid of data sizes x P x every plan of P (direct, k-level, each with and without write
  combining). Each plan's exchange time (map + levels + reduce) is predicted *before* the run by
  ``croupier.model.perf.predict`` (what the selector compares) and measured by running the sort
  with that plan forced.
* TPC-H query stages (``--tpch``, default on): queries run through ``croupier.sql`` with each plan
  family forced (direct, direct+wc, 2-level, and broadcast joins where a join fits); every stage's
  prediction is the model's time for the stage's *measured* facts (rows, bytes, requests: what
  the run report holds), beside its measured wall time; the query's total is their sum.

Prints each run (predicted vs measured), the mean absolute error per store and per (store, plan
family), and per (store, size) / (store, query) the selector's regret: the measured time of the
best-predicted plan divided by the best measured time. Targets (issue 13.3): mean absolute error
<= 10% per store; regret <= 1.05 for >= 95% of the cases. Timings on a shared machine are noisy.

    python bench/model_accuracy.py [--quick] [--sizes 20MB,100MB,1GB] [--workers 2,4,8,16,32]
        [--scale 1] [--queries 1,3,5,10] [--skip-s3] [--skip-local] [--no-tpch] [--plot acc.png]
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
from croupier.jobs.calibrate import calibrate, describe
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.model.fit import observations_from_report
from croupier.model.perf import predict
from croupier.model.selector import robust
from croupier.model.stage import predict_stage
from croupier.storage import open_store
from croupier.testing import SeaweedFS
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, s3_config  # noqa: E402

#: (label, store, family, predicted s, measured s) of one run.
Point = tuple[str, str, str, float, float]


def fresh_profile(store: str, base: str, config: Config, folder: Path) -> Config:
    """Self-calibrate ``store`` now (the quick workload) and return ``config`` fixed to that profile."""
    outcome = calibrate(f"{base}/calibrate", config, quick=True, name=store)
    print(describe(outcome.profile), flush=True)
    print(f"  ({store}: calibrated in {outcome.seconds:.1f} s)", flush=True)
    path = folder / f"{store}.json"
    outcome.profile.save(path)
    return config.with_(profile=str(path), calibration="off")


def regret_of(grid: list[tuple[Any, float, float]]) -> tuple[Any, Any, float]:
    """(chosen, best, measured(chosen) / measured(best)) over (what, predicted, measured) rows."""
    chosen = min(grid, key=lambda g: g[1])
    best = min(grid, key=lambda g: g[2])
    return chosen, best, chosen[2] / best[2]


def line(label: str, predicted: float, measured: float) -> str:
    """One run's line, with the machine's 1-minute load average (other users' work slows runs)."""
    load = os.getloadavg()[0]
    return f"  {label:<52} predicted {predicted:7.3f} s  measured {measured:7.3f} s  error {100 * (predicted - measured) / measured:+6.1f}%  load {load:4.1f}"


def sort_grid(store: str, base: str, config: Config, sizes: list[int], workers: list[int], max_levels: int, repeat: int) -> tuple[list[Point], list[tuple[str, float]]]:
    """The sort grid on one store; returns the points and the regret per size."""
    from croupier.model.profile import StorageProfile

    assert config.profile is not None
    profile = StorageProfile.load(config.profile)
    points: list[Point] = []
    regrets: list[tuple[str, float]] = []
    with LocalExecutor(config) as executor:
        for size in sizes:
            gensort(f"{base}/in", size, max(2, config.concurrency), config, overwrite=True, executor=executor)
            sort(f"{base}/in", f"{base}/out", 2, config, overwrite=True, executor=executor)  # warm-up, not counted
            grid = []
            predictions: list[tuple[Any, float]] = []
            for p in workers:
                for plan in all_plans(p, max_levels):
                    prediction = predict(plan, size, profile, config.concurrency)
                    predicted = prediction.seconds
                    measured = min(
                        exchange_seconds(sort(f"{base}/in", f"{base}/out", plan.workers, config, overwrite=True, executor=executor, plan=plan))
                        for _ in range(repeat)
                    )
                    grid.append((plan, predicted, measured))
                    predictions.append((prediction, measured))
                    label = f"{store} sort {format_bytes(size)} P={p} {plan.name}"
                    points.append((label, store, plan.family, predicted, measured))
                    print(line(label, predicted, measured), flush=True)
            chosen, best, point_regret = regret_of(grid)
            pool = [pr for pr, _ in predictions]
            picked = robust(min(pool, key=lambda pr: pr.seconds), pool)  # what the selector picks (ranges)
            regret = dict((id(pr), m) for pr, m in predictions)[id(picked)] / best[2]
            regrets.append((f"{store} sort {format_bytes(size)}", regret))
            print(
                f"  -> {store} sort {format_bytes(size)}: selector (robust) picks {picked.plan.name} P={picked.workers}; best point estimate "
                f"{chosen[0].name} P={chosen[0].workers} ({chosen[2]:.3f} s, regret {point_regret:.3f}); best measured {best[0].name} P={best[0].workers} "
                f"({best[2]:.3f} s); regret {regret:.3f}",
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


def tpch_queries(store: str, config: Config, tables: dict[str, str], queries: list[int], workers: list[int], families: tuple[tuple[str, dict[str, Any]], ...] = FAMILIES) -> tuple[list[Point], list[tuple[str, float]]]:
    """Each query under each plan family and P: per-stage predicted vs measured, and the regret."""
    from croupier.model.profile import StorageProfile

    assert config.profile is not None
    profile = StorageProfile.load(config.profile)
    points: list[Point] = []
    regrets: list[tuple[str, float]] = []
    for number in queries:
        croupier.sql(reference_sql("tpch", number), tables, config=config.with_(broadcast_limit=0)).collect()  # warm-up, not counted
        text = reference_sql("tpch", number)
        grid = []
        for family, changes in families:
            for p in workers:
                if family == "2-level" and p < 4:
                    continue
                frame = croupier.sql(text, tables, config=config.with_(workers=p, **changes))
                frame.collect()
                report = frame.last_run.report if frame.last_run is not None else None
                assert report is not None
                # stages run in one executor call ("shared") report the call's wall each: one
                # observation together, as the fit sees them (model.fit.observations_from_report)
                observed = [o for o in observations_from_report(report, config.concurrency) if o.wall > 0]
                pairs = [(o.facts.name, predict_stage(o.facts, profile, config.concurrency).seconds, o.wall) for o in observed]
                predicted = sum(x for _, x, _ in pairs)
                measured = sum(y for _, _, y in pairs)
                for name, x, y in pairs:
                    points.append((f"{store} Q{number} {family} P={p} {name}", store, f"tpch-stage {family}", x, y))
                label = f"{store} Q{number} P={p} {family} ({len(pairs)} stages)"
                points.append((label, store, f"tpch-query {family}", predicted, measured))
                print(line(label, predicted, measured) + f"  (run wall {report.wall_seconds:.3f} s)", flush=True)
                grid.append((f"{family} P={p}", predicted, measured))
        chosen, best, regret = regret_of(grid)
        regrets.append((f"{store} Q{number}", regret))
        print(f"  -> {store} Q{number}: best-predicted {chosen[0]} ({chosen[2]:.3f} s); best {best[0]} ({best[2]:.3f} s); regret {regret:.3f}", flush=True)
    return points, regrets


def run_store(store: str, base: str, config: Config, args: argparse.Namespace, folder: Path, tables: dict[str, str] | None) -> tuple[list[Point], list[tuple[str, float]]]:
    config = fresh_profile(store, base, config, folder)
    points, regrets = sort_grid(store, base, config, args.size_list, args.worker_list, args.max_levels, args.repeat)
    if tables is not None:
        pts, reg = tpch_queries(store, config.with_(tmp_url=f"{base}/tmp"), tables, args.query_list, args.tpch_workers, FAMILIES + ((BROADCAST,) if args.broadcast else ()))
        points += pts
        regrets += reg
    open_store(base, config).delete_prefix()
    return points, regrets


def summary(points: list[Point], regrets: list[tuple[str, float]]) -> None:
    def mae(rows: list[Point]) -> str:
        e = [abs(p - m) / m * 100 for *_, p, m in rows]
        signed = [(p - m) / m * 100 for *_, p, m in rows]
        return f"MAE {np.mean(e):5.1f}% (median {np.median(e):5.1f}%, mean signed {np.mean(signed):+6.1f}%) over {len(e)}"

    print("\n== mean absolute error (target <= 10% per store) ==")
    by_store: dict[str, list[Point]] = defaultdict(list)
    by_family: dict[tuple[str, str], list[Point]] = defaultdict(list)
    for point in points:
        by_family[(point[1], point[2])].append(point)
        if not point[2].startswith("tpch-stage"):  # a store's figure: sort plans and whole queries
            by_store[point[1]].append(point)
    for store, rows in by_store.items():
        print(f"{store:<10} all plans/queries      {mae(rows)}")
    for (store, family), rows in sorted(by_family.items()):
        print(f"{store:<10} {family:<22} {mae(rows)}")
    print("\n== selector regret (target <= 1.05 for >= 95%) ==")
    for what, r in regrets:
        print(f"  {what:<28} {r:.3f}")
    good = sum(r <= 1.05 for _, r in regrets)
    print(f"regret <= 1.05 for {good}/{len(regrets)} = {100 * good / max(1, len(regrets)):.0f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small grid: 20MB,80MB; P 2,4,8; TPC-H SF 0.05, Q1,Q3,Q10")
    parser.add_argument("--sizes", default=None, help="sort sizes (default 20MB,100MB,400MB,1GB)")
    parser.add_argument("--workers", default=None, help="sort P values (default 2,4,8,16,32)")
    parser.add_argument("--max-levels", type=int, default=3)
    parser.add_argument("--scale", type=float, default=None, help="TPC-H scale factor (default 1)")
    parser.add_argument("--queries", default=None, help="TPC-H queries (default 1,3,5,10,12)")
    parser.add_argument("--tpch-workers", default="2,4,8")
    parser.add_argument("--no-tpch", action="store_true")
    parser.add_argument("--broadcast", action="store_true", help="also broadcast joins (see BROADCAST: hung on main)")
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--repeat", type=int, default=2, help="runs per sort configuration; the fastest counts")
    parser.add_argument("--plot", default=None, help="PNG of predicted vs measured (needs the plots extra)")
    args = parser.parse_args()
    args.size_list = [parse_size(s) for s in (args.sizes or ("20MB,80MB" if args.quick else "20MB,100MB,400MB,1GB")).split(",")]
    args.worker_list = [int(p) for p in (args.workers or ("2,4,8" if args.quick else "2,4,8,16,32")).split(",")]
    args.query_list = [int(q) for q in (args.queries or ("1,3" if args.quick else "1,3,5,10,12")).split(",")]
    args.tpch_workers = [int(p) for p in args.tpch_workers.split(",")]
    scale = args.scale if args.scale is not None else (0.05 if args.quick else 1.0)
    config = Config(concurrency=args.concurrency, progress=False, calibration="off")
    points: list[Point] = []
    regrets: list[tuple[str, float]] = []
    root = default_dir(max(args.size_list), "croupier-bench-model")
    tables = None
    with tempfile.TemporaryDirectory(prefix="croupier-profiles-") as profiles:
        if not args.no_tpch:
            paths = generate("tpch", scale, default_dir(int(scale * 3e9), f"tpc-sql-tpch-{scale}"), tables=ALL_TABLES["tpch"])
            tables = {t: str(p) for t, p in paths.items()}
        runs: list[Callable[[], tuple[list[Point], list[tuple[str, float]]]]] = []
        if not args.skip_local:
            runs.append(lambda: run_store("local", root.as_uri(), config, args, Path(profiles), tables))
        for run in runs:
            try:
                pts, reg = run()
                points += pts
                regrets += reg
            finally:
                shutil.rmtree(root, ignore_errors=True)
        if not args.skip_s3:
            with tempfile.TemporaryDirectory(prefix="croupier-weed-") as tmp, SeaweedFS(Path(tmp)) as server:
                server.wait_ready("bench")
                pts, reg = run_store("seaweedfs", "s3://bench/model", s3_config(config, server), args, Path(profiles), tables)
                points += pts
                regrets += reg
    summary(points, regrets)
    if args.plot:
        from croupier.model.plots import plot_accuracy

        plot_accuracy([(label, p, m) for label, _, _, p, m in points], args.plot)
        print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
