"""Writers of test inputs: uniform, skewed, all-equal and hand-made records, as gensort or Parquet."""

from __future__ import annotations

import numpy as np

from croupier.config import Config
from croupier.ops.formats import write_records
from croupier.ops.gensort import generate
from croupier.storage import open_store


def write_parts(url: str, config: Config, records: np.ndarray, parts: int, fmt: str = "gensort") -> None:
    """Store ``records`` as ``parts`` objects (part-00000.dat or .parquet) under ``url``."""
    store = open_store(url, config)
    bounds = np.linspace(0, len(records), parts + 1).astype(int)
    ext = "parquet" if fmt == "parquet" else "dat"
    for i in range(parts):
        store.put(f"part-{i:05d}.{ext}", write_records(records[bounds[i] : bounds[i + 1]], fmt))


def uniform(n: int, seed: int = 1, ascii_keys: bool = False) -> np.ndarray:
    return generate(0, n, seed, ascii_keys)


def skewed(n: int, seed: int = 2) -> np.ndarray:
    """80% of the records share 1% of the distinct keys."""
    recs = generate(0, n, seed)
    rng = np.random.default_rng(seed)
    distinct = max(100, n // 10)
    keys = rng.integers(0, 256, (distinct, 10), dtype=np.uint8)
    hot = rng.random(n) < 0.8
    pick = np.where(hot, rng.integers(0, distinct // 100, n), rng.integers(distinct // 100, distinct, n))
    recs[:, :10] = keys[pick]
    return recs


def all_equal(n: int, seed: int = 3) -> np.ndarray:
    recs = generate(0, n, seed)
    recs[:, :10] = np.frombuffer(b"SAME--KEY!", np.uint8)
    return recs
