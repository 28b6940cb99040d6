"""Scan planning on the driver: the splits of every scan of a run (cached) and file schemas.

Listings and Parquet footers are read once per run however many scans read a table (a table read
with two projections, or by a subquery and its outer query, is listed once); the footers of a
listing are read concurrently, and on object storage :meth:`ScanPlanner.prefetch` lists all of
a run's tables at once when it starts, so a query of eight tables pays one round trip of
listing, not eight."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable

import polars as pl

from croupier.config import Config
import pyarrow.parquet as pq

from croupier.dag.scan import ScanSpec, Split, byte_splits, check_gensort, csv_schema, gensort_schema, parquet_facts, parquet_splits, read_footers, resolve
from croupier.storage import ObjectInfo, parse_location
from croupier.dag.stage import ScanSource

#: A scan aims at this many splits per concurrent function: more balance the functions' work at
#: the end of a stage, fewer pay a task's fixed costs fewer times (its dispatch, its exchange
#: objects, and a broadcast join's hash table, which every task builds again: 12 tasks of TPC-H
#: Q5's lineitem built its 230,000 orders 12 times). At SF 1 on 2 cores, 2 ran the 22 queries in
#: 0.88 of the time 4 took (interleaved, 5 rounds); large tables are cut at MAX_SPLIT anyway.
SPLITS_PER_FUNCTION = 2
MIN_SPLIT = 1 << 20
MAX_SPLIT = 128 << 20
#: Tables a run lists at once when it starts (see :meth:`ScanPlanner.prefetch`).
PREFETCH_THREADS = 8


class ScanPlanner:
    """Splits and schemas of a run's scans; ``stores`` opens driver-side stores (``store(url)``)."""

    def __init__(self, config: Config, stores: Any) -> None:
        self.config = config
        self.run = stores
        self._lock = threading.Lock()
        self._split_cache: dict[int, tuple[ScanSpec, tuple[list[Any], dict[str, int]]]] = {}
        self._listings: dict[str, tuple[str, list[ObjectInfo]]] = {}
        self._footers: dict[tuple[str, str, int], pq.FileMetaData] = {}
        self._pending: dict[str, Future[None]] = {}

    def prefetch(self, specs: Iterable[ScanSpec]) -> None:
        """Start listing the tables of ``specs`` on object storage and reading their Parquet
        footers, all at once in the background; :meth:`listing` waits for a table's when it
        needs it. A failure is left to the scan that meets it again (its error then comes from
        the usual place). A local folder lists in a fraction of a millisecond: its tables are
        listed when planned, as the threads would only compete for the cores with the planning
        (two stages ready together then missed each other's executor batch)."""
        kinds = {spec.url: spec.format for spec in specs if not parse_location(spec.url).is_local}
        with self._lock:
            urls = [url for url in kinds if url not in self._listings and url not in self._pending]
        if len(urls) < 2:
            return
        pool = ThreadPoolExecutor(max_workers=min(PREFETCH_THREADS, len(urls)), thread_name_prefix="croupier-list")
        with self._lock:
            for url in urls:
                self._pending[url] = pool.submit(self._warm, url, kinds[url] == "parquet")
        pool.shutdown(wait=False)

    def _warm(self, url: str, parquet: bool) -> None:
        listed = self._listed(url)
        if parquet:
            self.footers(*listed)

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

    def scan_bytes(self, spec: ScanSpec, decoded: bool = False) -> int:
        """Bytes a scan fetches: its Parquet column chunks after row-group pruning (``decoded``:
        about their size once decoded in memory), else its splits' byte ranges."""
        splits, counts = self.splits(spec)
        if decoded and counts.get("bytes_decoded"):
            return counts["bytes_decoded"]
        return counts.get("bytes_needed") or sum((s.end - s.start) or s.size for s in splits)

    def kept_bytes(self, spec: ScanSpec) -> float:
        """About the bytes a scan keeps after its predicate: :meth:`scan_bytes` times the share of
        rows the row groups' statistics say pass it (all bytes when it has no predicate or no
        Parquet statistics)."""
        _, counts = self.splits(spec)
        share = counts["rows_kept"] / counts["rows_read"] if counts.get("rows_read") else 1.0
        return self.scan_bytes(spec) * share

    def _plan_splits(self, spec: ScanSpec) -> tuple[list[Any], dict[str, int]]:
        """The scan's splits; at least one (an empty one when nothing is left to read: every stage
        runs a task, so an exchange always has a producer and an empty input still gives the
        empty frame — and a whole-table aggregate its one row)."""
        base, objects = self.listing(spec.url)
        total = sum(o.size for o in objects)
        parts = SPLITS_PER_FUNCTION * self.config.concurrency
        counts: dict[str, int] = {}
        if spec.format == "parquet":
            footers = self.footers(base, objects)
            splits, counts = parquet_splits(spec, base, self.run.store(base), objects, parts, MIN_SPLIT, MAX_SPLIT, footers)
        else:
            target = min(MAX_SPLIT, max(MIN_SPLIT, total // parts))
            if spec.format == "gensort":
                check_gensort(base, objects)
            splits = byte_splits(base, objects, target, 100 if spec.format == "gensort" else 1)
        return (splits or [Split(base, "", 0)]), counts

    def listing(self, url: str) -> tuple[str, list[ObjectInfo]]:
        """The store URL and objects ``url`` names (see :func:`resolve`), listed once per run."""
        with self._lock:
            pending = self._pending.get(url)
        if pending is not None:  # its footers too: reading them again beside it only competed for the cores
            try:
                pending.result()  # a failure is met again just below, where its error belongs
            except Exception:  # noqa: BLE001
                pass
        base, objects = self._listed(url)
        return base, list(objects)

    def _listed(self, url: str) -> tuple[str, list[ObjectInfo]]:
        """The listing of ``url`` this run keeps (made now when it has none)."""
        with self._lock:
            cached = self._listings.get(url)
        if cached is None:
            cached = resolve(url, self.run.store)
            with self._lock:
                cached = self._listings.setdefault(url, cached)
        return cached

    def footers(self, base: str, objects: list[ObjectInfo]) -> dict[str, pq.FileMetaData]:
        """The Parquet footers of ``objects`` under ``base`` by key: read once per run, the
        missing ones concurrently."""
        with self._lock:
            missing = [o for o in objects if (base, o.key, o.size) not in self._footers]
        if missing:
            read = read_footers(self.run.store(base), missing)
            with self._lock:
                self._footers.update({(base, o.key, o.size): read[o.key] for o in missing})
        with self._lock:
            return {o.key: self._footers[(base, o.key, o.size)] for o in objects}


def scan_schema(spec: ScanSpec, run: Any) -> pl.Schema:
    """The file schema of a scan, from its first object (``run`` provides ``store(url)``)."""
    return scan_facts(spec, run)[0]


def scan_facts(spec: ScanSpec, run: Any) -> tuple[pl.Schema, str]:
    """The file schema of a scan and its data's compression (:attr:`ScanSpec.codec`), from its
    first object (``run`` provides ``store(url)``)."""
    base, objects = resolve(spec.url, run.store)
    store = run.store(base)
    if spec.format == "parquet":
        return parquet_facts(store, objects)
    if spec.format == "csv":
        return csv_schema(store, objects[0], spec.csv), ""
    return gensort_schema(), ""
