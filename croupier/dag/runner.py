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

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import polars as pl

from croupier.compute.base import MAX_RESULT_BYTES, Task
from croupier.dag.batcher import Batcher
from croupier.dag.binding import Binder, Decision
from croupier.dag.exchanges import Exchanges
from croupier.dag.operators import pipeline_schema
from croupier.dag.outputs import StageOutput
from croupier.dag.profiles import RunProfile
from croupier.dag.run import Run
from croupier.dag.scan import projected
from croupier.dag.splits import ScanPlanner, scan_facts, scan_schema
from croupier.dag.stage import ExchangeInput, ExchangeSink, OutputSink, ResultSink, ScanSource, Stage, TaskSource, UnionSource
from croupier.dag.task import ExchangeWrite, OutputWrite, ResultWrite, TaskSpec, run_task
from croupier.dag.tiers import Tiers
from croupier.errors import ConfigError
from croupier.exchange.hybrid import HybridPlan
from croupier.exchange.plan import ExchangePlan
from croupier.ops.records import RECORD_SIZE, RecordRuns
from croupier.storage.location import parse_location

__all__ = ["DagRunner", "JobResult", "StageOutput", "read_output", "run_job", "scan_facts", "scan_schema"]

#: A collected result up to this size (Polars' estimate, shared evenly by the final stage's tasks)
#: comes back in the tasks' replies: for small results a storage round trip costs more than the
#: pipe. Well under a reply's limit (the estimate is not the pickled size).
INLINE_RESULT_BYTES = MAX_RESULT_BYTES // 4


class DagRunner:
    """Runs the stages of one job run; intermediate objects go under ``tmp_url``."""

    def __init__(self, run: Run, tmp_url: str) -> None:
        self.run = run
        self.config = run.config
        self.tmp_url = str(parse_location(tmp_url))  # the canonical URL: workers parse it again
        self.profiles = RunProfile(run, self.tmp_url)  # calibrates the store on its first job (once)
        self.binder = Binder(self.config, self.tmp_url, self.profiles.profile)
        self.outputs: list[StageOutput] = []
        self._futures: dict[int, Future[StageOutput]] = {}
        self._names: set[str] = set()
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="croupier-stage")
        self._stages: dict[int, Stage] = {}
        self._lock = threading.Lock()
        self._deferred: set[int] = set()
        self._running = threading.local()  # .stage: the name of the stage this thread runs
        self._batcher = Batcher(run, self._coming, lambda: getattr(self._running, "stage", None))
        self.scans = ScanPlanner(self.config, run)
        self.tiers = Tiers(run, self.tmp_url)
        self.exchanges = Exchanges(run, self.tmp_url, self.binder, self._batcher, self.scans, self._predict, self.tiers)

    # --- public ---------------------------------------------------------------------------
    def submit(self, stage: Stage) -> Future[StageOutput]:
        """Schedule ``stage`` (and the stages it reads) to run as soon as its inputs are ready."""
        with self._lock:
            if id(stage) in self._futures:
                return self._futures[id(stage)]
            if stage.name in self._names:
                raise ConfigError(f"two stages are named {stage.name!r}; stage names must be unique within a job")
            self._names.add(stage.name)
            self._stages[id(stage)] = stage
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

    def _coming(self, queued: set[str]) -> bool:
        """Whether a stage is ready to run (all its inputs done) but has not queued its executor
        call yet (its name is not among ``queued``): a batch about to start waits for it."""
        with self._lock:
            for key, future in self._futures.items():
                stage = self._stages[key]
                if key in self._deferred or future.done() or stage.name in queued:
                    continue
                inputs = [self._futures.get(id(i.stage)) for i in stage.inputs()]
                if all(f is not None and f.done() for f in inputs):
                    return True
        return False

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
        self.exchanges.measure_exchanges()
        if self.tiers.chosen:  # which tier each exchange used (producer stage -> "slow" | "fast")
            self.run.report.summary["tiers"] = {stage: tier for stage, (tier, _) in self.tiers.chosen.items()}
        spilled = {o.stage.name: len(o.fell_back) for o in self.outputs if o.fell_back}
        if spilled:  # producers whose fast-tier writes failed and went to the slow tier instead
            self.run.report.summary["fast_tier_spills"] = {"senders": spilled, "first_error": next(o.fell_back[0] for o in self.outputs if o.fell_back)}
        lost = {o.stage.name: o.lost for o in self.outputs if o.lost}
        if lost:  # hybrid rounds whose fast-tier objects vanished: only their producers ran again
            self.run.report.summary["fast_tier_reruns"] = lost
        self.profiles.learn(self.run.report)  # the run's stages refine a self-calibrated profile

    def estimate_tasks(self, source: ScanSource | ExchangeInput | TaskSource | UnionSource) -> int:
        """How many tasks a stage reading ``source`` will run (scans: exact; exchanges: a guess)."""
        if isinstance(source, ScanSource):
            return len(self.scans.splits(source.spec)[0])
        if isinstance(source, TaskSource):
            return len(source.reads)
        if isinstance(source, UnionSource):
            return sum(max(1, self.result(i.stage).tasks) for i in source.inputs)
        if source.read == "all":
            return 1
        if source.read == "forward":
            return max(1, self.result(source.stage).tasks)
        return self.config.workers or self.config.concurrency

    # --- one stage -----------------------------------------------------------------------------
    def _run_stage(self, stage: Stage) -> StageOutput:
        # the executor calls this thread makes (its inputs' exchange levels and rounds included)
        # are this stage's: no batch waits for it while it makes them
        self._running.stage = stage.name
        try:
            return self._run_stage_as_owner(stage)
        finally:
            self._running.stage = None

    def _run_stage_as_owner(self, stage: Stage) -> StageOutput:
        if isinstance(stage.source, ExchangeInput) and _eager(stage.source.stage):
            return self._run_fused(stage)
        inputs = {id(i.stage): self._futures[id(i.stage)].result() for i in stage.inputs()}
        started = time.perf_counter()
        out = StageOutput(stage, self._schema(stage, inputs))
        mains, sides = self.exchanges.reads(stage, inputs, out)
        out.tasks = len(mains)
        self.exchanges.producer_plan(stage, inputs, out)
        results = self.exchanges.run_producers(stage, out, self._tasks(stage, out, mains, sides))  # (a hybrid exchange: in rounds)
        for index, result in enumerate(results):
            self._fold(out, result.value, index)
        out.seconds = time.perf_counter() - started
        with self._lock:
            self.outputs.append(out)
        return out

    def _tasks(self, stage: Stage, out: StageOutput, mains: list[Any], sides: list[dict[str, Any]]) -> list[Task]:
        """The stage's tasks: one per main read, with its side reads and its write."""
        specs = [TaskSpec(i, main, sides[i], stage.ops, self._write(stage, i, out)) for i, main in enumerate(mains)]
        return [Task(f"{stage.name}-{s.index}", run_task, (s,), inputs=s.inputs() if self.config.prefetch else ()) for s in specs]

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
            p_mains, p_sides = self.exchanges.reads(producer, p_inputs, p_out)
            p_out.tasks = len(p_mains)
            self.exchanges.producer_plan(producer, p_inputs, p_out)
            plan = p_out.plan
            if not isinstance(plan, ExchangePlan) or plan.levels != 1 or plan.combine:
                raise ConfigError(f"eager consumers need an early, plain direct exchange, not {plan.name if plan else None}")
            p_specs = [TaskSpec(i, m, p_sides[i], producer.ops, self._write(producer, i, p_out)) for i, m in enumerate(p_mains)]
            p_tasks = [Task(f"{producer.name}-{s.index}", run_task, (s,), inputs=s.inputs() if self.config.prefetch else ()) for s in p_specs]
            out = StageOutput(stage, self._schema(stage, {id(producer): p_out}))
            bound = self.exchanges.bound(p_out, Decision(plan, f"{plan.describe()}; eager consumers start after {self.config.eager_after:.0%} of the producers"))
            mains = [replace(self.exchanges.exchange_read(bound, j), wait=self.config.task_timeout) for j in range(plan.workers)]
            out.tasks = len(mains)
            self.exchanges.producer_plan(stage, {id(producer): p_out}, out)
            out.notes.append(f"reads {producer.name}: {bound.decision.how}")
            self.exchanges.record_exchange(stage, bound)
            gate = (tuple(t.id for t in p_tasks), self.config.eager_after)
            c_specs = [TaskSpec(j, m, {}, stage.ops, self._write(stage, j, out)) for j, m in enumerate(mains)]
            c_tasks = [Task(f"{stage.name}-{s.index}", run_task, (s,), after=gate) for s in c_specs]
            p_results, c_results = self._batcher.map_many([(producer.name, p_tasks), (stage.name, c_tasks)])
            self._predict(producer.name, stage.name)
            for index, result in enumerate(p_results):
                self._fold(p_out, result.value, index)
            p_out.seconds = time.perf_counter() - started
            future.set_result(p_out)
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
            raise
        for index, result in enumerate(c_results):
            self._fold(out, result.value, index)
        out.seconds = time.perf_counter() - started
        with self._lock:
            self.outputs += [p_out, out]
        return out

    def _predict(self, *names: str) -> None:
        """Put the model's prediction, from what each stage measured, beside its measured time."""
        from croupier.model.stage import facts_from_report, predict_stage, stage_cost

        profile = self.binder.profile()
        for name in names:
            report = self.run.report.stage(name)
            facts = facts_from_report(report)
            prediction = predict_stage(facts, profile, self.config.concurrency)
            busy = min(max(1, report.tasks), self.config.concurrency)
            report.predicted = prediction.to_dict() | {
                "cost": stage_cost(facts, prediction.function_seconds(busy), profile),
                "measured_cost": stage_cost(facts, report.task_seconds, profile),
                "profile": profile.label,
                "concurrency": self.config.concurrency,
            }

    @staticmethod
    def _fold(out: StageOutput, value: dict[str, Any], index: int) -> None:
        if "inline" in value:  # rows returned instead of written: no objects (senders stay aligned)
            out.inline[index] = value["inline"]
            out.written.append(None)
            out.where.append("")
            out.rows += value["rows"]
        if "written" in value:
            out.written.append(value["written"])
            out.where.append(value.get("url", ""))
            if "fell_back" in value:
                out.fell_back.append(value["fell_back"])
            out.bytes += value["bytes"]
            out.data += value.get("data", value["bytes"])
            out.rows += value["rows"]
        if "sample" in value:
            out.samples.append(value["sample"])
        if "files" in value:
            out.files += value["files"]
            out.rows += sum(f[1] for f in value["files"])
        if "value" in value:
            out.values.append(value["value"])

    def _schema(self, stage: Stage, inputs: dict[int, StageOutput]) -> pl.Schema | None:
        """The stage's output schema (frames): its operators' on empty inputs."""
        if stage.rep == "records":
            return None
        empty: Any
        if isinstance(stage.source, ScanSource):
            empty = pl.DataFrame(schema=projected(stage.source.spec, pl.Schema(self.scans.file_schema(stage.source))))
        elif isinstance(stage.source, ExchangeInput) and inputs[id(stage.source.stage)].schema is not None:
            empty = pl.DataFrame(schema=inputs[id(stage.source.stage)].schema)
        elif isinstance(stage.source, UnionSource):
            empty = pl.DataFrame(schema=inputs[id(stage.source.inputs[0].stage)].schema)
        else:  # TeraSort records in, rows out
            empty = RecordRuns([np.empty((0, RECORD_SIZE), np.uint8)], [0])
        sides = {name: pl.DataFrame(schema=inputs[id(i.stage)].schema) for name, i in stage.sides.items()}
        return pipeline_schema(empty, stage.ops, sides)

    # --- writing ------------------------------------------------------------------------------------
    def _write(self, stage: Stage, index: int, out: StageOutput) -> Any:
        sink = stage.sink
        if isinstance(sink, ResultSink):
            return ResultWrite()
        if isinstance(sink, OutputSink):
            return OutputWrite(sink.url, sink.fmt, f"part-{index:05d}-{sink.tag}", sink.max_rows_per_file, sink.compression)
        assert out.plan is not None
        fmt = self.exchanges.format_of(stage.rep)
        url = out.url or self.tmp_url
        # on the fast tier: the slow one if it fails (not with eager consumers, which read before
        # the producers report where they wrote: those fail, and the job runs again on the slow
        # tier; nor in a pipelined hybrid's round, whose combiners read beside its producers: the
        # round runs again through the slow tier)
        pipelined = isinstance(out.plan, HybridPlan) and out.plan.pipelined
        fallback = self.tmp_url if url != self.tmp_url and isinstance(sink, ExchangeSink) and sink.spills and not pipelined else ""
        inline = INLINE_RESULT_BYTES // max(1, out.tasks) if sink.to_driver and not sink.sample_by else 0
        return ExchangeWrite(url, out.prefix, out.plan, index, sink.partitioning, fmt, sink.sample_by, sink.sample_rows, f"x:{stage.name}", fallback, inline)

def _quietly(future: Future[Any]) -> None:
    try:
        future.result()
    except BaseException:  # noqa: BLE001 - only waiting; the error went to whoever asked first
        pass


def _eager(stage: Stage) -> bool:
    return isinstance(stage.sink, ExchangeSink) and stage.sink.eager


def read_output(runner: DagRunner, out: StageOutput) -> pl.DataFrame:
    """The rows a stage wrote into its exchange, in task order (the driver as the one consumer).
    Rows its tasks returned inline are taken as they are; when only some tasks did, each other
    task's object is read on its own, to keep the task order."""
    from croupier.dag.task import read as read_spec
    from croupier.compute.context import TaskContext

    ctx = TaskContext("driver", runner.config, backends={})
    if not out.inline:
        bound = runner.exchanges.bound(out, runner.binder.broadcast(out.bytes, out.tasks, 1))
        data = read_spec(ctx, runner.exchanges.exchange_read(bound, 0), combine=False)
    else:
        parts = [_from_arrow(out.inline[i]) if i in out.inline else read_spec(ctx, runner.exchanges.forward_read(out, i)) for i in range(out.tasks)]
        data = _conform(pl.concat(parts, how="vertical_relaxed") if len(parts) > 1 else parts[0], out.schema)
    runner.run.driver_io.merge(ctx.io)
    return data  # type: ignore[no-any-return]


def _from_arrow(table: Any) -> pl.DataFrame:
    """A task's inline rows (sent as an Arrow table) as a Polars frame."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _conform(frame: pl.DataFrame, schema: pl.Schema | None) -> pl.DataFrame:
    """``frame`` with the stage's schema (column order and types), as an exchange read decodes it."""
    if schema is None or frame.schema == schema:
        return frame
    return frame.select([pl.col(name).cast(dtype) for name, dtype in schema.items()])


@dataclass
class JobResult:
    """Outputs of a low-level job: the final stages' rows (exchange sinks) or files (output sinks)."""

    frames: list[pl.DataFrame | None]
    outputs: list[StageOutput]
    report: Any


def run_job(stages: Sequence[Stage], config: Any, executor: Any = None, tmp_url: str | None = None) -> JobResult:
    """Run the low-level job whose final stages are ``stages``: all are submitted before any is
    waited for, so independent ones run at once (sharing the functions).

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
        for stage in stages:
            runner.submit(stage)
        outputs = [runner.result(s) for s in stages]
        frames = [read_output(runner, o) if isinstance(o.stage.sink, ExchangeSink) else None for o in outputs]
    finally:
        if runner is not None:
            runner.close()
        run.drain()  # losing backup copies on Lithops end before the temporaries go
        report = run.finish()
    return JobResult(frames, outputs, report)
