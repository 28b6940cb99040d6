"""Speed of the selector at run time: the late bindings of TPC-H queries, without running them.

Every late-bound exchange of a query calls :func:`croupier.model.selector.choose` (through
``Binder.late``) between its producers and its consumers, so its time is on the critical path of
interactive queries. This replays such calls: producers done, B = 128 buckets, M in (2, 8, 15)
producers, D in (7 kB, 1.1 MB, 15 MB, 200 MB), concurrency 2, with the consumer phase kinds of a
few query stages (an aggregation, a join, a gather). The profile is the calibrated one of this
machine when there is one (``~/.cache/croupier/profiles/*/*.json``), else the shipped ``local``;
``--profile`` names another (a cache entry or a profile file). Prints the median seconds per call
over all cases and rounds (one profile, as a run's binder keeps), its CPU time, the median over
cases of each case's fastest round (steadiest when other work shares the machine), the first call's (cold: nothing remembered yet), the number of candidates per call, and a digest of every choice's numbers and
texts, which must not change when the selector is only made faster.

    python bench/selector_speed.py [--rounds 15] [--profile PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path

from croupier.model.profile import StorageProfile
from croupier.model.selector import Choice, choose

BUCKETS = 128
CONCURRENCY = 2
SENDERS = (2, 8, 15)
SIZES = (7_000, 1_100_000, 15_000_000, 200_000_000)
#: Phase kinds a late binding passes (the consumers' stage kinds, see croupier.dag.binding.stage_kinds).
PHASES: tuple[dict[str, tuple[str, ...]], ...] = (
    {"reduce": ("read:exchange-frames-arrow", "hash_aggregate", "write:exchange-frames-arrow-single"), "level": ("read:exchange-frames-arrow", "write:exchange-frames-arrow-hash")},
    {"reduce": ("read:exchange-frames-arrow", "read:exchange-frames-arrow", "hash_join#0a58d760", "project#28e3ed1d", "write:exchange-frames-arrow-hash")},
    {"reduce": ("read:exchange-frames-arrow", "hash_aggregate#3a4fe8f4", "write:result")},
)


def default_profile() -> StorageProfile:
    """This machine's calibrated profile (the newest cache entry), else the shipped ``local``."""
    entries = sorted(Path.home().glob(".cache/croupier/profiles/*/*.json"), key=lambda p: p.stat().st_mtime)
    return load(entries[-1]) if entries else StorageProfile.load("local")


def load(path: str | Path) -> StorageProfile:
    """A profile from a profile cache entry (its ``profile``) or a profile file or shipped name."""
    path = Path(path)
    if path.is_file():
        data = json.loads(path.read_text())
        if "profile" in data:
            return StorageProfile.from_dict(data["profile"])
    return StorageProfile.load(path)


def late(data_bytes: int, profile: StorageProfile, senders: int, phases: dict[str, tuple[str, ...]]) -> Choice:
    """What ``Binder.late`` asks of the selector (objective time, nothing forced)."""
    return choose(data_bytes, profile, concurrency=CONCURRENCY, senders=senders, buckets=BUCKETS, producers_done=True, phases=phases)


def digest(choice: Choice) -> str:
    """Every number and text of a choice that explain shows or the runner uses."""
    rows = [choice.best.plan.name, choice.best.workers, choice.explain(rows=len(choice.candidates))]
    for c in choice.candidates:
        d = c.dominant()
        rows.append((c.plan.name, c.workers, repr(c.seconds), repr(c.low), repr(c.high), repr(c.cost), sorted(c.requests.items()), d.name, repr(d.seconds), d.why))
    return repr(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="times each case is timed")
    parser.add_argument("--profile", help="a profile cache entry, profile file or shipped name (default: this machine's calibrated one)")
    args = parser.parse_args()
    profile = load(args.profile) if args.profile else default_profile()
    cases = [(d, m, ph) for ph in PHASES for m in SENDERS for d in SIZES]
    started = time.perf_counter()
    first, senders, phases = cases[0]
    late(first, profile, senders, phases)
    cold = time.perf_counter() - started
    times: list[float] = []
    cpu: list[float] = []
    counts: list[int] = []
    check = hashlib.sha256()
    for r in range(args.rounds):
        for d, m, ph in cases:
            started, used = time.perf_counter(), time.thread_time()
            choice = late(d, profile, m, ph)
            times.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - used)
            if r == 0:
                counts.append(len(choice.candidates))
                check.update(digest(choice).encode())
    print(f"profile {profile.label} ({profile.source[:60]}...), {len(cases)} cases x {args.rounds} rounds")
    print(f"candidates per call: {min(counts)}-{max(counts)} (median {statistics.median(counts):g})")
    print(f"first call (cold): {cold * 1e3:.2f} ms")
    deciles = statistics.quantiles(times, n=10)
    print(f"median per choose() call: {statistics.median(times) * 1e3:.3f} ms (p10 {deciles[0] * 1e3:.3f}, p90 {deciles[-1] * 1e3:.3f})")
    print(f"median CPU time per call: {statistics.median(cpu) * 1e3:.3f} ms")
    best = [min(times[r * len(cases) + i] for r in range(args.rounds)) for i in range(len(cases))]
    print(f"median over cases of each case's fastest call: {statistics.median(best) * 1e3:.3f} ms (steadiest when other work shares the machine)")
    print(f"digest of every choice: {check.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
