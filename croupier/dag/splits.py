"""Scan planning on the driver: the splits of every scan of a run (cached) and file schemas."""

from __future__ import annotations

import threading
from typing import Any

import polars as pl

from croupier.config import Config
from croupier.dag.scan import ScanSpec, Split, byte_splits, check_gensort, csv_schema, gensort_schema, parquet_schema, parquet_splits, resolve
from croupier.dag.stage import ScanSource

#: A scan aims at this many splits per concurrent function (load balance against request count).
SPLITS_PER_FUNCTION = 4
MIN_SPLIT = 1 << 20
MAX_SPLIT = 128 << 20


class ScanPlanner:
    """Splits and schemas of a run's scans; ``stores`` opens driver-side stores (``store(url)``)."""

    def __init__(self, config: Config, stores: Any) -> None:
        self.config = config
        self.run = stores
        self._lock = threading.Lock()
        self._split_cache: dict[int, tuple[ScanSpec, tuple[list[Any], dict[str, int]]]] = {}

    def file_schema(self, source: ScanSource) -> dict[str, Any]:
        """The file schema of a scan source (read from its first object unless given)."""
        if source.file_schema is None:
            return dict(scan_schema(source.spec, self.run))
        return dict(source.file_schema)

    def splits(self, spec: ScanSpec) -> tuple[list[Any], dict[str, int]]:
        """The splits of a scan (cached: the planner may ask before the stage runs)."""
        with self._lock:
            cached = self._split_cache.get(id(spec))
        if cached is not None:
            return cached[1]
        splits = self._plan_splits(spec)
        with self._lock:
            self._split_cache[id(spec)] = (spec, splits)
        return splits

    def _plan_splits(self, spec: ScanSpec) -> tuple[list[Any], dict[str, int]]:
        """The scan's splits; at least one (an empty one when nothing is left to read: every stage
        runs a task, so an exchange always has a producer and an empty input still gives the
        empty frame — and a whole-table aggregate its one row)."""
        base, objects = resolve(spec.url, self.run.store)
        total = sum(o.size for o in objects)
        parts = SPLITS_PER_FUNCTION * self.config.concurrency
        counts: dict[str, int] = {}
        if spec.format == "parquet":
            splits, counts = parquet_splits(spec, base, self.run.store(base), objects, parts, MIN_SPLIT, MAX_SPLIT)
        else:
            target = min(MAX_SPLIT, max(MIN_SPLIT, total // parts))
            if spec.format == "gensort":
                check_gensort(base, objects)
            splits = byte_splits(base, objects, target, 100 if spec.format == "gensort" else 1)
        return (splits or [Split(base, "", 0)]), counts


def scan_schema(spec: ScanSpec, run: Any) -> pl.Schema:
    """The file schema of a scan, from its first object (``run`` provides ``store(url)``)."""
    base, objects = resolve(spec.url, run.store)
    store = run.store(base)
    if spec.format == "parquet":
        return parquet_schema(store, objects[0])
    if spec.format == "csv":
        return csv_schema(store, objects[0], spec.csv)
    return gensort_schema()
