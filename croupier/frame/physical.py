"""From an optimised logical plan to stages, decided while the query runs.

The compiler walks the plan and grows *pipelines* (a source plus operators that run in the same
task). A pipeline is cut into a stage at every exchange:

* aggregation: the pipeline pre-aggregates (sum/count/min/max/mean partials), then a hash
  exchange on the grouping keys; the next stage merges the partials. Without keys, a gather.
* join: the build (right) side runs first into a hash exchange on its keys. When it has finished,
  its measured size decides: at most ``config.broadcast_limit`` bytes -> broadcast join, the
  probe (left) side's pipeline simply continues with every task reading the whole build side (no
  shuffle of the probe side); otherwise a shuffle hash join, both sides hash-partitioned.
* sort: the input is materialised with a sample of its sort keys; at most ``config.gather_limit``
  bytes -> one task sorts everything; otherwise splitters from the sample cut P ranges (range
  exchange) and P tasks sort their range. ``sort().head(k)`` is a top-k: each task keeps its k
  best, one task merges.
* head/limit: each task keeps n rows; one task keeps the first n.

Stages are handed to the :class:`croupier.dag.runner.DagRunner` as soon as they exist, so
independent ones (the build sides of different joins, say) run at the same time. With
``dry=True`` nothing runs and the run-time decisions are shown as such (for explain).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from croupier.dag.operators import Filter as FilterOp
from croupier.dag.operators import Head, Operator
from croupier.dag.operators import Sort as SortOp
from croupier.dag.runner import SAMPLE_ROWS, DagRunner, StageOutput
from croupier.dag.scan import ScanSpec
from croupier.dag.stage import HashSink, PlainSink, RangeSink, ScanInput, Sink, Stage, StageInput
from croupier.errors import ConfigError
from croupier.frame.logical import Aggregate, Distinct, Filter, Join, Limit, Node, Project, Scan, Sort
from croupier.units import format_bytes


@dataclass
class Pipeline:
    """Operators that run in the same tasks, after reading ``source`` (and ``sides``)."""

    source: ScanInput | StageInput
    ops: list[Operator] = field(default_factory=list)
    sides: dict[str, StageInput] = field(default_factory=dict)

    @property
    def single(self) -> bool:
        """True when this pipeline runs as one task."""
        return isinstance(self.source, StageInput) and self.source.mode == "all"


class Compiler:
    """Turns a logical plan into stages, submitting them to ``runner`` (unless ``dry``)."""

    def __init__(self, runner: DagRunner | None, config: Any, dry: bool = False) -> None:
        self.runner = runner
        self.config = config
        self.dry = dry
        self.stages: list[Stage] = []
        self.notes: list[str] = []
        self._ids = itertools.count(1)

    def stage(self, pipe: Pipeline, sink: Sink, what: str, workers: int | None = None) -> Stage:
        """Cut ``pipe`` into a stage writing ``sink``; submit it."""
        stage = Stage(f"s{next(self._ids):02d}-{what}", pipe.source, tuple(pipe.ops), dict(pipe.sides), sink, workers)
        self.stages.append(stage)
        if not self.dry:
            assert self.runner is not None
            self.runner.submit(stage)
        return stage

    def wait(self, stage: Stage) -> StageOutput | None:
        """The finished output of ``stage`` (None in a dry run)."""
        if self.dry:
            return None
        assert self.runner is not None
        return self.runner.result(stage)

    # --- nodes -------------------------------------------------------------------------------
    def compile(self, node: Node) -> Pipeline:
        """The pipeline producing ``node``'s rows (stages below it already submitted)."""
        method = getattr(self, f"_{type(node).__name__.lower()}", None)
        if method is None:  # pragma: no cover - every node type has a method
            raise ConfigError(f"cannot run plan node {node.label()}")
        return method(node)  # type: ignore[no-any-return]

    def _scan(self, node: Scan) -> Pipeline:
        spec: ScanSpec = node.spec
        pipe = Pipeline(ScanInput(spec, dict(node.file_schema)))
        if spec.predicate is not None:
            pipe.ops.append(FilterOp(spec.predicate))
        return pipe

    def _filter(self, node: Filter) -> Pipeline:
        pipe = self.compile(node.input)
        pipe.ops.append(FilterOp(node.predicate))
        return pipe

    def _project(self, node: Project) -> Pipeline:
        pipe = self.compile(node.input)
        pipe.ops.append(node.operator())
        return pipe

    def _aggregate(self, node: Aggregate) -> Pipeline:
        lowered = node.lower()
        pipe = self.compile(node.input)
        pipe.ops.append(lowered.pre)
        if pipe.single:
            pipe.ops += ([lowered.partial] if lowered.partial else []) + list(lowered.final)
            return pipe
        if lowered.partial is not None:
            pipe.ops.append(lowered.partial)
        keys = node.key_names()
        if keys:
            stage = self.stage(pipe, HashSink(keys), "partial-agg" if lowered.partial else "pre-agg")
            return Pipeline(StageInput(stage, "partition"), list(lowered.final))
        stage = self.stage(pipe, PlainSink(), "partial-agg")
        return Pipeline(StageInput(stage, "all"), list(lowered.final))

    def _distinct(self, node: Distinct) -> Pipeline:
        return self._aggregate(node.as_aggregate())

    def _join(self, node: Join) -> Pipeline:
        build = self.stage(self.compile(node.right), HashSink(node.right_on), "build")
        probe = self.compile(node.left)
        out = self.wait(build)
        side = build.name
        op = node.operator(side)
        limit = self.config.broadcast_limit
        if out is not None:
            assert self.runner is not None
            tasks = self.runner.estimate_tasks(probe.source)
            traffic = out.bytes * tasks
            sizes = f"build side {build.name} measured {format_bytes(out.bytes)} x {tasks} probe task(s) = {format_bytes(traffic)}"
            if traffic <= limit:
                self.notes.append(f"{node.label()}: {sizes} <= {format_bytes(limit)} -> broadcast join")
                probe.sides[side] = StageInput(build, "all")
                probe.ops.append(op)
                return probe
            self.notes.append(f"{node.label()}: {sizes} > {format_bytes(limit)} -> shuffle hash join")
        else:
            self.notes.append(f"{node.label()}: broadcast if build side {build.name} x probe tasks measures <= {format_bytes(limit)} at run time, else shuffle (shown)")
        probe_stage = self.stage(probe, HashSink(node.left_on), "probe")
        return Pipeline(StageInput(probe_stage, "partition"), [op], {side: StageInput(build, "partition")})

    def _sort(self, node: Sort) -> Pipeline:
        op = SortOp(node.by, node.descending, node.nulls_last)
        pipe = self.compile(node.input)
        if pipe.single:
            pipe.ops.append(op)
            return pipe
        stage = self.stage(pipe, PlainSink(node.by, SAMPLE_ROWS), "sort-input")
        out = self.wait(stage)
        limit = self.config.gather_limit
        if out is None or out.bytes <= limit:
            what = "at run time" if out is None else f"{format_bytes(out.bytes)}"
            self.notes.append(f"{node.label()}: input {what}: one task sorts if <= {format_bytes(limit)}, else range-partitioned")
            return Pipeline(StageInput(stage, "all"), [op])
        p = self._sort_workers(out)
        splitters = _splitters(out.samples, node, p)
        self.notes.append(f"{node.label()}: input {format_bytes(out.bytes)} > {format_bytes(limit)} -> range exchange over {splitters.height + 1} tasks")
        ranged = self.stage(Pipeline(StageInput(stage, "object")), RangeSink(node.by, node.descending, node.nulls_last, splitters), "range")
        return Pipeline(StageInput(ranged, "partition"), [op])

    def _sort_workers(self, out: StageOutput) -> int:
        assert self.runner is not None
        return max(2, self.runner.choose_exchange(out.bytes, self.config.max_workers).best.workers)

    def _limit(self, node: Limit) -> Pipeline:
        if isinstance(node.input, Sort):  # top-k
            sort = node.input
            op = SortOp(sort.by, sort.descending, sort.nulls_last)
            pipe = self.compile(sort.input)
            pipe.ops += [op, Head(node.n)]
            if pipe.single:
                return pipe
            stage = self.stage(pipe, PlainSink(), "top-k")
            return Pipeline(StageInput(stage, "all"), [op, Head(node.n)])
        pipe = self.compile(node.input)
        pipe.ops.append(Head(node.n))
        if pipe.single:
            return pipe
        stage = self.stage(pipe, PlainSink(), "limit")
        return Pipeline(StageInput(stage, "all"), [Head(node.n)])


def _splitters(samples: list[pl.DataFrame], node: Sort, p: int) -> pl.DataFrame:
    """P-1 rows of the sorted key sample at even quantiles."""
    sample = pl.concat(samples, how="vertical") if samples else pl.DataFrame()
    names = [f"__k{i}" for i in range(len(node.by))]
    ordered = sample.sort(names, descending=list(node.descending), nulls_last=node.nulls_last)
    picks = sorted({min(ordered.height - 1, (i * ordered.height) // p) for i in range(1, p)})
    return ordered[picks]


def finish(compiler: Compiler, pipe: Pipeline, sink: Sink) -> Stage:
    """Submit the last stage of a query."""
    return compiler.stage(pipe, sink, "final")
