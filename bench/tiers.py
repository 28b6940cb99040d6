"""Sort through the slow tier (SeaweedFS) and through a fast tier (Redis capped at 512 MiB) beside it.

For each size: a TeraSort (gensort in, gensort out, on SeaweedFS) with every exchange on the slow
tier, on the fast tier (producers that do not fit spill to the slow tier; the model prices the
share it expects to fit on the fast tier, the rest on the slow one), through the hybrid
multi-round exchange (rounds of r bytes through Redis, runs on SeaweedFS; Locus §3.4), and with
``--tier auto`` (the selector's choice over tier x algorithm x P). Printed per run: wall seconds,
the exchange's stage walls (map [rounds, combiners] and reduce) and the stage model's prediction of
them (croupier.model.tier.predict_on_tier, the selector's own model), the exchange's request time
(its write and read phases' request seconds over the functions running at once: what Table 3
models) and Locus' Table 3 prediction of it (2 max(R/q, S/b_eff); the hybrid row R T_rnd + T_mrg),
their errors, and the selector's regret (auto's wall time over the fastest of slow, fast, hybrid).
With ``levels``: MinFlow's memory levels, on the slow tier: a 3-level plan whose level 2 happens
inside one task per group of workers (``--algorithm 3-level+wc+mem``; the selector picks P and
the group sizes). With ``3level``: the same family with every level through the slow tier
(``--algorithm 3-level+wc``), to set beside ``levels``. With ``hybrid-pipelined`` and
``hybrid-unpipelined``: the hybrid with its rounds pipelined or not (``Config.pipelined``; plain
``hybrid`` takes the variant the model prefers).
Profiles: shipped seaweedfs-loopback and redis-loopback; with ``--calibrate``, profiles fitted
on the spot (a quick calibration of the SeaweedFS bucket, ``croupier calibrate --store
redis://...`` of the Redis server), which the runs' selector and the predictions both use.

    python bench/tiers.py [--sizes 256MB,512MB,1GB,2GB,4GB] [--small] [--workers P] [--calibrate [--full-calibration]] [--repeat N] [--json out.json]

``--repeat N`` runs every size's runs N times, round by round, and shows each tier's run of
median wall time (auto's regret: its median over the best forced tier's median).

``--small`` runs 16 MB and 64 MB only (a quick check).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from croupier.config import Config
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.model.profile import StorageProfile
from croupier.exchange.hybrid import HybridPlan
from croupier.exchange.levels import LevelsPlan
from croupier.exchange.plan import ExchangePlan
from croupier.exchange.topology import Topology
from croupier.model.tier import FastTierProfile, compare, fast_share, hybrid_terms, object_bytes, predict_on_tier, stored_share
from croupier.storage import open_store
from croupier.testing import RedisServer, SeaweedFS
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import s3_config  # noqa: E402

BUCKET = "croupier-bench"
FAST_MEMORY = 512 << 20


#: Rows that force the hybrid's variant (``Config.pipelined``).
VARIANTS = {"hybrid-pipelined": True, "hybrid-unpipelined": False}


def run_one(root: str, size: int, tier: str, config: Config, workers: int | None) -> dict[str, object]:
    """One sort of the input at ``root/in`` with ``tier``; its measurements."""
    out = f"{root}/out-{tier}"
    # memory levels: in the tasks' memory, the storage levels on the slow tier
    forced: dict[str, object] = {"algorithm": "3-level+wc+mem", "tier": "slow"} if tier == "levels" else {"tier": tier}
    if tier == "3level":  # the same family, every level through the slow tier
        forced = {"algorithm": "3-level+wc", "tier": "slow"}
    if tier in VARIANTS:  # the hybrid with its rounds pipelined or not (plain "hybrid": the model's variant)
        forced = {"tier": "hybrid", "pipelined": VARIANTS[tier]}
    report = sort(f"{root}/in", out, workers, config.with_(**forced))
    open_store(out, config).delete_prefix()
    stages = [s for s in report.stages if s.name in ("map", "reduce") or s.name.startswith(("reduce level ", "map round ", "map combine "))]
    calls = {s.shared or (s.name,): s.wall_seconds for s in stages}  # stages of one executor call (a pipelined round) report its wall each
    exchange = sum(calls.values())
    (entry,) = report.exchanges
    # the exchange's own request time (what Table 3 models): its write and read phases' request
    # seconds (and the combiners'), summed over tasks, spread over the functions running at once
    io = sum(v[2] for s in stages for k, v in s.phases.items() if "exchange" in k or k == "regroup")
    io_wall = io / max(1, min(int(entry["workers"]), config.concurrency))
    return {
        "size": size,
        "tier": tier,
        "used": tier if tier in ("levels", "3level") else report.summary.get("tiers", {}).get("map"),
        "fallback": report.summary.get("fast_tier_fallback", {}).get("reason"),
        "workers": entry["workers"],
        "plan": entry["plan"],
        "producers": entry["producers"],
        "rounds": entry.get("rounds", 0),
        "spills": sum(report.summary.get("fast_tier_spills", {}).get("senders", {}).values()),
        "bytes": entry["bytes"],
        "wall": round(report.wall_seconds, 3),
        "exchange_seconds": round(exchange, 3),
        "exchange_io_seconds": round(io_wall, 3),
        "why": entry.get("tier_why", ""),
    }


def plan_of(row: dict[str, object]) -> ExchangePlan:
    """The plan a run used, from its report entry (name, P, M, rounds)."""
    name, p, m = str(row["plan"]), int(row["workers"]), int(row["producers"])  # type: ignore[call-overload]
    if "in memory" in name:  # "3-level 4x2x2+wc, level 2 in memory"
        head = name.split(",")[0]
        return LevelsPlan(Topology.parse(head.removesuffix("+wc").split(" ")[-1]), head.endswith("+wc"), m, None, (1,))
    if name.startswith("hybrid"):
        rounds = max(1, int(row["rounds"]))  # type: ignore[call-overload]
        return HybridPlan.build(p, m, -(-m // rounds), pipelined=name.endswith(" pipelined"))
    combine = name.endswith("+wc")
    base = name.removesuffix("+wc")
    topology = Topology.direct(p) if base == "direct" else Topology.parse(base.split(" ")[-1])
    return ExchangePlan(topology, combine, m)


def predict_row(row: dict[str, object], slow: StorageProfile, fast: FastTierProfile, concurrency: int) -> None:
    """Both models' predictions for the run in ``row``, beside what it measured."""
    plan = plan_of(row)
    used = str(row["used"] or "slow").split(" ")[0].replace("3level", "slow")
    nbytes = float(row["bytes"])  # type: ignore[arg-type]
    p = plan.workers
    if used == "hybrid":
        assert isinstance(plan, HybridPlan)
        table3 = hybrid_terms(plan, nbytes, slow, fast).seconds
    else:  # Table 3 per storage level: each writes and reads all S bytes (a memory level none)
        slow_c, fast_c = compare(nbytes, p, slow, fast, FAST_MEMORY)[:2]
        table3 = (fast_c if used == "fast" else slow_c).seconds * plan.stored_levels
        row["fast_fits"] = fast_c.fits
    row["predicted_exchange_seconds"] = round(table3, 3)
    measured = max(1e-6, float(row["exchange_io_seconds"]))  # type: ignore[arg-type]
    row["model_error"] = round(abs(table3 - measured) / measured, 3)
    size = int(row["size"])  # type: ignore[call-overload]
    # a fast-tier run that does not fit whole: the share of producers the selector expects to fit, the rest spilling
    stored = size * stored_share(slow)
    share = fast_share(fast, FAST_MEMORY, stored, plan.producers, concurrency, object_bytes(plan, stored, plan.producers)) if used == "fast" else 1.0
    row["fast_share"] = round(share, 3)
    priced = "slow" if used == "levels" or share == 0 else used  # nothing fits: every producer spills
    staged = predict_on_tier(plan, size, slow, fast, priced, concurrency, fast_share=share if priced == "fast" else 1.0).seconds  # D as the selector sees it: records x 100
    row["stage_model_seconds"] = round(staged, 3)
    walls = max(1e-6, float(row["exchange_seconds"]))  # type: ignore[arg-type]
    row["stage_model_error"] = round(abs(staged - walls) / walls, 3)


def calibrated(work: Path, config: Config, redis: RedisServer, quick: bool = True) -> tuple[StorageProfile, FastTierProfile]:
    """Both tiers' profiles fitted on this machine now (saved as ``work``/slow.json, fast.json);
    ``quick``: the quick calibration a first run does (about 10 s), else the full one."""
    from croupier.jobs.calibrate import calibrate
    from croupier.jobs.calibrate_tier import calibrate_fast_tier

    slow = calibrate(f"s3://{BUCKET}/calibration", config, quick=quick, name="seaweedfs (bench/tiers.py)").profile
    fast = calibrate_fast_tier(redis.url("calibration"), config, quick=quick)
    slow.save(work / "slow.json")
    fast.save(work / "fast.json")
    print(f"calibrated: {slow.name}, {fast.name} ({fast.memory_overhead:.3f} bytes of Redis memory per stored byte)", flush=True)
    return slow, fast


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="256MB,512MB,1GB,2GB,4GB")
    parser.add_argument("--small", action="store_true", help="16 MB and 64 MB only")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("--calibrate", action="store_true", help="fit both tiers' profiles here first (else the shipped ones)")
    parser.add_argument("--full-calibration", action="store_true", help="with --calibrate: the full calibration (about 90 s), not the quick one")
    parser.add_argument("--tiers", default="slow,fast,hybrid,levels,auto", help="which runs, in order (levels: a 3-level plan on the slow tier, level 2 in the tasks' memory; 3level: the same family, every level in storage)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the runs per size (interleaved); the table shows each tier's median run")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in ("16MB,64MB" if args.small else args.sizes).split(",")]
    work = Path(tempfile.mkdtemp(prefix="croupier-tiers-"))
    rows: list[dict[str, object]] = []
    slow_profile, fast_profile = StorageProfile.load("seaweedfs-loopback"), FastTierProfile.load("redis-loopback")
    with SeaweedFS(work / "weed") as weed, RedisServer(work / "redis", maxmemory=FAST_MEMORY) as redis:
        weed.wait_ready(BUCKET)
        redis.wait_ready()
        base = s3_config(Config(concurrency=args.concurrency, progress=False, calibration="off"), weed)
        if args.calibrate:
            slow_profile, fast_profile = calibrated(work, base, redis, quick=not args.full_calibration)
            base = base.with_(profile=str(work / "slow.json"))
        config = base.with_(fast_tier=redis.url("bench"), fast_profile=str(work / "fast.json") if args.calibrate else None)
        try:
            for size in sizes:
                root = f"s3://{BUCKET}/tiers-{size}"
                gensort(f"{root}/in", size, max(args.concurrency, size // 64_000_000), base, seed=1)
                for round_ in range(args.repeat):
                    for tier in args.tiers.split(","):
                        row = run_one(root, size, tier, config, args.workers)
                        weed.vacuum()  # reclaim the deleted output's space now (else repeated rounds fill SeaweedFS' volumes)
                        predict_row(row, slow_profile, fast_profile, args.concurrency)
                        row["round"] = round_
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                open_store(root, base).delete_prefix()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=1))
    print_table(sizes, rows, args.repeat)


def medians(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Per size and tier (a repeated tier of one round, e.g. both hybrid variants twice, kept
    apart by its place in the round), the run of median wall time (the lower middle one of an
    even count), with every run's wall time."""
    groups: dict[tuple[object, object, int], list[dict[str, object]]] = {}
    seen: dict[tuple[object, object, object], int] = {}  # runs of a tier so far in its round
    for r in rows:
        key = (r["size"], r.get("round"), r["tier"])
        place = seen[key] = seen.get(key, -1) + 1
        groups.setdefault((r["size"], r["tier"], place), []).append(r)
    out = []
    for runs in groups.values():
        ordered = sorted(runs, key=lambda r: float(r["wall"]))  # type: ignore[arg-type]
        middle = dict(ordered[(len(ordered) - 1) // 2])
        middle["walls"] = [r["wall"] for r in runs]
        out.append(middle)
    return out


def print_table(sizes: list[int], rows: list[dict[str, object]], repeat: int) -> None:
    """The table: per size, each tier's (median) run, its model errors, and auto's regret."""
    if repeat > 1:
        print(f"\nmedian of {repeat} interleaved rounds per tier (walls of every round in the last column)")
        rows = medians(rows)
    print(f"\n{'size':>9} {'tier':>18} {'used':>26} {'P':>3} {'wall s':>8} {'xchg s':>8} {'model s':>8} {'err':>6} {'io s':>8} {'T3 s':>8} {'err':>6}  regret")
    for size in sizes:
        mine = [r for r in rows if r["size"] == size]
        best = min(float(r["wall"]) for r in mine if r["tier"] != "auto" and not r["fallback"])  # type: ignore[arg-type]
        for r in mine:
            regret = f"{float(r['wall']) / best:.2f}" if r["tier"] == "auto" else ""  # type: ignore[arg-type]
            note = (f"  fell back: {r['fallback']}" if r["fallback"] else "") + (f"  {r['spills']} producer(s) spilled" if r["spills"] else "")
            if float(r.get("fast_share", 1.0)) < 1:  # type: ignore[arg-type]
                note += f" (model: {1 - float(r['fast_share']):.0%} of {r['producers']} spill)"  # type: ignore[arg-type]
            if repeat > 1:
                note += f"  walls {r['walls']}"
            print(
                f"{format_bytes(size):>9} {r['tier']:>18} {str(r['used']):>26} {r['workers']:>3} {r['wall']:>8} {r['exchange_seconds']:>8} {r['stage_model_seconds']:>8} {r['stage_model_error']:>6} "
                f"{r['exchange_io_seconds']:>8} {r['predicted_exchange_seconds']:>8} {r['model_error']:>6}  {regret}{note}"
            )


if __name__ == "__main__":
    main()
