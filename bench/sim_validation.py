"""The simulator against measured exchange time on this machine: the local folder and SeaweedFS.

For each store: calibrate it (``--quick``; or ``--shipped`` to use the shipped ``local`` /
``seaweedfs-loopback`` profiles), derive its platform from the profile alone
(:func:`croupier.sim.platform.platform_of_profile`: no burst, the profile's bandwidths, request
ceilings as one partition's rates, latencies from the per-worker curve, no stragglers), then over a
grid of sizes x P x every plan of P (up to ``--max-levels``): run the sort and time its exchange
stages (map + levels + reduce), simulate the same plan, and print both, with the analytical
model's prediction from the same profile beside them. Ends with the mean absolute error per store
and overall (simulator and model) and how many points are within 15% (the issue's target).
``--save FILE``: also write each store's profile and the points as JSON, so that another version
of the simulator can be compared on the very same measurements.

    python bench/sim_validation.py [--sizes 20MB,100MB] [--workers 2,4,8] [--skip-s3] [--shipped] [--save FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from croupier.compute import LocalExecutor
from croupier.config import Config
from croupier.exchange.plan import all_plans
from croupier.jobs.calibrate import _exchange_seconds as exchange_seconds
from croupier.jobs.calibrate import calibrate
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.model.perf import predict
from croupier.model.profile import StorageProfile
from croupier.sim.engine import SimSettings, simulate_sort
from croupier.sim.platform import platform_of_profile
from croupier.storage import open_store
from croupier.testing import SeaweedFS
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import default_dir, s3_config  # noqa: E402


Point = tuple[str, float, float, float]  # label, simulated, measured, model


def run_store(store: str, base: str, config: Config, sizes: list[int], workers: list[int], max_levels: int, repeat: int, shipped: str | None, saved: dict) -> list[Point]:
    profile = StorageProfile.load(shipped) if shipped else calibrate(f"{base}/calibrate", config, quick=True, name=store).profile
    platform = platform_of_profile(profile)
    points = []
    with LocalExecutor(config) as executor:
        for size in sizes:
            gensort(f"{base}/in", size, max(2, config.concurrency), config, overwrite=True, executor=executor)
            for p in workers:
                for plan in all_plans(p, max_levels):
                    measured = min(exchange_seconds(sort(f"{base}/in", f"{base}/out", p, config, overwrite=True, executor=executor, plan=plan)) for _ in range(repeat))
                    result = simulate_sort(plan, size, platform, profile, seed=0, settings=SimSettings(speculation=False))
                    simulated = result.seconds
                    model = predict(plan, size, profile).seconds
                    label = f"{store} {format_bytes(size)} P={p} {plan.name}"
                    points.append((label, simulated, measured, model))
                    saved.setdefault("points", []).append({"store": store, "size": size, "workers": p, "plan": plan.name, "measured": measured, "simulated": simulated, "model": model})
                    print(f"  {label:<48} simulated {simulated:7.3f} s  measured {measured:7.3f} s  error {100 * (simulated / measured - 1):+6.1f}%  (model {100 * (model / measured - 1):+6.1f}%)", flush=True)
    saved.setdefault("profiles", {})[store] = json.loads(profile.to_json())
    open_store(base, config).delete_prefix()
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20MB,100MB")
    parser.add_argument("--workers", default="2,4,8")
    parser.add_argument("--max-levels", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=2, help="runs per configuration; the fastest counts")
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--shipped", action="store_true", help="use the shipped profiles instead of calibrating first")
    parser.add_argument("--save", help="write the profiles and points to this JSON file")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    workers = [int(p) for p in args.workers.split(",")]
    config = Config(concurrency=args.concurrency, progress=False)
    points: list[Point] = []
    saved: dict = {}
    root = default_dir(max(sizes), "croupier-bench-sim")
    if not args.skip_local:
        try:
            points += run_store("local", root.as_uri(), config, sizes, workers, args.max_levels, args.repeat, "local" if args.shipped else None, saved)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if not args.skip_s3:
        with tempfile.TemporaryDirectory(prefix="croupier-weed-") as tmp, SeaweedFS(Path(tmp)) as server:
            server.wait_ready("bench")
            points += run_store("seaweedfs", "s3://bench/sim", s3_config(config, server), sizes, workers, args.max_levels, args.repeat, "seaweedfs-loopback" if args.shipped else None, saved)
    if args.save:
        Path(args.save).write_text(json.dumps(saved, indent=1))
    for store in ("local", "seaweedfs", ""):
        mine = [abs(s / m - 1) * 100 for label, s, m, _ in points if label.startswith(store)]
        model = [abs(e / m - 1) * 100 for label, _, m, e in points if label.startswith(store)]
        if mine:
            within = sum(e <= 15 for e in mine)
            print(
                f"{store or 'all'}: mean absolute error {sum(mine) / len(mine):.1f}% over {len(mine)} points; {within} within 15%"
                f" (model: {sum(model) / len(model):.1f}%, {sum(e <= 15 for e in model)} within 15%)"
            )


if __name__ == "__main__":
    main()
