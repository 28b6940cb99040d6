"""How many producers' shares a capped Redis holds before it refuses writes, measured against the
model's count (croupier.model.tier.fast_share, with the memory per stored byte calibrated on the
same server), for the share sizes, object sizes and writer counts an exchange has.

Each case starts a fresh Redis capped at ``--maxmemory``; ``writers`` threads take producers in
turn and write each producer's share as its objects one after another, as an exchange's producers
do (croupier.exchange.move.write_level); a producer the server refuses deletes what it wrote
(croupier.dag.task) and the case ends after a few refusals. The count of producers whose whole
share was written is the measured m; the model's m is fast_share x M.

    python bench/fast_tier_fill.py            # prints one row per case and how many the model got right
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
from pathlib import Path

from croupier.config import Config
from croupier.errors import StoreFullError
from croupier.jobs.calibrate_tier import calibrate_fast_tier
from croupier.model.tier import fast_share
from croupier.storage import open_store
from croupier.storage.location import parse_location
from croupier.testing import RedisServer

MB = 1_000_000
#: (object bytes, objects per producer): shares of 95-150 MiB, as 1-105 MB objects
CASES = [(int(17.5 * MB), 6), (int(19.6 * MB), 8), (105 * MB, 1), (4 * MB, 25), (1 * MB, 100)]
PRODUCERS = 64


def fill(url: str, object_bytes: int, per_producer: int, writers: int) -> int:
    """Producers whose whole share the server at ``url`` took (see the module docstring)."""
    store = open_store(parse_location(url), Config())
    payload = os.urandom(object_bytes)
    lock = threading.Lock()
    state = {"next": 0, "stored": 0, "refused": 0}

    def writer() -> None:
        while True:
            with lock:
                producer = state["next"]
                state["next"] += 1
                if producer >= PRODUCERS or state["refused"] >= 2 * writers:
                    return
            keys: list[str] = []
            try:
                for j in range(per_producer):
                    keys.append(f"p{producer}/o{j}")
                    store.put(keys[-1], payload)
                with lock:
                    state["stored"] += 1
            except StoreFullError:
                store.delete(keys)
                with lock:
                    state["refused"] += 1

    threads = [threading.Thread(target=writer) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    return state["stored"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--maxmemory", type=int, default=512 << 20, help="Redis maxmemory in bytes (default 512 MiB)")
    args = parser.parse_args()
    right = total = 0
    print(f"{'object MB':>10} {'objects':>8} {'share MiB':>10} {'writers':>8} {'model m':>8} {'measured m':>11}")
    with tempfile.TemporaryDirectory() as work:
        with RedisServer(Path(work) / "cal", maxmemory=args.maxmemory) as server:
            server.wait_ready()
            fast = calibrate_fast_tier(server.url("calibration"), Config(concurrency=2), quick=True)
        print(f"calibrated memory per stored byte: {fast.memory_overhead:.3f}")
        for object_bytes, per_producer in CASES:
            for writers in (1, 2):
                with RedisServer(Path(work) / f"r{object_bytes}-{writers}", maxmemory=args.maxmemory) as server:
                    server.wait_ready()
                    free = args.maxmemory - server.used_memory()
                    share = object_bytes * per_producer
                    model = round(fast_share(fast, free, share * PRODUCERS, PRODUCERS, writers, object_bytes) * PRODUCERS)
                    measured = fill(server.url("fill"), object_bytes, per_producer, writers)
                right += model == measured
                total += 1
                print(f"{object_bytes / MB:>10.1f} {per_producer:>8} {share / 2**20:>10.1f} {writers:>8} {model:>8} {measured:>11}", flush=True)
    print(f"model right in {right} of {total} cases")


if __name__ == "__main__":
    main()
