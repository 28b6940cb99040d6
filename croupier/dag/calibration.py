"""Calibrating a store where it runs: a grid of requests, then a small standard workload of stages.

Two parts, both run on an executor against the store being calibrated, under one prefix that is
deleted at the end:

1. **Request grid** (SEER §2.2): for a few object sizes, P requests in flight (one function; C
   functions; C functions with 4 threads each, as exchange fetches run) PUT then GET objects;
   aggregate requests/s per (size, P) fit q(s, P) = min(a(s) P, qmax(s)) for reads and writes,
   and the per-stream bandwidths b_r, b_w (:func:`croupier.model.fit.fit_curve`). Every stream
   first opens its connection with an empty request, not timed: a run's stream pays that once,
   not per request (timing one large request with its set-up understated large-object bandwidth,
   so every extra exchange level was predicted as a full extra pass — issue 15); then it times at
   least :data:`MIN_REQUESTS` requests of the point's size.
2. **Standard workload**: real stages of the one engine on generated data, each with its plan
   forced, so that every phase kind and every term of the stage model is measured::

       generate   records -> gensort parts; records -> TeraSort Parquet parts; rows -> a table,
                  half of it zstd-compressed (Polars' default) and half snappy (pyarrow's,
                  DuckDB's, Spark's), as Parquet reads are priced per codec
       sort       gensort -> gensort and Parquet -> Parquet, direct (P = C) and 2 x 2 (+wc)
       queries    scan + filter + project; a projection computing expressions; group-by with
                  few and with many groups (hash exchange, direct and 2-level); partial
                  aggregates gathered by one task that orders them (a query's tail); shuffle
                  hash join; range-partitioned sort
       overheads  stages of small tasks (a few ms of work each), of 1 and 8 waves

   The stages differ in waves at one task size and in task size at one wave count, so start-up,
   per-wave and first-touch costs are told apart (:mod:`croupier.model.fit`).

Everything here is a dag-level job (stages, operators, the runner), so the DAG runner itself can
calibrate a store on a run's first job (:mod:`croupier.dag.profiles`), and ``croupier calibrate``
(:mod:`croupier.jobs.calibrate`) runs the same with larger sizes.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Mapping

import numpy as np
import polars as pl

from croupier.compute.base import Executor, Task
from croupier.compute.context import TaskContext
from croupier.config import Config
from croupier.dag.operators import AggSpec, Aggregate, Filter, HashJoin, Operator, RecordsSort, Select
from croupier.dag.operators import Sort as SortOp
from croupier.dag.scan import ScanSpec
from croupier.dag.stage import (
    ExchangeInput,
    ExchangeSink,
    HashPartitioning,
    OutputSink,
    RangePartitioning,
    RecordsRangePartitioning,
    ResultSink,
    ScanSource,
    SinglePartitioning,
    Stage,
    TaskSource,
)
from croupier.dag.task import GenerateRead, PiecesRead
from croupier.exchange.plan import ExchangePlan
from croupier.exchange.topology import Topology
from croupier.expr import col, when
from croupier.model.fit import FitResult, Observation, fit, fit_curve, observations_from_report
from croupier.model.profile import Prices, StorageProfile
from croupier.ops import partition, terasort
from croupier.ops.gensort import generate
from croupier.ops.records import RECORD_SIZE, RecordRuns, key_columns
from croupier.storage import open_store
from croupier.units import parse_size


@dataclass(frozen=True)
class Sizes:
    """How big the calibration is: the request grid and the workload's data."""

    grid_sizes: tuple[str, ...] = ("4KiB", "64KiB", "1MiB", "4MiB")
    grid_threads: tuple[int, ...] = (4,)  # threads per function at P = C x threads (beside P = 1, C)
    grid_budget: str = "4MiB"  # bytes per (size, P) point and direction
    records: int = 1_000_000  # TeraSort records per sort (100 bytes each) at scale 1
    rows: int = 2_000_000  # rows of the query table at scale 1
    parts: int = 4  # objects per generated input

    @property
    def label(self) -> str:
        return f"{self.records * RECORD_SIZE / 1e6:.0f} MB sorts, {self.rows:,}-row table"

    def scaled(self, factor: float) -> Sizes:
        """The same workload with ``factor`` times the data."""
        return replace(self, records=max(1000, int(self.records * factor)), rows=max(1000, int(self.rows * factor)))


QUICK = Sizes()
FULL = Sizes(("4KiB", "64KiB", "1MiB", "4MiB", "16MiB"), (2, 4), "64MiB", 4_000_000, 8_000_000, 8)
TEST = Sizes(("4KiB", "256KiB"), (2,), "512KiB", 200_000, 200_000, 2)
#: Scales of the workload's passes: a warm-up (its timings are dropped: first calls of a fresh
#: function import libraries and fault in memory, which no later stage pays; so its jobs run
#: together), a small pass, and a large pass as large as the time budget allows (two sizes tell
#: per-byte from fixed costs), and at least twice the small one's.
WARM_UP, SMALL, LARGEST = 0.02, 0.1, 1.0
#: Share of the small pass's time the large pass is planned to take again whatever its size
#: (measured: 41-55%; see :func:`large_scale`).
FIXED_SHARE = 0.4
#: Bootstrap resamples of a quick calibration's fit (a first run's): 40 give each coefficient's
#: standard error to about 11% of itself, in under a second for the workload's ~60 stages.
QUICK_BOOTSTRAP = 40


# --- 1. the request grid ------------------------------------------------------------------------


#: Timed requests per stream and grid point, at least: two, so that even the largest size
#: measures a warm stream's bandwidth. (The connection is opened by an empty request before them:
#: a first request of the point's size, untimed, was up to a third of the grid's bytes — 32 of the
#: 96 MiB of the quick grid's 4 MiB writes at P = 8 — and of its time on S3.)
MIN_REQUESTS = 2
#: Timed requests per stream and grid point, at most.
MAX_REQUESTS = 32


def _requests(ctx: TaskContext, url: str, prefix: str, op: str, size: int, count: int, threads: int) -> list[tuple[int, float]]:
    """``threads`` threads each PUT (or GET) ``count`` objects of ``size`` bytes; return per thread
    (requests timed, their seconds). Each thread first opens its connection with an empty
    request (PUT, or GET of what the PUT wrote), not timed."""
    store = ctx.store(url)
    block = os.urandom(min(size, 1 << 20))
    data = (block * (size // len(block) + 1))[:size]

    def stream(t: int) -> tuple[int, float]:
        opening = f"{prefix}/t{t}-open"
        if op == "PUT":
            store.put(opening, b"")
        else:
            store.get(opening)
        started = time.perf_counter()
        for i in range(count):
            key = f"{prefix}/t{t}-{i:04d}"
            if op == "PUT":
                store.put(key, data)
            else:
                store.get(key)
        return count, time.perf_counter() - started

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(stream, range(threads)))


def aggregate_rate(streams: list[tuple[int, float]]) -> float:
    """Requests/s of streams running at once: the sum of each stream's rate."""
    return sum(n / max(seconds, 1e-6) for n, seconds in streams)


def grid_points(executor: Executor, config: Config, url: str, sizes: Sizes) -> tuple[dict[str, dict[tuple[int, int], float]], int]:
    """Aggregate requests/s per (size, P) for "read" and "write"; and the largest P measured."""
    c = config.concurrency
    shapes = sorted({(1, 1), (c, 1)} | {(c, t) for t in sizes.grid_threads})
    budget = parse_size(sizes.grid_budget)
    points: dict[str, dict[tuple[int, int], float]] = {"read": {}, "write": {}}
    for size in (parse_size(s) for s in sizes.grid_sizes):
        for functions, threads in shapes:
            p = functions * threads
            count = max(MIN_REQUESTS, min(MAX_REQUESTS, budget // (size * p)))
            prefix = f"grid/{size}-{functions}x{threads}"
            for op, direction in (("PUT", "write"), ("GET", "read")):
                tasks = [Task(f"{op}-{prefix}-{w}", _requests, (url, f"{prefix}/w{w}", op, size, count, threads)) for w in range(functions)]
                points[direction][(size, p)] = aggregate_rate([s for r in executor.map(tasks, config) for s in r.value])
    return points, max(f * t for f, t in shapes)


def grid_profile(name: str, points: Mapping[str, Mapping[tuple[int, int], float]], streams: int, config: Config, sizes: Sizes) -> StorageProfile:
    """A profile with the grid's curves and bandwidths; every other coefficient still unfitted."""
    measured = [parse_size(s) for s in sizes.grid_sizes]
    read, read_err = fit_curve(points["read"], measured)
    write, write_err = fit_curve(points["write"], measured)
    largest = measured[-1]
    return StorageProfile(
        name=name,
        source=f"croupier calibration on {time.strftime('%Y-%m-%d')}: {sizes.label}, concurrency {config.concurrency}, {os.cpu_count()} cores",
        read=read,
        write=write,
        read_bandwidth=read.per_worker[-1] * largest,
        write_bandwidth=write.per_worker[-1] * largest,
        concurrency=config.concurrency,
        function_memory=config.function_memory,
        prices=Prices(source="none: a self-hosted store; put prices in the profile to use the cost objective"),
        fit={"read_mape_percent": round(read_err, 2), "write_mape_percent": round(write_err, 2)},
        max_streams=streams,
    )


# --- 2. the standard workload -------------------------------------------------------------------


#: Words of the table's free-text column (TPC-H comments are words of a small vocabulary too).
WORDS = tuple("the quick final deposits sleep furiously slyly among ironic pending packages above regular accounts".split())


@dataclass(frozen=True)
class SyntheticTable(Operator):
    """TeraSort records as a query table that stores and decodes like real tables (TPC-H's): keys
    ``k_few`` (16 groups) and ``k_many`` (about one group per 4 rows), ``v`` in [0, 1), ``w`` in
    [0, 256), ``s`` (a short number as a string), ``price`` (two decimals), ``d`` (a date of seven
    years), ``flag`` and ``mode`` (low-cardinality strings, dictionary-encoded in Parquet) and
    ``comment`` (free text of 3-8 words), all from the records' bytes. A table of random numbers
    alone decodes several times faster per byte than real data: Parquet reads calibrated on it
    were far off on TPC-H (issue 15)."""

    kind = "calibration:table"
    groups: int = 1

    def apply(self, data: RecordRuns, sides: Mapping[str, object]) -> pl.DataFrame:  # type: ignore[override]
        records = data.concatenated()
        hi, lo = key_columns(records)
        x = _mix(hi ^ (lo * np.uint64(0x9E3779B97F4A7C15)))  # 64 random bits per row
        bits = partial(_bits, x)
        words = pl.Series(WORDS)
        text = pl.DataFrame({f"t{j}": words.gather(bits(4 * j, len(WORDS))) for j in range(8)} | {f"m{j}": bits(40 + j, 2) == 0 for j in range(3, 8)})
        parts = [pl.col(f"t{j}") if j < 3 else pl.when(pl.col(f"m{j}")).then(pl.col(f"t{j}")) for j in range(8)]  # 3-8 words
        comment = text.select(pl.concat_str(parts, separator=" ", ignore_nulls=True)).to_series()
        table = pl.DataFrame(
            {
                "k_few": (records[:, 0] % 16).astype(np.int64),
                "k_many": (hi % np.uint64(self.groups)).astype(np.int64),
                "v": (hi >> np.uint64(11)).astype(np.float64) / float(1 << 53),
                "w": records[:, 9].astype(np.int64),
                "s": pl.Series(records[:, 1].astype(np.int64)).cast(pl.Utf8),
                "price": np.round(900.0 + bits(32, 1 << 20) / 10.0, 2),
                "d": pl.Series(8035 + bits(45, 2557), dtype=pl.Int32).cast(pl.Date),  # 1992-1998
                "flag": pl.Series(["A", "N", "R"]).gather(bits(56, 3)),
                "mode": pl.Series(["AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"]).gather(bits(58, 7)),
            }
        )
        return table.with_columns(comment=comment)

    def describe(self) -> str:
        return "records as a synthetic table"


@dataclass(frozen=True)
class Job:
    """One workload job: its final stages and what it forces."""

    name: str
    stages: tuple[Stage, ...]
    workers: int | None = None
    algorithm: str | None = None


def _bits(x: np.ndarray, shift: int, n: int) -> np.ndarray:
    """Values in [0, n) from the bits of ``x`` from ``shift`` up."""
    return ((x >> np.uint64(shift)) % np.uint64(n)).astype(np.int64)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: well-spread bits from any uint64 array."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _generate(name: str, count: int, parts: int, seed: int, sink: OutputSink, ops: tuple[Operator, ...] = ()) -> Stage:
    bounds = [count * i // parts for i in range(parts + 1)]
    reads = tuple(GenerateRead(bounds[i], bounds[i + 1] - bounds[i], seed, False) for i in range(parts))
    return Stage(name, TaskSource(reads), ops, sink=sink, rep="records")


#: Rows each task of the overhead stages makes into a table and filters away: a few milliseconds
#: of work, so that the functions are busy as in real stages.
OVERHEAD_ROWS = 5_000


def _overheads(name: str, tasks: int, seed: int) -> Stage:
    """A stage of ``tasks`` small tasks that return nothing: what it takes beyond their phases is
    the start-up and the cost of each wave. Each task does a little real work (empty tasks, with
    the other functions idle, handed over and replied in 0.4 ms, where the tasks of real stages,
    beside a busy function, take about 1 ms: t1 fitted from empty ones was half the per-wave cost
    of a query's small stages, which were predicted 20-45% short)."""
    reads = tuple(GenerateRead(i * OVERHEAD_ROWS, OVERHEAD_ROWS, seed, False) for i in range(tasks))
    return Stage(name, TaskSource(reads), (SyntheticTable(16), Filter(col("w") < 0)), sink=ResultSink(), rep="records")


def _splitters(partitions: int, seed: int) -> tuple[bytes, bytes]:
    """Splitters of generated records (their keys are uniform: a sample of the first rows will do)."""
    hi, lo = key_columns(generate(0, 20_000, seed))
    a, b = partition.composite_keys(hi, lo, 0)
    split_a, split_b = partition.choose_splitters(a, b, partitions)
    return split_a.tobytes(), split_b.tobytes()


def _sort(name: str, url: str, objects: list[Any], rows: list[int] | None, out: str, fmt: str, plan: ExchangePlan, seed: int) -> Stage:
    """TeraSort as stages: map (range partition by forced plan) -> levels -> reduce (sort, write)."""
    shares = terasort.plan_pieces(objects, plan.workers, rows)
    reads = tuple(PiecesRead(url, tuple(share)) for share in shares)
    sink = ExchangeSink(RecordsRangePartitioning(_splitters(plan.workers, seed)), plan=plan)
    mapped = Stage(f"{name}-map", TaskSource(reads), sink=sink, rep="records")
    return Stage(f"{name}-reduce", ExchangeInput(mapped), (RecordsSort(),), sink=OutputSink(out, f"records-{fmt}", "cal"), rep="records")


def _query_jobs(table: str, snappy: str, dim: str, out: str, c: int) -> list[Job]:
    """The query jobs, over the two copies of the table (``table`` zstd, ``snappy`` snappy):
    each codec's reads are measured at several projections and sizes."""
    codecs = {table: "zstd", snappy: "snappy", dim: "zstd"}  # as they were written (ScanSpec.codec)
    scan = lambda url, columns=None: ScanSource(ScanSpec(url, "parquet", columns, codec=codecs[url]))  # noqa: E731  (columns: a pushed-down projection)
    aggs = (AggSpec("sum", "v", "v"), AggSpec("max", "w", "w"), AggSpec("len", None, "n"))
    final = (AggSpec("sum", "v", "v"), AggSpec("max", "w", "w"), AggSpec("sum", "n", "n"))
    jobs = [Job("filter", (Stage("q-filter", scan(table), (Filter(col("w") < 128), Select((col("k_many"), col("v"), col("s")))), sink=OutputSink(f"{out}/filter", "parquet", "cal")),))]
    # projections that compute (TPC-H's discounted prices, years, cases) cost per row; picking columns does not
    price = col("price") * (1 - col("v") / 10)
    computed = (col("k_many"), price.alias("x"), (price * (1 + col("w") / 2560)).alias("y"), col("d").dt.year().alias("yr"), when(col("flag") == "A").then(col("price")).otherwise(0.0).alias("z"))
    jobs.append(Job("evaluate", (Stage("q-evaluate", scan(table, ("k_many", "price", "v", "w", "d", "flag")), (Select(computed),), sink=OutputSink(f"{out}/evaluate", "parquet", "cal")),)))
    for what, key, workers, algorithm, source in (("few", "k_few", c, "direct+wc", table), ("many", "k_many", 2 * c, "direct+wc", snappy), ("many2", "k_many", 2 * c, "2-level+wc", table)):
        partial = Stage(f"q-{what}-partial", scan(source, (key, "v", "w")), (Aggregate((key,), aggs, adaptive=True),), sink=ExchangeSink(HashPartitioning((key,))))
        merged = Stage(f"q-{what}-final", ExchangeInput(partial), (Aggregate((key,), final),), sink=OutputSink(f"{out}/{what}", "parquet", "cal"))
        jobs.append(Job(what, (merged,), workers, algorithm))
    # a query's tail: partial aggregates gathered by one task, which merges, orders and returns them
    gathered = Stage("q-top-partial", scan(snappy, ("k_few", "v", "w")), (Aggregate(("k_few",), aggs, adaptive=True),), sink=ExchangeSink(SinglePartitioning()))
    jobs.append(Job("top", (Stage("q-top-final", ExchangeInput(gathered), (Aggregate(("k_few",), final), SortOp((col("k_few"),), (False,))), sink=ResultSink()),)))
    build = Stage("q-join-build", scan(dim), sink=ExchangeSink(HashPartitioning(("k_many",))))
    # the probe side ships wide rows (a string among them), as TPC-H joins' build and probe stages do
    probe = Stage("q-join-probe", scan(snappy, ("k_many", "v", "w", "d", "comment")), (Select((col("k_many"), col("v"), col("w"), col("comment"))),), sink=ExchangeSink(HashPartitioning(("k_many",))))
    joined = Stage("q-join-final", ExchangeInput(probe), (HashJoin("build", ("k_many",), ("k_many",), "inner"),), {"build": ExchangeInput(build)}, OutputSink(f"{out}/join", "parquet", "cal"))
    jobs.append(Job("join", (joined,), 2 * c, "direct"))
    cuts = pl.DataFrame({"__k0": [i / (2 * c) for i in range(1, 2 * c)]})
    ranged = Stage("q-sort-range", scan(snappy, ("v", "w", "s", "comment")), (Select((col("v"), col("w"), col("s"))),), sink=ExchangeSink(RangePartitioning((col("v"),), (False,), False, cuts), plan=ExchangePlan.direct(2 * c)))
    jobs.append(Job("sort", (Stage("q-sort-final", ExchangeInput(ranged), (SortOp((col("v"),), (False,)),), sink=OutputSink(f"{out}/sort", "parquet", "cal")),)))
    return jobs


def run_workload(executor: Executor, config: Config, url: str, sizes: Sizes, seed: int = 7, together: bool = False) -> list[Observation]:
    """Run the standard workload under ``url`` (which it leaves for the caller to delete); return
    every stage it ran as an observation.

    Each job runs alone (one final stage: its stages' times are its own), unless ``together``:
    then the jobs run in as few runs as their forced plans allow (those that generate the inputs,
    then those that read them), their stages at once, sharing the functions. That is for a warm-up,
    whose times are dropped: on S3 its 18 runs one after the other took 2.1-3 s, about 0.7 s of
    it outside their stages (each run's set-up, lease, listings and deletes). (Measured passes
    whose jobs ran one after the other in a few shared runs priced a local 95 MiB sort at twice
    what one run per job did, 0.36 s against 0.18 s, medians of 3 calibrations each, where it
    takes about 0.25 s; left out.)"""
    from croupier.dag.runner import run_job

    c = config.concurrency
    # every exchange on the store being calibrated (a fast tier beside it is calibrated apart)
    base = replace(config, workers=None, algorithm=None, topology=None, progress=False, tmp_url=f"{url}/tmp", calibration="off", profile=None, tier="slow")
    observations: list[Observation] = []
    pending: list[Job] = []

    def run(job: Job) -> None:
        pending.append(job)
        if not together:
            flush()

    def flush() -> None:
        runs: dict[tuple[int | None, str | None], list[Job]] = {}
        for job in pending:
            runs.setdefault((job.workers, job.algorithm), []).append(job)
        pending.clear()
        for (workers, algorithm), jobs in runs.items():
            result = run_job([s for job in jobs for s in job.stages], base.with_(workers=workers, algorithm=algorithm), executor)
            observations.extend(observations_from_report(result.report, c, "calibration:" + "+".join(job.name for job in jobs)))

    n, parts = sizes.records, sizes.parts
    run(Job("gensort", (_generate("gen-gensort", n, parts, seed, OutputSink(f"{url}/in-gensort", "records-gensort", "cal")),)))
    run(Job("records-parquet", (_generate("gen-parquet", n, parts, seed + 1, OutputSink(f"{url}/in-parquet", "records-parquet", "cal")),)))
    # the table twice, half the rows each, compressed as Polars writes Parquet (zstd) and as
    # pyarrow, DuckDB and Spark do (snappy): decoding costs depend on it (ScanSpec.cost_kind);
    # k_many has one group per 4 rows of each
    half = max(1, sizes.rows // 2)
    groups = max(1, half // 4)
    for name, codec, shift in (("table", "zstd", 2), ("table-snappy", "snappy", 6)):
        sink = OutputSink(f"{url}/{name}", "parquet", "cal", compression=codec)
        run(Job(name, (_generate(f"gen-{name}", half, max(1, parts // 2), seed + shift, sink, (SyntheticTable(groups),)),)))
    run(Job("dim", (_generate("gen-dim", groups, max(1, parts // 2), seed + 3, OutputSink(f"{url}/dim", "parquet", "cal"), (SyntheticTable(groups), Select((col("k_many"), col("v").alias("x"))))),)))
    run(Job("overheads-1", (_overheads("overheads-1", c, seed + 4),)))
    run(Job("overheads-8", (_overheads("overheads-8", 8 * c, seed + 5),)))
    flush()  # the sorts list what was generated
    bounds = [n * i // parts for i in range(parts + 1)]
    rows = [bounds[i + 1] - bounds[i] for i in range(parts)]
    for fmt in ("gensort", "parquet"):
        objects = sorted(open_store(f"{url}/in-{fmt}", config).list(), key=lambda o: o.key)
        for plan in (ExchangePlan.direct(c), ExchangePlan(Topology((2, c)), True)):
            label = f"sort-{fmt}-{plan.workers}{'-2l' if plan.levels > 1 else ''}"
            run(Job(label, (_sort(label, f"{url}/in-{fmt}", objects, rows if fmt == "parquet" else None, f"{url}/out-{label}", fmt, plan, seed),)))
    for job in _query_jobs(f"{url}/table", f"{url}/table-snappy", f"{url}/dim", f"{url}/out-q", c):
        run(job)
    flush()
    return observations


# --- both, and the fit ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """A calibration's outcome: the fitted profile, the fit's report and the observations."""

    result: FitResult
    observations: list[Observation]
    grid: dict[str, dict[tuple[int, int], float]]
    seconds: float

    @property
    def profile(self) -> StorageProfile:
        return self.result.profile


def calibrate_store(executor: Executor, config: Config, url: str, name: str, sizes: Sizes = QUICK, bootstrap: int = 100, budget: float = 15.0) -> Calibration:
    """Measure the store under ``url`` (a prefix this deletes afterwards) with ``executor``: the
    request grid, then the workload at three scales (:data:`WARM_UP`, its jobs together, dropped;
    :data:`SMALL`; and the largest up to :data:`LARGEST` that the time left of ``budget`` seconds
    allows, see :func:`large_scale`). Fit and return the profile.

    The budget's clock starts once the executor's functions are up (:func:`_start_functions`):
    the job that calibrates pays their start-up with or without a calibration (about 1 s for
    the local executor's fork server and workers, which was a quarter of the budget left for the
    large pass on SeaweedFS)."""
    _start_functions(executor, config)
    started = time.perf_counter()
    store = open_store(url, config)
    observations: list[Observation] = []
    steps: dict[str, float] = {}  # seconds of each step, into the fit report (where a budget went)
    try:
        (points, streams), steps["grid"] = _timed(lambda: grid_points(executor, config, url, sizes))
        base = grid_profile(name, points, streams, config, sizes)
        steps["warm_up"] = _timed(lambda: run_workload(executor, config, f"{url}/w0", sizes.scaled(WARM_UP), together=True))[1]
        small, took = _timed(lambda: run_workload(executor, config, f"{url}/w1", sizes.scaled(SMALL)))
        steps["small"] = took
        observations += small
        keep = fit_seconds(small, base, bootstrap)  # (its own time counted in the elapsed time)
        scale = large_scale(took, budget - (time.perf_counter() - started) - keep)
        if scale:
            steps["large_scale"] = scale  # (a scale, not seconds)
            large, steps["large"] = _timed(lambda: run_workload(executor, config, f"{url}/w2", sizes.scaled(scale)))
            observations += large
    finally:
        store.delete_prefix()
    result, steps["fit"] = _timed(lambda: fit(observations, base, bootstrap=bootstrap))
    elapsed = time.perf_counter() - started
    profile = replace(result.profile, fit=dict(result.profile.fit, calibration_seconds=round(elapsed, 1), **{f"calibration_{k}": round(v, 2) for k, v in steps.items()}))
    return Calibration(replace(result, profile=profile), observations, points, elapsed)


def _up(ctx: TaskContext) -> None:
    """A task that does nothing: its function is up once it has run."""


def _start_functions(executor: Executor, config: Config) -> None:
    """Run a task that does nothing on each of the ``concurrency`` functions."""
    executor.map([Task(f"calibration-up-{i}", _up, ()) for i in range(config.concurrency)], config)


def large_scale(small_seconds: float, left: float) -> float:
    """The large pass's scale: the largest up to :data:`LARGEST` whose pass ends within ``left``
    seconds if :data:`FIXED_SHARE` of the small pass's ``small_seconds`` stays as it is and the
    rest grows in proportion to the data; 0 (no large pass) if that is under twice :data:`SMALL`.

    That overestimates the growth a little: 41-55% of a small pass does not grow (measured on this
    machine's 2 cores, the two passes' sizes and times solved for a fixed and a growing part:
    0.48-0.55 on the local folder, 0.41-0.54 on SeaweedFS, whose passes then took 5.3-5.9 and
    11.6-14.4 s more per unit of scale), so the pass ends within ``left`` with a margin for a
    shared machine's swings. Judging the growth from the warm-up was far off: its first calls made
    it about as slow as the small pass. Taking a quarter as fixed left SeaweedFS's large pass out
    of half its first calibrations: its scale came out a few hundredths under twice the small one."""
    grown = (left / max(small_seconds, 1e-3) - FIXED_SHARE) / (1 - FIXED_SHARE)  # times the small pass's data
    scale = min(LARGEST, SMALL * grown)
    return scale if scale >= 2 * SMALL else 0.0


#: Resamples of the fit timed to judge the final fit's time (:func:`fit_seconds`).
TIMED_RESAMPLES = 8


def fit_seconds(observations: list[Observation], base: StorageProfile, bootstrap: int) -> float:
    """The seconds to keep for the final fit: a fit of ``observations`` with a few resamples
    (:data:`TIMED_RESAMPLES`) timed, scaled to ``bootstrap`` resamples, for twice as many stages
    (the large pass's are added). (A fixed second kept for it was a quarter of what 60 resamples
    took, and a calibration meant to take 10 s took 15. One fit without resamples, timed, then
    counted once per resample kept three times what the final fit took — 3.0 s for 0.8 s: a
    resample costs a third of a whole fit, 12 ms against 33 — and that kept SeaweedFS's large pass
    out.)"""
    timed = min(bootstrap, TIMED_RESAMPLES)
    took = _timed(lambda: fit(observations, base, bootstrap=timed))[1]
    return 2 * took * (bootstrap + 1) / (timed + 1)


def _timed(fn: Any) -> tuple[Any, float]:
    began = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - began


def describe_grid(profile: StorageProfile) -> list[str]:
    """The grid's curves, one line per size and direction."""
    lines = []
    for op, curve in (("read", profile.read), ("write", profile.write)):
        for s, a, q in zip(curve.sizes, curve.per_worker, curve.ceiling):
            knee = q / a if a else math.inf
            lines.append(f"  {op:<5} {int(s):>10,} B: {a:9.1f} req/s per stream, ceiling {q:9.1f} req/s (flat from P={knee:.1f})")
    return lines
