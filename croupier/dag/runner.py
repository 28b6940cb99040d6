"""Runs a DAG of stages: topological order, independent stages at the same time, late binding of P.

Each submitted stage gets a driver thread that waits for the stages it reads, then builds its tasks
and hands them to the executor. Stages that become ready together are merged into one executor
call (the executor runs one batch at a time), so independent stages share the workers instead of
queueing behind each other. For a stage that reads an exchange partition-wise, P is chosen only
now, from the bytes its producers wrote, by the selector (time objective, one-level write-combined
exchange, which is what these exchanges are); the choice and why are kept for explain.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

import polars as pl

from croupier.compute.base import Task, TaskResult
from croupier.dag.exchange import ObjectRef, bucket_range, read_pieces
from croupier.dag.operators import run_pipeline
from croupier.dag.scan import (
    ScanSpec,
    byte_splits,
    check_gensort,
    csv_schema,
    gensort_schema,
    parquet_schema,
    parquet_splits,
    projected,
    resolve,
)
from croupier.dag.stage import (
    ExchangeRead,
    HashSink,
    ParquetSink,
    RangeSink,
    ScanInput,
    ScanRead,
    Stage,
    StageInput,
    TaskSpec,
    run_task,
)
from croupier.errors import ConfigError
from croupier.jobs.runtime import Run
from croupier.units import format_bytes

#: A scan aims at this many splits per concurrent function (load balance against request count).
SPLITS_PER_FUNCTION = 4
MIN_SPLIT = 1 << 20
MAX_SPLIT = 128 << 20
#: Rows of sort keys each task samples for range partitioning.
SAMPLE_ROWS = 256


@dataclass
class StageOutput:
    """What a finished stage left in storage, and how it ran."""

    stage: Stage
    schema: pl.Schema
    objects: list[ObjectRef] = field(default_factory=list)
    buckets: int = 1
    tasks: int = 0
    rows: int = 0
    bytes: int = 0
    samples: list[pl.DataFrame] = field(default_factory=list)
    files: list[tuple[str, int]] = field(default_factory=list)
    how: str = ""
    scan: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def describe(self) -> str:
        extra = f"; {self.how}" if self.how else ""
        scan = f"; row groups read {self.scan['row_groups'] - self.scan['row_groups_pruned']}/{self.scan['row_groups']}" if self.scan.get("row_groups") else ""
        return f"{self.stage.describe()} | P={self.tasks}, {self.rows:,} rows, {format_bytes(self.bytes)} out, {self.seconds:.2f} s{scan}{extra}"


class _Batcher:
    """Merges executor calls made at about the same time from several stage threads into one."""

    LINGER = 0.005

    def __init__(self, run: Run) -> None:
        self._run = run
        self._cond = threading.Condition()
        self._queue: list[dict[str, Any]] = []
        self._busy = False

    def map(self, name: str, tasks: list[Task]) -> list[TaskResult]:
        request: dict[str, Any] = {"name": name, "tasks": tasks, "done": False}
        with self._cond:
            self._queue.append(request)
            while not request["done"]:
                if not self._busy:
                    self._busy = True
                    break
                self._cond.wait()
            else:
                return self._outcome(request)
        try:
            time.sleep(self.LINGER)
            with self._cond:
                batch, self._queue = self._queue, []
            self._run_batch(batch)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
        return self._outcome(request)

    @staticmethod
    def _outcome(request: dict[str, Any]) -> list[TaskResult]:
        if "error" in request:
            raise request["error"]
        return request["results"]  # type: ignore[no-any-return]

    def _run_batch(self, batch: list[dict[str, Any]]) -> None:
        tasks = [t for r in batch for t in r["tasks"]]
        started = time.perf_counter()
        try:
            results = {r.task_id: r for r in self._run.executor.map(tasks, self._run.config)}
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting stage
            for r in batch:
                r["error"], r["done"] = exc, True
            return
        wall = time.perf_counter() - started
        for r in batch:
            r["results"] = [results[t.id] for t in r["tasks"]]
            r["wall"] = wall
            self._run.record(r["name"], r["results"], wall)
            r["done"] = True


class DagRunner:
    """Runs stages of one job run; intermediate objects go under ``tmp_url``."""

    def __init__(self, run: Run, tmp_url: str) -> None:
        self.run = run
        self.config = run.config
        self.tmp_url = tmp_url.rstrip("/")
        encoding = self.config.shuffle_encoding(tmp_url)
        # "raw" is the sort's fixed-width record codec; query rows travel as uncompressed Arrow instead
        self.encoding = "arrow" if encoding == "raw" else encoding
        self.outputs: list[StageOutput] = []
        self._futures: dict[int, Future[StageOutput]] = {}
        self._names: set[str] = set()
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="croupier-stage")
        self._batcher = _Batcher(run)
        self._lock = threading.Lock()
        self._profile: Any = None
        self._split_cache: dict[int, tuple[ScanSpec, tuple[list[Any], dict[str, int]]]] = {}

    # --- public ---------------------------------------------------------------------------
    def submit(self, stage: Stage) -> Future[StageOutput]:
        """Schedule ``stage`` (and the stages it reads) to run as soon as its inputs are ready."""
        with self._lock:
            if id(stage) in self._futures:
                return self._futures[id(stage)]
            if stage.name in self._names:
                raise ConfigError(f"two stages are named {stage.name!r}; stage names must be unique within a job")
            self._names.add(stage.name)
        for dep in stage.inputs():
            self.submit(dep.stage)
        with self._lock:
            future = self._futures[id(stage)] = self._pool.submit(self._run_stage, stage)
        return future

    def result(self, stage: Stage) -> StageOutput:
        """Wait for ``stage`` (submitting it if needed) and return its output."""
        return self.submit(stage).result()

    def wait_all(self) -> None:
        """Wait until no stage is running (errors ignored: used before cleanup)."""
        for future in list(self._futures.values()):
            try:
                future.result()
            except BaseException:  # noqa: BLE001
                pass

    def close(self) -> None:
        self.wait_all()
        self._pool.shutdown(wait=True)

    # --- one stage -----------------------------------------------------------------------------
    def _run_stage(self, stage: Stage) -> StageOutput:
        inputs = {id(i.stage): self._futures[id(i.stage)].result() for i in stage.inputs()}
        started = time.perf_counter()
        out = StageOutput(stage, self._schema(stage, inputs))
        specs = self._task_specs(stage, inputs, out)
        tasks = [Task(f"{stage.name}-{s.index}", run_task, (s,)) for s in specs]
        results = self._batcher.map(stage.name, tasks) if tasks else []
        out.tasks = len(tasks)
        for result in results:
            value = result.value
            if "object" in value:
                obj: ObjectRef = value["object"]
                out.objects.append(obj)
                out.rows += obj.rows
                out.bytes += obj.size
            if "sample" in value:
                out.samples.append(value["sample"])
            if "files" in value:
                out.files += value["files"]
                out.rows += value["rows"]
        out.seconds = time.perf_counter() - started
        with self._lock:
            self.outputs.append(out)
        return out

    def _schema(self, stage: Stage, inputs: dict[int, StageOutput]) -> pl.Schema:
        """The stage's output schema: its operators run on empty frames of the input schemas."""
        if isinstance(stage.source, ScanInput):
            main_schema = projected(stage.source.spec, pl.Schema(self._file_schema(stage.source)))
        else:
            main_schema = inputs[id(stage.source.stage)].schema
        sides = {name: pl.DataFrame(schema=inputs[id(i.stage)].schema) for name, i in stage.sides.items()}
        return run_pipeline(pl.DataFrame(schema=main_schema), stage.ops, sides).schema

    def _file_schema(self, source: ScanInput) -> dict[str, Any]:
        if source.file_schema is None:
            return dict(scan_schema(source.spec, self.run))
        return dict(source.file_schema)

    def _buckets(self, stage: Stage) -> int:
        sink = stage.sink
        if isinstance(sink, HashSink):
            return sink.buckets or self.config.exchange_buckets
        if isinstance(sink, RangeSink):
            return 1 + (sink.splitters.height if sink.splitters is not None else 0)
        return 1

    def _task_specs(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput) -> list[TaskSpec]:
        out.buckets = buckets = self._buckets(stage)

        def spec(index: int, main: ScanRead | ExchangeRead, sides: dict[str, ExchangeRead]) -> TaskSpec:
            return TaskSpec(index, main, sides, stage.ops, stage.sink, self.tmp_url, f"{stage.name}/{index:05d}", self.encoding, buckets)

        broadcast = {name: self._read_all(inputs[id(i.stage)]) for name, i in stage.sides.items() if i.mode == "all"}
        if isinstance(stage.source, ScanInput):
            file_schema = self._file_schema(stage.source)
            splits, counts = self._splits(stage.source.spec)
            out.scan = counts
            return [spec(i, ScanRead(stage.source.spec, s, file_schema), dict(broadcast)) for i, s in enumerate(splits)]
        source = inputs[id(stage.source.stage)]
        if stage.source.mode == "all":
            return [spec(0, self._read_all(source), dict(broadcast))]
        if stage.source.mode == "object":
            pieces = [p for p in (o.piece(0, len(o.offsets) - 1) for o in source.objects) if p is not None]
            return [spec(i, ExchangeRead(self.tmp_url, (p,), dict(source.schema)), dict(broadcast)) for i, p in enumerate(pieces)]
        partitioned = [source] + [inputs[id(i.stage)] for i in stage.sides.values() if i.mode == "partition"]
        width = {o.buckets for o in partitioned}
        if len(width) != 1:
            raise ConfigError(f"stage {stage.name!r} reads partition-wise from inputs with different bucket counts {sorted(width)}")
        p = self._choose_workers(stage, sum(o.bytes for o in partitioned), width.pop(), out)
        specs = []
        for j in range(p):
            first, last = bucket_range(j, p, source.buckets)
            sides = dict(broadcast)
            for name, i in stage.sides.items():
                if i.mode == "partition":
                    sides[name] = self._read_range(inputs[id(i.stage)], first, last)
            specs.append(spec(j, self._read_range(source, first, last), sides))
        return specs

    def _read_all(self, source: StageOutput) -> ExchangeRead:
        return self._read_range(source, 0, source.buckets)

    def _read_range(self, source: StageOutput, first: int, last: int) -> ExchangeRead:
        pieces = tuple(p for p in (o.piece(first, last) for o in source.objects) if p is not None)
        return ExchangeRead(self.tmp_url, pieces, dict(source.schema))

    def _choose_workers(self, stage: Stage, nbytes: int, buckets: int, out: StageOutput) -> int:
        """P for a partition-wise read: fixed by the stage, else the selector's choice for the bytes."""
        if stage.workers:
            out.how = f"P={stage.workers} fixed by the stage"
            return min(stage.workers, buckets)
        choice = self.choose_exchange(max(1, nbytes), min(buckets, self.config.max_workers or buckets))
        p = min(choice.best.workers, buckets)
        d = choice.best.dominant()
        out.how = f"selector: {format_bytes(nbytes)} measured -> direct+wc exchange, P={p} ({choice.best.seconds:.3f} s predicted, dominated by {d.name})"
        return p

    def choose_exchange(self, nbytes: int, max_workers: int | None) -> Any:
        """The selector's choice of a one-level exchange for ``nbytes`` (profile of the tmp store)."""
        from croupier.model.selector import choose

        if self._profile is None:
            self._profile = self.config.load_profile(self.tmp_url)
        return choose(nbytes, self._profile, max_workers=max_workers, concurrency=self.config.concurrency, max_levels=1)

    def estimate_tasks(self, source: ScanInput | StageInput) -> int:
        """How many tasks a stage reading ``source`` will run (scans: exact; exchanges: a guess)."""
        if isinstance(source, ScanInput):
            return len(self._splits(source.spec)[0])
        if source.mode == "all":
            return 1
        return self.config.concurrency

    def _splits(self, spec: ScanSpec) -> tuple[list[Any], dict[str, int]]:
        """The splits of a scan (cached: the compiler may ask before the stage runs)."""
        with self._lock:
            cached = self._split_cache.get(id(spec))
        if cached is not None:
            return cached[1]
        splits = self._plan_splits(spec)
        with self._lock:
            self._split_cache[id(spec)] = (spec, splits)
        return splits

    def _plan_splits(self, spec: ScanSpec) -> tuple[list[Any], dict[str, int]]:
        base, objects = resolve(spec.url, self.run.store)
        total = sum(o.size for o in objects)
        parts = SPLITS_PER_FUNCTION * self.config.concurrency
        if spec.format == "parquet":
            return parquet_splits(spec, base, self.run.store(base), objects, parts, MIN_SPLIT, MAX_SPLIT)
        target = min(MAX_SPLIT, max(MIN_SPLIT, total // parts))
        if spec.format == "gensort":
            check_gensort(base, objects)
            return byte_splits(base, objects, target, 100), {}
        return byte_splits(base, objects, target), {}


def scan_schema(spec: ScanSpec, run: Run | Any) -> pl.Schema:
    """The file schema of a scan, from its first object (``run`` provides ``store(url)``)."""
    base, objects = resolve(spec.url, run.store)
    store = run.store(base)
    if spec.format == "parquet":
        return parquet_schema(store, objects[0])
    if spec.format == "csv":
        return csv_schema(store, objects[0], spec.csv)
    return gensort_schema()


@dataclass
class JobResult:
    """Outputs of a low-level job: the final stages' data (PlainSink) or files (ParquetSink)."""

    frames: list[pl.DataFrame | None]
    outputs: list[StageOutput]
    report: Any


def read_output(runner: DagRunner, out: StageOutput) -> pl.DataFrame:
    """The rows a PlainSink/HashSink/RangeSink stage wrote, in task (and bucket) order."""
    return read_pieces(runner.run.store(runner.tmp_url), [p for p in (o.piece(0, len(o.offsets) - 1) for o in out.objects) if p is not None], out.schema)


def run_job(stages: Sequence[Stage], config: Any, executor: Any = None, tmp_url: str | None = None) -> JobResult:
    """Run the low-level job whose final stages are ``stages``.

    Intermediate objects go under ``<tmp_url or config.tmp_url>/_croupier_tmp/<run id>`` and are
    deleted at the end, on success and on failure; outputs of ParquetSink stages stay.
    """
    base = tmp_url or config.tmp_url
    if base is None:
        raise ConfigError("run_job needs a place for intermediate objects: pass tmp_url or set config.tmp_url")
    run = Run("job", config, executor)
    runner = DagRunner(run, f"{base.rstrip('/')}/_croupier_tmp/{run.run_id}")
    try:
        outputs = [runner.result(s) for s in stages]
        frames = [None if isinstance(o.stage.sink, ParquetSink) else read_output(runner, o) for o in outputs]
    finally:
        runner.close()
        run.store(runner.tmp_url).delete_prefix()
        report = run.finish()
    return JobResult(frames, outputs, report)
