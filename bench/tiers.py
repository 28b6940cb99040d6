"""Sort through the slow tier (SeaweedFS) and through a fast tier (Redis capped at 512 MiB) beside it.

For each size: a TeraSort (gensort in, gensort out, on SeaweedFS) with every exchange on the slow
tier, on the fast tier (where the model says it fits), and with ``--tier auto`` (the model's
choice). Printed per run: wall seconds, the map + reduce stage walls, the exchange's request time
(its write and read phases' request seconds over the functions running at once: what Table 3
models), the tier model's prediction of it (Locus Table 3: 2 max(R/q, S/b_eff), shipped profiles
seaweedfs-loopback and redis-loopback), its error against that, and the selector's regret (auto's
wall time over the faster of slow and fast). Hybrid multi-round and memory levels are not implemented: not run.

    python bench/tiers.py [--sizes 256MB,512MB,1GB,2GB,4GB] [--small] [--workers P] [--json out.json]

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
from croupier.model.tier import FastTierProfile, compare
from croupier.storage import open_store
from croupier.testing import RedisServer, SeaweedFS
from croupier.units import format_bytes, parse_size

sys.path.insert(0, str(Path(__file__).parent))
from _common import s3_config  # noqa: E402

BUCKET = "croupier-bench"
FAST_MEMORY = 512 << 20


def run_one(root: str, size: int, tier: str, config: Config, workers: int | None) -> dict[str, object]:
    """One sort of the input at ``root/in`` with ``tier``; its measurements."""
    out = f"{root}/out-{tier}"
    report = sort(f"{root}/in", out, workers, config.with_(tier=tier))
    open_store(out, config).delete_prefix()
    exchange = sum(s.wall_seconds for s in report.stages if s.name in ("map", "reduce"))
    (entry,) = report.exchanges
    # the exchange's own request time (what Table 3 models): its write and read phases' request
    # seconds, summed over tasks, spread over the functions running at once
    io = sum(v[2] for s in report.stages if s.name in ("map", "reduce") for k, v in s.phases.items() if "exchange" in k)
    io_wall = io / max(1, min(int(entry["workers"]), config.concurrency))
    return {
        "size": size,
        "tier": tier,
        "used": report.summary.get("tiers", {}).get("map"),
        "fallback": report.summary.get("fast_tier_fallback", {}).get("reason"),
        "workers": entry["workers"],
        "bytes": entry["bytes"],
        "wall": round(report.wall_seconds, 3),
        "exchange_seconds": round(exchange, 3),
        "exchange_io_seconds": round(io_wall, 3),
        "why": entry.get("tier_why", ""),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="256MB,512MB,1GB,2GB,4GB")
    parser.add_argument("--small", action="store_true", help="16 MB and 64 MB only")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    sizes = [parse_size(s) for s in ("16MB,64MB" if args.small else args.sizes).split(",")]
    work = Path(tempfile.mkdtemp(prefix="croupier-tiers-"))
    rows: list[dict[str, object]] = []
    slow_profile, fast_profile = StorageProfile.load("seaweedfs-loopback"), FastTierProfile.load("redis-loopback")
    with SeaweedFS(work / "weed") as weed, RedisServer(work / "redis", maxmemory=FAST_MEMORY) as redis:
        weed.wait_ready(BUCKET)
        redis.wait_ready()
        base = s3_config(Config(concurrency=args.concurrency, progress=False, calibration="off"), weed)
        config = base.with_(fast_tier=redis.url("bench"))
        try:
            for size in sizes:
                root = f"s3://{BUCKET}/tiers-{size}"
                gensort(f"{root}/in", size, max(args.concurrency, size // 64_000_000), base, seed=1)
                for tier in ("slow", "fast", "auto"):
                    row = run_one(root, size, tier, config, args.workers)
                    p = int(row["workers"])  # type: ignore[call-overload]
                    slow_c, fast_c = compare(float(row["bytes"]), p, slow_profile, fast_profile, FAST_MEMORY)  # type: ignore[arg-type]
                    used = row["used"] or "slow"
                    predicted = (fast_c if used == "fast" else slow_c).seconds
                    row["predicted_exchange_seconds"] = round(predicted, 3)
                    measured = max(1e-6, float(row["exchange_io_seconds"]))  # type: ignore[arg-type]
                    row["model_error"] = round(abs(predicted - measured) / measured, 3)
                    row["fast_fits"] = fast_c.fits
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                open_store(root, base).delete_prefix()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'size':>9} {'tier':>5} {'used':>5} {'P':>3} {'wall s':>8} {'xchg s':>8} {'io s':>8} {'pred s':>8} {'err':>6}  regret")
    for size in sizes:
        mine = [r for r in rows if r["size"] == size]
        best = min(float(r["wall"]) for r in mine if r["tier"] in ("slow", "fast") and not r["fallback"])  # type: ignore[arg-type]
        for r in mine:
            regret = f"{float(r['wall']) / best:.2f}" if r["tier"] == "auto" else ""  # type: ignore[arg-type]
            note = f"  fell back: {r['fallback']}" if r["fallback"] else ""
            print(f"{format_bytes(size):>9} {r['tier']:>5} {str(r['used']):>5} {r['workers']:>3} {r['wall']:>8} {r['exchange_seconds']:>8} {r['exchange_io_seconds']:>8} {r['predicted_exchange_seconds']:>8} {r['model_error']:>6}  {regret}{note}")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
