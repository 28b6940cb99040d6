"""The one DAG runner: every job — TeraSort and every query — runs its stages here.

Each submitted stage gets a driver thread that waits for the stages it reads, binds the exchanges
it reads (P, algorithm and topology, by the selector, from the bytes the producers reported — see
:mod:`croupier.dag.binding`), runs the exchanges' intermediate levels as stages of their own, then
builds its tasks and hands them to the executor. Stages that become ready together are merged into
one executor call, so independent stages share the functions instead of queueing behind each other.

::

    stage thread:  wait for producers ─> bind each exchange input ─> run levels 2..k ─> run tasks
                                          (late: from measured D)     (P tasks per level)

Objects of a run live under its temporary prefix: a producer stage writes level 1 under
``<stage>/``, each binding of it writes its later levels under ``<stage>/x<n>/`` (an output can be
read by several consumers, each with its own plan).
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np
import polars as pl

from croupier.compute.base import Task, TaskResult
from croupier.dag.binding import Binder, Decision
from croupier.dag.operators import run_pipeline
from croupier.dag.scan import ScanSpec, byte_splits, check_gensort, csv_schema, gensort_schema, parquet_schema, parquet_splits, projected, resolve
from croupier.dag.stage import (
    ExchangeInput,
    ExchangeSink,
    HashPartitioning,
    OutputSink,
    ResultSink,
    ScanSource,
    SinglePartitioning,
    Stage,
    TaskSource,
)
from croupier.dag.task import ExchangeRead, ExchangeWrite, OutputWrite, ResultWrite, ScanRead, TaskSpec, run_level, run_task
from croupier.errors import ConfigError
from croupier.exchange import move
from croupier.exchange.broadcast import BroadcastPlan
from croupier.exchange.move import Fetch, Written
from croupier.exchange.plan import ExchangePlan
from croupier.exchange.topology import Topology
from croupier.dag.run import Run
from croupier.ops.records import RECORD_SIZE, RecordRuns
from croupier.storage.location import parse_location
from croupier.units import format_bytes

#: A scan aims at this many splits per concurrent function (load balance against request count).
SPLITS_PER_FUNCTION = 4
MIN_SPLIT = 1 << 20
MAX_SPLIT = 128 << 20


@dataclass
class StageOutput:
    """What a finished stage left in storage (or returned), and how it ran."""

    stage: Stage
    schema: pl.Schema | None
    tasks: int = 0
    plan: ExchangePlan | BroadcastPlan | None = None  # the plan its producers wrote level 1 with
    early: bool = False  # that plan was bound before they ran (else: fine buckets, bound late)
    written: list[Written] = field(default_factory=list)
    bytes: int = 0
    rows: int = 0
    samples: list[Any] = field(default_factory=list)
    files: list[tuple[str, int, int]] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    scan: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    bindings: int = 0

    @property
    def prefix(self) -> str:
        """Key prefix of this stage's level-1 objects."""
        return f"{self.stage.name}/"

    def describe(self) -> str:
        scan = f"; row groups read {self.scan['row_groups'] - self.scan['row_groups_pruned']}/{self.scan['row_groups']}" if self.scan.get("row_groups") else ""
        notes = "".join(f"\n      {n}" for n in self.notes)
        out = f"{format_bytes(self.bytes)} out, " if isinstance(self.stage.sink, ExchangeSink) else ""
        return f"{self.stage.describe()}\n      {self.tasks} task(s), {self.rows:,} rows, {out}{self.seconds:.2f} s{scan}{notes}"


@dataclass
class Bound:
    """One exchange input of a consumer stage, bound: the plan and where its last level is."""

    producer: StageOutput
    decision: Decision
    prefix: str  # where levels 2..k go
    written: list[Written]  # what the senders of the last level reported
    last_prefix: str

    def fetches(self, consumer: int) -> list[Fetch]:
        plan = self.decision.plan
        return move.fetches_for(plan, plan.levels - 1, consumer, self.written, self.last_prefix)


class _Batcher:
    """Merges executor calls made at about the same time from several stage threads into one."""

    LINGER = 0.005

    def __init__(self, run: Run) -> None:
        self._run = run
        self._cond = threading.Condition()
        self._queue: list[dict[str, Any]] = []
        self._busy = False

    def map(self, name: str, tasks: list[Task]) -> list[TaskResult]:
        """Run one stage's tasks; return their results in order."""
        return self.map_many([(name, tasks)])[0]

    def map_many(self, parts: list[tuple[str, list[Task]]]) -> list[list[TaskResult]]:
        """Run several stages' tasks in one executor call (each reported as its own stage)."""
        request: dict[str, Any] = {"parts": parts, "done": False}
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
    def _outcome(request: dict[str, Any]) -> list[list[TaskResult]]:
        if "error" in request:
            raise request["error"]
        return request["results"]  # type: ignore[no-any-return]

    def _run_batch(self, batch: list[dict[str, Any]]) -> None:
        tasks = [t for r in batch for _, part in r["parts"] for t in part]
        started = time.perf_counter()
        try:
            results = {r.task_id: r for r in self._run.executor.map(tasks, self._run.config)}
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting stage
            for r in batch:
                r["error"], r["done"] = exc, True
            return
        wall = time.perf_counter() - started
        for r in batch:
            r["results"] = []
            for name, part in r["parts"]:
                got = [results[t.id] for t in part]
                r["results"].append(got)
                self._run.record(name, got, wall)
            r["done"] = True


class DagRunner:
    """Runs the stages of one job run; intermediate objects go under ``tmp_url``."""

    def __init__(self, run: Run, tmp_url: str) -> None:
        self.run = run
        self.config = run.config
        self.tmp_url = str(parse_location(tmp_url))  # the canonical URL: workers parse it again
        self.binder = Binder(self.config, self.tmp_url)
        encoding = self.config.shuffle_encoding(tmp_url)
        self.records_format = encoding
        # "raw" is the records' own bytes; query rows travel as uncompressed Arrow instead
        self.frames_format = "arrow" if encoding == "raw" else encoding
        self.outputs: list[StageOutput] = []
        self._futures: dict[int, Future[StageOutput]] = {}
        self._names: set[str] = set()
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="croupier-stage")
        self._batcher = _Batcher(run)
        self._lock = threading.Lock()
        self._split_cache: dict[int, tuple[ScanSpec, tuple[list[Any], dict[str, int]]]] = {}
        self._bindings = itertools.count()
        self._deferred: set[int] = set()

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
            if _eager(stage):  # runs together with its consumer (see _run_fused)
                future: Future[StageOutput] = Future()
                self._futures[id(stage)] = future
                self._deferred.add(id(stage))
            else:
                future = self._futures[id(stage)] = self._pool.submit(self._run_stage, stage)
        return future

    def result(self, stage: Stage) -> StageOutput:
        """Wait for ``stage`` (submitting it if needed) and return its output."""
        return self.submit(stage).result()

    def wait_all(self) -> None:
        """Wait until no stage is running (errors ignored: used before cleanup). A stage that runs
        with its eager consumers is failed if it never ran (its consumer failed first)."""
        with self._lock:
            futures = list(self._futures.items())
        for key, future in futures:
            if key not in self._deferred:
                _quietly(future)
        for key, future in futures:
            if key in self._deferred and not future.done():
                future.set_exception(ConfigError("not run: the stage that runs it with its eager consumers failed first"))
            _quietly(future)

    def close(self) -> None:
        """Wait for every stage, stop the stage threads, and put each exchange's measured requests
        beside its plan's in the run report."""
        self.wait_all()
        self._pool.shutdown(wait=True)
        self.measure_exchanges()

    def measure_exchanges(self) -> None:
        """Fill in ``measured_requests`` of every exchange of the report (by its channel)."""
        totals: dict[str, dict[str, int]] = {}
        for stage in self.run.report.stages:
            for channel, stats in stage.channels.items():
                got = totals.setdefault(channel, {})
                for kind in ("PUT", "GET", "GET_RANGE"):
                    got[kind] = got.get(kind, 0) + stats.requests(kind)
        for entry in self.run.report.exchanges:
            entry["measured_requests"] = totals.get(f"x:{entry['producer']}", {"PUT": 0, "GET": 0, "GET_RANGE": 0})

    def estimate_tasks(self, source: ScanSource | ExchangeInput | TaskSource) -> int:
        """How many tasks a stage reading ``source`` will run (scans: exact; exchanges: a guess)."""
        if isinstance(source, ScanSource):
            return len(self._splits(source.spec)[0])
        if isinstance(source, TaskSource):
            return len(source.reads)
        if source.read == "all":
            return 1
        if source.read == "forward":
            return max(1, self.result(source.stage).tasks)
        return self.config.workers or self.config.concurrency

    # --- one stage -----------------------------------------------------------------------------
    def _run_stage(self, stage: Stage) -> StageOutput:
        if isinstance(stage.source, ExchangeInput) and _eager(stage.source.stage):
            return self._run_fused(stage)
        inputs = {id(i.stage): self._futures[id(i.stage)].result() for i in stage.inputs()}
        started = time.perf_counter()
        out = StageOutput(stage, self._schema(stage, inputs))
        mains, sides = self._reads(stage, inputs, out)
        out.tasks = len(mains)
        self._producer_plan(stage, inputs, out)
        specs = [TaskSpec(i, main, sides[i], stage.ops, self._write(stage, i, out)) for i, main in enumerate(mains)]
        tasks = [Task(f"{stage.name}-{s.index}", run_task, (s,), inputs=s.inputs() if self.config.prefetch else ()) for s in specs]
        results = self._batcher.map(stage.name, tasks) if tasks else []
        self._predict(stage.name)
        for result in results:
            self._fold(out, result.value)
        out.seconds = time.perf_counter() - started
        with self._lock:
            self.outputs.append(out)
        return out

    def _run_fused(self, stage: Stage) -> StageOutput:
        """Eager consumers (SEER §5.1): run the producer stage and ``stage`` in one executor call;
        consumer tasks start once ``config.eager_after`` of the producers finished and poll (up to
        the task time limit) for objects still being written. Only for an early, plain direct
        exchange, whose object names need no producer metadata."""
        assert isinstance(stage.source, ExchangeInput)
        producer = stage.source.stage
        future = self._futures[id(producer)]
        try:
            if stage.sides:
                raise ConfigError(f"stage {stage.name!r}: eager consumers cannot also read side inputs")
            p_inputs = {id(i.stage): self._futures[id(i.stage)].result() for i in producer.inputs()}
            started = time.perf_counter()
            p_out = StageOutput(producer, self._schema(producer, p_inputs))
            p_mains, p_sides = self._reads(producer, p_inputs, p_out)
            p_out.tasks = len(p_mains)
            self._producer_plan(producer, p_inputs, p_out)
            plan = p_out.plan
            if not isinstance(plan, ExchangePlan) or plan.levels != 1 or plan.combine:
                raise ConfigError(f"eager consumers need an early, plain direct exchange, not {plan.name if plan else None}")
            p_specs = [TaskSpec(i, m, p_sides[i], producer.ops, self._write(producer, i, p_out)) for i, m in enumerate(p_mains)]
            p_tasks = [Task(f"{producer.name}-{s.index}", run_task, (s,), inputs=s.inputs() if self.config.prefetch else ()) for s in p_specs]
            out = StageOutput(stage, self._schema(stage, {id(producer): p_out}))
            bound = self._bound(p_out, Decision(plan, f"{plan.describe()}; eager consumers start after {self.config.eager_after:.0%} of the producers"))
            mains = [replace(self._exchange_read(bound, j), wait=self.config.task_timeout) for j in range(plan.workers)]
            out.tasks = len(mains)
            out.notes.append(f"reads {producer.name}: {bound.decision.how}")
            self._record_exchange(stage, bound)
            gate = (tuple(t.id for t in p_tasks), self.config.eager_after)
            c_specs = [TaskSpec(j, m, {}, stage.ops, self._write(stage, j, out)) for j, m in enumerate(mains)]
            c_tasks = [Task(f"{stage.name}-{s.index}", run_task, (s,), after=gate) for s in c_specs]
            p_results, c_results = self._batcher.map_many([(producer.name, p_tasks), (stage.name, c_tasks)])
            self._predict(producer.name, stage.name)
            for result in p_results:
                self._fold(p_out, result.value)
            p_out.seconds = time.perf_counter() - started
            future.set_result(p_out)
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
            raise
        for result in c_results:
            self._fold(out, result.value)
        out.seconds = time.perf_counter() - started
        with self._lock:
            self.outputs += [p_out, out]
        return out

    def _predict(self, *names: str) -> None:
        """Put the model's prediction, from what each stage measured, beside its measured time."""
        from croupier.model.stage import facts_from_report, predict_stage

        profile = self.binder.profile()
        for name in names:
            report = self.run.report.stage(name)
            report.predicted = predict_stage(facts_from_report(report), profile, self.config.concurrency).to_dict()

    @staticmethod
    def _fold(out: StageOutput, value: dict[str, Any]) -> None:
        if "written" in value:
            out.written.append(value["written"])
            out.bytes += value["bytes"]
            out.rows += value["rows"]
        if "sample" in value:
            out.samples.append(value["sample"])
        if "files" in value:
            out.files += value["files"]
            out.rows += sum(f[1] for f in value["files"])
        if "value" in value:
            out.values.append(value["value"])

    def _schema(self, stage: Stage, inputs: dict[int, StageOutput]) -> pl.Schema | None:
        """The stage's output schema (frames): its operators run on empty inputs."""
        if stage.rep == "records":
            return None
        empty: Any
        if isinstance(stage.source, ScanSource):
            empty = pl.DataFrame(schema=projected(stage.source.spec, pl.Schema(self._file_schema(stage.source))))
        elif isinstance(stage.source, ExchangeInput) and inputs[id(stage.source.stage)].schema is not None:
            empty = pl.DataFrame(schema=inputs[id(stage.source.stage)].schema)
        else:  # TeraSort records in, rows out
            empty = RecordRuns([np.empty((0, RECORD_SIZE), np.uint8)], [0])
        sides = {name: pl.DataFrame(schema=inputs[id(i.stage)].schema) for name, i in stage.sides.items()}
        result = run_pipeline(empty, stage.ops, sides)
        return result.schema if isinstance(result, pl.DataFrame) else None

    def _file_schema(self, source: ScanSource) -> dict[str, Any]:
        if source.file_schema is None:
            return dict(scan_schema(source.spec, self.run))
        return dict(source.file_schema)

    # --- reading: bind every exchange input, run its levels, hand out fetch lists --------------------
    def _reads(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput) -> tuple[list[Any], list[dict[str, ExchangeRead]]]:
        """Per task: the main read and the side reads."""
        source = stage.source
        partitioned: dict[str, Bound] = {}
        if isinstance(source, ScanSource):
            file_schema = self._file_schema(source)
            splits, counts = self._splits(source.spec)
            out.scan = counts
            mains: list[Any] = [ScanRead(source.spec, s, file_schema) for s in splits]
        elif isinstance(source, TaskSource):
            mains = list(source.reads)
        else:
            producer = inputs[id(source.stage)]
            if source.read == "partition":
                partitioned = self._bind_partitioned(stage, inputs, out)
                bound = partitioned[""]
                mains = [self._exchange_read(bound, j) for j in range(bound.decision.workers)]
            elif source.read == "all":
                bound = self._bind_broadcast(producer, 1, out)
                mains = [self._exchange_read(bound, 0)]
            else:
                mains = [self._forward_read(producer, i) for i in range(producer.tasks)]
        n = len(mains)
        sides: list[dict[str, ExchangeRead]] = [{} for _ in range(n)]
        for name, side in stage.sides.items():
            if side.read == "partition":
                bound = partitioned.get(name) or self._missing_partition(stage, name)
            elif side.read == "all":
                bound = self._bind_broadcast(inputs[id(side.stage)], n, out)
            else:
                raise ConfigError(f"stage {stage.name!r}: a side input cannot be read 'forward'")
            for j in range(n):
                sides[j][name] = self._exchange_read(bound, j)
        return mains, sides

    @staticmethod
    def _missing_partition(stage: Stage, name: str) -> Bound:
        raise ConfigError(f"stage {stage.name!r}: side {name!r} is read partition-wise but the main input is not")

    def _exchange_read(self, bound: Bound, consumer: int) -> ExchangeRead:
        producer = bound.producer
        fmt = self.records_format if producer.stage.rep == "records" else self.frames_format
        schema = dict(producer.schema) if producer.schema is not None else None
        return ExchangeRead(self.tmp_url, tuple(bound.fetches(consumer)), producer.stage.rep, fmt, schema, self.config.request_timeout, f"x:{producer.stage.name}")

    def _forward_read(self, producer: StageOutput, index: int) -> ExchangeRead:
        fmt = self.records_format if producer.stage.rep == "records" else self.frames_format
        schema = dict(producer.schema) if producer.schema is not None else None
        fetch = Fetch(f"{producer.prefix}l0/s{index:05d}")
        return ExchangeRead(self.tmp_url, (fetch,), producer.stage.rep, fmt, schema, self.config.request_timeout, f"x:{producer.stage.name}")

    def _bind_partitioned(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput) -> dict[str, Bound]:
        """Bind the main input and the co-partitioned side inputs with one P."""
        assert isinstance(stage.source, ExchangeInput)
        named = {"": inputs[id(stage.source.stage)]}
        named.update({k: inputs[id(v.stage)] for k, v in stage.sides.items() if v.read == "partition"})
        main = named[""]
        total = sum(o.bytes for o in named.values())
        if main.early:
            assert isinstance(main.plan, ExchangePlan)
            template = Decision(main.plan, f"{main.plan.describe()} (bound before the producers ran)")
        elif stage.workers:
            template = self.binder.fixed(stage.workers, main.tasks, _buckets(main))
        else:
            template = self.binder.late(total, main.tasks, _buckets(main))
        bound = {}
        for name, producer in named.items():
            plan = producer.plan if producer.early else ExchangePlan(template.plan.topology, template.plan.combine, producer.tasks, _buckets(producer))
            assert isinstance(plan, ExchangePlan)
            if plan.workers != template.workers:
                raise ConfigError(f"stage {stage.name!r}: inputs partitioned {plan.workers} and {template.workers} ways cannot be joined partition-wise")
            bound[name] = self._bound(producer, replace(template, plan=plan))
        self._run_levels(stage, list(bound.values()))
        for b in bound.values():
            out.notes.append(f"reads {b.producer.stage.name}: {format_bytes(b.producer.bytes)} -> {b.decision.how}")
            self._record_exchange(stage, b)
        return bound

    def _bind_broadcast(self, producer: StageOutput, consumers: int, out: StageOutput) -> Bound:
        decision = self.binder.broadcast(producer.bytes, producer.tasks, consumers)
        bound = self._bound(producer, decision)
        self._run_levels(out.stage, [bound])
        out.notes.append(f"reads {producer.stage.name}: {decision.how}")
        self._record_exchange(out.stage, bound)
        return bound

    def _bound(self, producer: StageOutput, decision: Decision) -> Bound:
        with self._lock:
            producer.bindings += 1
            prefix = f"{producer.prefix}x{producer.bindings}/"
        return Bound(producer, decision, prefix, list(producer.written), producer.prefix)

    def _run_levels(self, stage: Stage, bounds: list[Bound]) -> None:
        """Run levels 2..k of every bound exchange (one batch per level, exchanges side by side)."""
        deepest = max(b.decision.plan.levels for b in bounds)
        for level in range(1, deepest):
            tasks: list[Task] = []
            owners: list[tuple[Bound, int]] = []
            for b in bounds:
                plan = b.decision.plan
                if level >= plan.levels:
                    continue
                wait = self.config.request_timeout
                for w in range(plan.workers):
                    fetches = tuple(move.fetches_for(plan, level - 1, w, b.written, b.last_prefix))
                    inputs = tuple(f.as_input(self.tmp_url) for f in fetches) if self.config.prefetch else ()
                    args = (self.tmp_url, plan, level, w, fetches, wait, b.prefix, f"x:{b.producer.stage.name}")
                    tasks.append(Task(f"{b.producer.stage.name}>{stage.name}-L{level + 1}-{w}", run_level, args, inputs=inputs))
                    owners.append((b, w))
            results = self._batcher.map(f"{stage.name} level {level + 1}", tasks)
            self._predict(f"{stage.name} level {level + 1}")
            fresh: dict[int, list[Written]] = {}
            for (b, w), result in zip(owners, results):
                fresh.setdefault(id(b), [None] * b.decision.plan.workers)[w] = result.value["written"]
            for b in bounds:
                if id(b) in fresh:
                    b.written, b.last_prefix = fresh[id(b)], b.prefix

    def _record_exchange(self, consumer: Stage, bound: Bound) -> None:
        """Keep the binding (with the candidates the selector compared) for the run report."""
        decision = bound.decision
        entry: dict[str, Any] = {
            "producer": bound.producer.stage.name,
            "consumer": consumer.name,
            "bytes": bound.producer.bytes,
            "producers": bound.producer.tasks,
            "plan": decision.plan.name,
            "workers": decision.workers,
            "how": decision.how,
            "predicted_requests": decision.plan.predicted_requests(),
        }
        if decision.choice is not None:
            ranked = sorted(decision.choice.candidates, key=lambda c: (c.seconds, c.cost))[:8]
            entry["predicted_seconds"] = decision.choice.best.seconds
            entry["candidates"] = [{"plan": c.plan.name, "workers": c.workers, "seconds": round(c.seconds, 4), "cost": c.cost, "dominant": c.dominant().name} for c in ranked]
        with self._lock:
            self.run.report.exchanges.append(entry)

    # --- writing ------------------------------------------------------------------------------------
    def _producer_plan(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput) -> None:
        """The plan this stage's tasks write level 1 with (exchange sinks only)."""
        sink = stage.sink
        if not isinstance(sink, ExchangeSink):
            return
        n = max(1, out.tasks)
        if sink.plan is not None:
            out.plan, out.early = replace(sink.plan, senders=n), True
            return
        if isinstance(sink.partitioning, SinglePartitioning):
            out.plan = ExchangePlan(Topology((1,)), True, n, 1)
            return
        if self.binder.needs_early() and isinstance(sink.partitioning, HashPartitioning):
            estimate = self._input_bytes(stage, inputs, out)
            decision = self.binder.early(estimate, n, "estimated from the stage's input (a plain algorithm needs P before its producers write)")
            out.plan, out.early = decision.plan, True
            out.notes.append(f"writes: {decision.how}")
            return
        buckets = self.binder.fine_buckets()
        out.plan = ExchangePlan(Topology((buckets,)), True, n, buckets)

    def _input_bytes(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput) -> int:
        """Bytes a stage reads: scan bytes needed, or its inputs' exchange bytes."""
        if isinstance(stage.source, ScanSource):
            splits, counts = self._splits(stage.source.spec)
            return counts.get("bytes_needed") or sum((s.end - s.start) or s.size for s in splits)
        return sum(o.bytes for o in inputs.values())

    def _write(self, stage: Stage, index: int, out: StageOutput) -> Any:
        sink = stage.sink
        if isinstance(sink, ResultSink):
            return ResultWrite()
        if isinstance(sink, OutputSink):
            return OutputWrite(sink.url, sink.fmt, f"part-{index:05d}-{sink.tag}", sink.max_rows_per_file)
        assert out.plan is not None
        fmt = self.records_format if stage.rep == "records" else self.frames_format
        return ExchangeWrite(self.tmp_url, out.prefix, out.plan, index, sink.partitioning, fmt, sink.sample_by, sink.sample_rows, f"x:{stage.name}")

    # --- scans -----------------------------------------------------------------------------------------
    def _splits(self, spec: ScanSpec) -> tuple[list[Any], dict[str, int]]:
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


def _quietly(future: Future[Any]) -> None:
    try:
        future.result()
    except BaseException:  # noqa: BLE001 - only waiting; the error went to whoever asked first
        pass


def _eager(stage: Stage) -> bool:
    return isinstance(stage.sink, ExchangeSink) and stage.sink.eager


def _buckets(out: StageOutput) -> int:
    assert isinstance(out.plan, ExchangePlan), f"stage {out.stage.name} did not write a partitioned exchange"
    return out.plan.bucket_count


def scan_schema(spec: ScanSpec, run: Run | Any) -> pl.Schema:
    """The file schema of a scan, from its first object (``run`` provides ``store(url)``)."""
    base, objects = resolve(spec.url, run.store)
    store = run.store(base)
    if spec.format == "parquet":
        return parquet_schema(store, objects[0])
    if spec.format == "csv":
        return csv_schema(store, objects[0], spec.csv)
    return gensort_schema()


def read_output(runner: DagRunner, out: StageOutput) -> pl.DataFrame:
    """The rows a stage wrote into its exchange, in task order (the driver as the one consumer)."""
    from croupier.dag.task import read as read_spec
    from croupier.compute.context import TaskContext

    bound = runner._bound(out, runner.binder.broadcast(out.bytes, out.tasks, 1))
    spec = runner._exchange_read(bound, 0)
    ctx = TaskContext("driver", runner.config, backends={})
    data = read_spec(ctx, spec)
    runner.run.driver_io.merge(ctx.io)
    return data  # type: ignore[no-any-return]


@dataclass
class JobResult:
    """Outputs of a low-level job: the final stages' rows (exchange sinks) or files (output sinks)."""

    frames: list[pl.DataFrame | None]
    outputs: list[StageOutput]
    report: Any


def run_job(stages: Sequence[Stage], config: Any, executor: Any = None, tmp_url: str | None = None) -> JobResult:
    """Run the low-level job whose final stages are ``stages``.

    Intermediate objects go under ``<config.tmp_url or tmp_url>/_croupier_tmp/<run id>`` (with
    the run's lease) and are deleted at the end, on success and on failure; outputs of
    output-sink stages stay.
    """
    if tmp_url is None and config.tmp_url is None:
        raise ConfigError("run_job needs a place for intermediate objects: pass tmp_url or set config.tmp_url")
    run = Run("job", config, executor)
    runner: DagRunner | None = None
    try:
        runner = DagRunner(run, str(run.open_tmp(tmp_url, explicit=True)))
        outputs = [runner.result(s) for s in stages]
        frames = [read_output(runner, o) if isinstance(o.stage.sink, ExchangeSink) else None for o in outputs]
    finally:
        if runner is not None:
            runner.close()
        run.drain()  # losing backup copies on Lithops end before the temporaries go
        report = run.finish()
    return JobResult(frames, outputs, report)
