"""Physical planning: from an optimised logical plan to stages, decided while the query runs.

The compiler walks the plan and grows *pipelines* (a source plus operators that run in the same
task). A pipeline is cut into a stage at every exchange; every exchange is bound by the runner's
selector (:mod:`croupier.dag.binding`) — P, algorithm and topology from measured bytes:

* aggregation: the pipeline pre-aggregates (sum/count/min/max/mean partials), then a hash exchange
  on the grouping keys (late binding); the next stage merges the partials. Without keys, a gather.
* join: the build (right) side runs first into a hash exchange on its keys. Its measured size
  decides: build bytes times probe tasks at most ``config.broadcast_limit`` -> broadcast join (the
  probe pipeline continues, every task reading the whole build side through a broadcast plan);
  otherwise a shuffle hash join, both sides hash-partitioned with one P.
* sort: a sort of a TeraSort table (gensort, or Parquet ``key``/``payload``) by ``key`` runs the
  TeraSort plan (:mod:`croupier.plan.terasort`: probe, numpy range partition, numpy sort). Any
  other sort materialises its input with a key sample; at most ``config.gather_limit`` bytes -> one
  task sorts everything; otherwise a range exchange planned from the measured bytes (every
  algorithm family is a candidate), splitters from the sample, and P tasks sort their ranges.
  ``sort().head(k)`` is a top-k: each task keeps its k best, one task merges.
* head/limit: each task keeps n rows; one task keeps the first n.

Stages are handed to the :class:`croupier.dag.runner.DagRunner` as soon as they exist, so
independent ones (the build sides of different joins, say) run at the same time. With
``dry=True`` nothing runs and the run-time decisions are shown as such (for explain).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from croupier.config import Config
from croupier.dag.binding import sort_phases
from croupier.dag.operators import Aggregate as AggregateOp
from croupier.dag.operators import Filter as FilterOp
from croupier.dag.operators import HashJoin, Head, Operator, Select, TagRows
from croupier.dag.operators import Window as WindowOp
from croupier.dag.operators import Sort as SortOp
from croupier.dag.runner import DagRunner, StageOutput
from croupier.dag.scan import ScanSpec, filters_in_read
from croupier.dag.stage import (
    ExchangeInput,
    ExchangeSink,
    HashPartitioning,
    RangePartitioning,
    ScanSource,
    Sink,
    SinglePartitioning,
    Source,
    Stage,
    UnionSource,
)
from croupier.errors import ConfigError, CroupierError
from croupier.expr import Agg, Col, Expr, Func
from croupier.expr import walk as walk_expr
from croupier.expr.analysis import selectivity
from croupier.expr.functions import FUNCTIONS, WINDOW
from croupier.expr.nodes import Alias
from croupier.plan.logical import Aggregate, Distinct, Filter, Join, Limit, Node, Project, Scan, Sort, Tagged, Union, Window, walk
from croupier.plan.optimize import passthrough
from croupier.plan.partial import hidden_prefix
from croupier.ops.partition import choose_frame_splitters
from croupier.units import format_bytes

#: Rows of sort keys each task samples for range partitioning.
SAMPLE_ROWS = 256
#: Joins whose build (right) side may be broadcast: each probe task sees every build row, and no
#: output row depends on build rows that match nothing (right and full joins do, so they shuffle).
BROADCASTABLE = ("inner", "left", "semi", "anti")
#: How many times fewer bytes building the left side first must broadcast than building the
#: right side first (each side's guessed size times the other's scan tasks) for a join to build
#: its left side first (:meth:`Compiler._left_first`): the plan as written, right side first,
#: wins ties.
LEFT_FIRST_MARGIN = 2
#: For a right side that aggregates its table by the join keys (which the left side, built first,
#: reduces: :meth:`Compiler._reduce`): how many bytes of the left side broadcast to the table's
#: scan tasks cost as much as one byte of the table aggregated and shuffled when it is not reduced
#: (calibrated on this machine: hash aggregation 0.67 and a hash-partitioned write 1.22 ns/B
#: against 0.27 ns/B for reading a broadcast side).
REDUCE_WEIGHT = 4


@dataclass
class Pipeline:
    """Operators that run in the same tasks, after reading ``source`` (and ``sides``)."""

    source: Source
    ops: list[Operator] = field(default_factory=list)
    sides: dict[str, ExchangeInput] = field(default_factory=dict)
    rep: str = "frames"
    final_name: str | None = None  # the name of the stage this pipeline ends in, when it is special

    @property
    def single(self) -> bool:
        """True when this pipeline runs as one task."""
        return isinstance(self.source, ExchangeInput) and self.source.read == "all"


class Compiler:
    """Turns a logical plan into stages, submitting them to ``runner`` (unless ``dry``)."""

    def __init__(self, runner: DagRunner | None, config: Config, dry: bool = False) -> None:
        self.runner = runner
        self.config = config
        self.dry = dry
        self.stages: list[Stage] = []
        self.notes: list[str] = []
        self.decisions: list[Any] = []
        self.terasort: dict[str, Any] | None = None
        self._ids = itertools.count(1)
        self._shared: dict[int, int] | None = None
        self._order_seen: set[int] = set()
        self._materialized: dict[int, Stage] = {}
        #: semi-join reductions to apply where a scan is compiled: id(scan) -> (the stage whose rows
        #: the scan's rows must match, the scan's key columns, that stage's key columns)
        self._reductions: dict[int, tuple[Stage, tuple[str, ...], tuple[str, ...]]] = {}

    def stage(self, pipe: Pipeline, sink: Sink, what: str, workers: int | None = None, name: str | None = None) -> Stage:
        """Cut ``pipe`` into a stage writing ``sink``; submit it. Stages are named ``sNN-<what>``,
        or ``name`` when given and not taken yet (TeraSort's sample, map and reduce)."""
        taken = {s.name for s in self.stages}
        label = name if name is not None and name not in taken else f"s{next(self._ids):02d}-{what}"
        stage = Stage(label, pipe.source, tuple(pipe.ops), dict(pipe.sides), sink, workers, pipe.rep)
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
        """The pipeline producing ``node``'s rows (stages below it already submitted).

        A subplan used more than once (a CTE read twice, a frame joined with its own aggregate)
        runs once: its rows end in a stage, and every user reads that stage's output."""
        if self._shared is None:
            self._shared = shared_nodes(node)
            self._order_seen = order_seen(node)
        if id(node) in self._shared:
            if id(node) not in self._materialized:
                self._materialized[id(node)] = self.stage(self._compile_node(node), ExchangeSink(SinglePartitioning()), "shared")
                self.notes.append(f"{node.label()}: used {self._shared[id(node)]} times, computed once ({self._materialized[id(node)].name})")
            return Pipeline(ExchangeInput(self._materialized[id(node)], "forward"))
        return self._compile_node(node)

    def _compile_node(self, node: Node) -> Pipeline:
        from croupier.plan import terasort

        if terasort.matches(node):
            return terasort.compile_sort(self, node)  # type: ignore[arg-type]
        method = getattr(self, f"_{type(node).__name__.lower()}", None)
        if method is None:
            raise ConfigError(f"the distributed planner cannot run plan node {node.label()} yet")
        return method(node)  # type: ignore[no-any-return]

    def _scan(self, node: Scan) -> Pipeline:
        spec: ScanSpec = node.spec
        filters = filters_in_read(spec, self._kept_share(spec))
        pipe = Pipeline(ScanSource(spec, dict(node.file_schema), filters))
        if spec.predicate is not None and not filters:
            pipe.ops.append(FilterOp(spec.predicate))
        reduction = self._reductions.pop(id(node), None)
        if reduction is not None:
            build, columns, keys = reduction
            pipe.sides[build.name] = ExchangeInput(build, "all")
            pipe.ops.append(HashJoin(build.name, columns, keys, "semi"))
        return pipe

    def _kept_share(self, spec: ScanSpec) -> float:
        """The share of a scan's rows its predicate keeps, guessed from its row groups'
        statistics (1 in a dry run: nothing is read to plan it)."""
        if self.dry or spec.predicate is None:
            return 1.0
        assert self.runner is not None
        counts = self.runner.scans.splits(spec)[1]
        return counts["rows_kept"] / counts["rows_read"] if counts.get("rows_read") else 1.0

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
        keys = node.key_names()
        if lowered.partial is not None:
            pipe.ops.append(replace(lowered.partial, adaptive=bool(keys)))
        what = "partial-agg" if lowered.partial else "pre-agg"
        if keys:
            # eager consumers need a plan bound before the producers run, plain and direct: the
            # forced algorithm "direct" gives exactly that
            eager = self.config.reducers == "eager" and self.config.algorithm == "direct"
            stage = self.stage(pipe, ExchangeSink(HashPartitioning(keys), eager=eager), what)
            return Pipeline(ExchangeInput(stage, "partition"), list(lowered.final))
        stage = self.stage(pipe, ExchangeSink(SinglePartitioning()), what)
        return Pipeline(ExchangeInput(stage, "all"), list(lowered.final))

    def _tagged(self, node: Tagged) -> Pipeline:
        """Each task tags its rows with their input position (:class:`TagRows`)."""
        pipe = self.compile(node.input)
        pipe.ops.append(TagRows(node.name))
        return pipe

    def _distinct(self, node: Distinct) -> Pipeline:
        return self._aggregate(node.as_aggregate())

    def _join(self, node: Join) -> Pipeline:
        if node.how == "cross":
            return self._cross_join(node)
        if self._left_first(node):
            return self._join_left_first(node)
        build = self.stage(self.compile(node.right), ExchangeSink(HashPartitioning(node.right_on)), "build")
        probe = self.compile(node.left)
        out = self.wait(build)
        side = build.name
        keep_order = self._left_order_read(node)
        if node.how in BROADCASTABLE and self._broadcast(node, build, out, probe):
            probe.sides[side] = ExchangeInput(build, "all")
            probe.ops.append(node.operator(side, keep_order))  # each task joins its own rows, in their order if asked
            return probe
        if keep_order:
            tag = hidden_prefix([*node.left.schema.names(), *node.right.schema.names(), *node.schema.names()], ROW_TAG)
            probe.ops.append(TagRows(tag))
        plan = out.plan if out is not None and out.early else None  # a plan bound early fixes P for both sides
        probe_stage = self.stage(probe, ExchangeSink(HashPartitioning(node.left_on), plan=plan), "probe")
        joined = Pipeline(ExchangeInput(probe_stage, "partition"), [node.operator(side)], {side: ExchangeInput(build, "partition")})
        return self._sorted_back(joined, tag, node) if keep_order else joined

    def _left_order_read(self, node: Join) -> bool:
        """Whether ``node``'s rows must come in its left input's order: it says so
        (``maintain_order="left"``: a semi or anti join from ``is_in``, which Polars runs as a
        filter) and that order shows (:func:`order_seen`: in the result, or to a node above that
        reads it: a head, first/last, ``maintain_order``...), as a window's does. Then a
        broadcast join keeps each task's rows in order, and a shuffled one tags its left rows
        before the exchange and sorts them back after it; else (under an aggregation, a sort)
        the rows come as they come."""
        return node.maintain_order == "left" and id(node) in self._order_seen

    def _left_first(self, node: Join) -> bool:
        """Whether to run the left side of a join first, as its build side: for an inner join,
        when its right side is one (filtered) table, or an aggregation of one by the join keys
        (see :meth:`_key_scan`), and broadcasting the left side to that table's scan tasks would
        move :data:`LEFT_FIRST_MARGIN` times fewer bytes than broadcasting the right side to the
        tasks of the left side's largest table; for a left join, only when its right side is
        such an aggregation (to reduce it, :meth:`_join_left_first`). Sizes are guesses before
        anything runs: a table's Parquet column chunks times the share of rows its pushed-down
        conditions keep, from the row groups' statistics (:meth:`ScanPlanner.kept_bytes`), and
        for a right side to reduce, the left side's guessed result (:meth:`_estimate`); what is
        built is then measured, and broadcast only if small (:meth:`_broadcast`). A right side to
        reduce is weighed otherwise: the left side's guessed result sent to the table's scan
        tasks against :data:`REDUCE_WEIGHT` times the table's bytes aggregated when it is not
        (TPC-H Q22's 21 thousand customers, 0.9 MiB to orders' 8 tasks, against all 1.5 million
        orders grouped by customer: 0.35 s -> 0.27 s). TPC-H at SF 1:
        Q3 joins its customers-and-orders (5 MiB) to lineitem after 1995-03-15 (half of it):
        built on the right, lineitem was shuffled (0.55 s); built on the left, broadcast to
        lineitem's 12 scan tasks (0.41 s). Q5's orders of one year (4 MiB), broadcast to its
        customers' 2 tasks, stay on the right. A right side reading a subplan computed once for
        two uses is weighed by its measured size (:meth:`_left_first_of_shared`, inner joins),
        and a left side that joins a filtered aggregation (a HAVING) is built first. Only joins
        whose result does not depend on the sides' roles: both keys kept (``coalesce=False``,
        SQL's joins), no column names in common (no suffixes), and no order to keep (the right
        side would be the stream)."""
        if self.dry or node.how not in ("inner", "left") or node.coalesce is not False or node.nulls_equal or node.maintain_order != "none" or set(node.left.schema) & set(node.right.schema):
            return False
        if (shared := self._shared_stage(node.right)) is not None:
            return node.how == "inner" and self._left_first_of_shared(node, shared)
        found = self._key_scan(node.right, node.right_on)
        if found is None:
            return False
        right, _, filters, aggregated = found
        if node.how == "left" and not aggregated:  # a left join's right side is built first only to be reduced
            return False
        assert self.runner is not None
        scans = self.runner.scans
        largest = self._largest_scan(node.left)
        if largest is None:
            return False
        if not aggregated and any(_filters_groups(n) for n in walk(node.left)):
            return True  # the left side joins a filtered aggregation (HAVING): likely few rows
        kept = scans.kept_bytes(right.spec)
        for predicate in filters:  # conditions the optimiser could not push into the scan
            kept *= selectivity(predicate, {})
        if aggregated:  # built first, the guessed left side is sent to the table's scan tasks instead of aggregating all of it
            return self._estimate(node.left)[0] * len(scans.splits(right.spec)[0]) < REDUCE_WEIGHT * kept
        left_first = scans.kept_bytes(largest) * len(scans.splits(right.spec)[0])
        right_first = kept * len(scans.splits(largest)[0])
        return LEFT_FIRST_MARGIN * left_first < right_first

    def _largest_scan(self, node: Node) -> ScanSpec | None:
        """The scan under ``node`` that keeps the most bytes (its pipeline streams it, as a rule);
        None when it reads no table."""
        assert self.runner is not None
        specs = [n.spec for n in walk(node) if isinstance(n, Scan)]
        return max(specs, key=self.runner.scans.kept_bytes) if specs else None

    def _shared_stage(self, node: Node) -> Stage | None:
        """The stage that computed the shared subplan ``node`` reads (through projections and
        filters), if it has been submitted already."""
        assert self._shared is not None
        while isinstance(node, (Project, Filter)) and id(node) not in self._shared:
            node = node.input
        return self._materialized.get(id(node)) if id(node) in self._shared else None

    def _left_first_of_shared(self, node: Join, shared: Stage) -> bool:
        """:meth:`_left_first` for a right side that reads a shared subplan's stage (a CTE used
        twice): its measured bytes against the left side's guessed result, each times the other
        side's tasks. (Before a scan that is only projected and filtered was read twice instead
        of shared, TPC-H Q2's 750 brass parts of size 15 were joined to all of partsupp's shared
        stage, 19 MiB broadcast to the parts' 2 scan tasks; built first, the parts went to
        partsupp's 8 tasks instead.)"""
        out = self.wait(shared)
        largest = self._largest_scan(node.left)
        if out is None or largest is None:
            return False
        assert self.runner is not None
        left_first = self._estimate(node.left)[0] * out.tasks
        right_first = out.bytes * len(self.runner.scans.splits(largest)[0])
        return LEFT_FIRST_MARGIN * left_first < right_first

    def _estimate(self, node: Node) -> tuple[float, float]:
        """A guess of the bytes ``node`` yields, and of the share of its largest table's rows they
        hold: a scan's kept bytes (:meth:`ScanPlanner.kept_bytes`); a filter keeps
        :func:`selectivity` of its rows; an inner join matches a table's rows (the larger side)
        with keys of a smaller one (a dimension), so it keeps the smaller side's share of the
        larger one; aggregations, left joins and the rest keep what their (first) input yields."""
        assert self.runner is not None
        scans = self.runner.scans
        if isinstance(node, Scan):
            kept, whole = scans.kept_bytes(node.spec), scans.scan_bytes(node.spec)
            return kept, (kept / whole if whole else 1.0)
        if isinstance(node, Filter):
            size, share = self._estimate(node.input)
            keep = selectivity(node.predicate, {})
            return size * keep, share * keep
        if isinstance(node, Join) and node.how == "inner":
            (a, sa), (b, sb) = self._estimate(node.left), self._estimate(node.right)
            return (a * sb, sa * sb) if a >= b else (b * sa, sa * sb)
        children = node.children()
        return self._estimate(children[0]) if children else (0.0, 1.0)

    def _key_scan(self, node: Node, keys: tuple[str, ...]) -> tuple[Scan, tuple[str, ...], list[Expr], bool] | None:
        """The table under ``node`` whose columns ``keys`` (columns of ``node``) are, passed on
        unchanged (renamed at most) through projections, filters and aggregations grouping by
        them: (its scan, those columns' names in it, the filters on the way, whether an
        aggregation is on the way); None when the way holds anything else or a shared node."""
        names, filters, aggregated = list(keys), [], False
        assert self._shared is not None
        while id(node) not in self._shared:
            if isinstance(node, Scan):
                return (node, tuple(names), filters, aggregated) if all(n in node.file_schema for n in names) else None
            if isinstance(node, Project):
                renames = passthrough(node)
                if not all(n in renames for n in names):
                    return None
                names = [renames[n] for n in names]
            elif isinstance(node, Filter):
                filters.append(node.predicate)
            elif isinstance(node, (Aggregate, Distinct)):
                groups = {e.output_name(): e.operand if isinstance(e, Alias) else e for e in node.keys} if isinstance(node, Aggregate) else {c: Col(c) for c in node.schema}
                sources = [groups.get(n) for n in names]
                if not all(isinstance(e, Col) for e in sources):
                    return None
                names = [e.name for e in sources]  # type: ignore[union-attr]
                aggregated = True
            else:
                return None
            node = node.input
        return None

    def _join_left_first(self, node: Join) -> Pipeline:
        """A join built on its left side (see :meth:`_left_first`). A right side that aggregates
        its table by the join keys is first reduced to the rows whose keys the left side has (a
        semi join in its scan tasks, the left side broadcast to them when small). An inner join's
        left side is then broadcast to the right side's tasks when small, columns put back in the
        join's order; else, and always for a left join (every left row kept, as the join says:
        the left side stays the stream), both sides are joined partition by partition, the left
        side already partitioned. Where a reduction is declined (the left side too large to
        send), the left side has still run first, and both sides are shuffled as they would have
        been."""
        inner = node.how == "inner"
        build = self.stage(self.compile(node.left), ExchangeSink(HashPartitioning(node.left_on)), "build" if inner else "probe")
        found = self._key_scan(node.right, node.right_on)
        if found is not None and found[3]:  # the reduction needs the left side's measure before the right side's stages
            self._reduce(node, build, self.wait(build), found[0], found[1])
        probe = self.compile(node.right)
        out = self.wait(build)
        self.notes.append(f"{node.label()}: the left side is guessed much smaller than the right side's table -> the left side ({build.name}) is built first")
        if inner and self._broadcast(node, build, out, probe):
            probe.sides[build.name] = ExchangeInput(build, "all")
            probe.ops.append(HashJoin(build.name, node.right_on, node.left_on, "inner", node.suffix, False))
            probe.ops.append(Select(tuple(Col(c) for c in node.schema.names())))
            return probe
        plan = out.plan if out is not None and out.early else None
        right = self.stage(probe, ExchangeSink(HashPartitioning(node.right_on), plan=plan), "probe" if inner else "build")
        return Pipeline(ExchangeInput(build, "partition"), [node.operator(right.name)], {right.name: ExchangeInput(right, "partition")})

    def _reduce(self, node: Join, build: Stage, out: StageOutput | None, scan: Scan, columns: tuple[str, ...]) -> None:
        """Have ``scan``'s tasks keep only rows whose ``columns`` match the left side's keys
        (``build``'s rows, or only their distinct keys, which one task picks out when the whole
        rows are too many, read whole by every task): when that side was written for late
        binding and is small enough to broadcast to them (at most ``config.broadcast_limit``
        in all, or less than the table's decoded columns; never with broadcasts off). The
        aggregation's groups whose keys the left side lacks would find no partner in the join:
        dropping their rows first changes no answer. TPC-H Q4 at SF 1: its orders of one quarter
        (1 MiB) broadcast to lineitem's 12 scan tasks, which then group 0.1M rows instead of
        3.8M (0.46 s -> 0.23 s)."""
        if out is None or out.early:
            return
        assert self.runner is not None
        limit = self.config.broadcast_limit
        tasks = len(self.runner.scans.splits(scan.spec)[0])
        decoded = self.runner.scans.scan_bytes(scan.spec, decoded=True)
        fits = lambda nbytes: limit > 0 and (nbytes * tasks <= limit or nbytes * tasks <= decoded)  # noqa: E731
        side, size = build, out.bytes
        if not fits(size) and limit > 0 and len(out.schema or ()) > len(node.left_on):  # more than the keys: send only the keys
            keys = self.stage(Pipeline(ExchangeInput(build, "all"), [AggregateOp(tuple(node.left_on), ())]), ExchangeSink(SinglePartitioning()), "keys")
            found = self.wait(keys)
            if found is not None:
                side, size = keys, found.bytes
        if not fits(size):
            self.notes.append(f"{node.label()}: the right side aggregates {scan.spec.url} by the join keys, but {side.name} ({format_bytes(size)} x {tasks} task(s)) is more than {format_bytes(limit)} and than the scan's {format_bytes(decoded)} -> not reduced")
            return
        self._reductions[id(scan)] = (side, columns, node.left_on)
        self.notes.append(f"{node.label()}: the right side aggregates {scan.spec.url} by the join keys -> its scan keeps the rows whose keys {side.name} has ({format_bytes(size)} x {tasks} task(s))")

    def _broadcast(self, node: Join, build: Stage, out: StageOutput | None, probe: Pipeline) -> bool:
        """Whether the build side, as measured, is small enough to send to every probe task: at most
        ``config.broadcast_limit`` in all, or less than a shuffle of the probe side would move (a
        probe side that is a table scan: its columns' decoded bytes; the shuffle also
        re-encodes, writes and reads them back) — and was written for late binding (a build side
        whose plan was bound before it wrote — a forced plain algorithm — is laid out for that
        plan's consumers, so the join shuffles with it)."""
        limit = self.config.broadcast_limit
        if out is not None and out.early:
            self.notes.append(f"{node.label()}: build side {build.name} was bound early ({out.plan.name if out.plan is not None else 'a fixed plan'}) -> shuffle hash join with the same plan")
            return False
        if out is None:
            self.notes.append(f"{node.label()}: broadcast if build side {build.name} x probe tasks measures <= {format_bytes(limit)} at run time, else shuffle (shown)")
            return False
        assert self.runner is not None
        tasks = self.runner.estimate_tasks(probe.source)
        traffic = out.bytes * tasks
        sizes = f"build side {build.name} measured {format_bytes(out.bytes)} x {tasks} probe task(s) = {format_bytes(traffic)}"
        if traffic <= limit:
            self.notes.append(f"{node.label()}: {sizes} <= {format_bytes(limit)} -> broadcast join")
            return True
        shuffled = self.runner.scans.scan_bytes(probe.source.spec, decoded=True) if isinstance(probe.source, ScanSource) else None
        if limit > 0 and shuffled is not None and traffic <= shuffled:
            self.notes.append(f"{node.label()}: {sizes} > {format_bytes(limit)}, but a shuffle would move the probe side's {format_bytes(shuffled)} (its columns, decoded) -> broadcast join")
            return True
        self.notes.append(f"{node.label()}: {sizes} > {format_bytes(limit)} -> shuffle hash join")
        return False

    def _cross_join(self, node: Join) -> Pipeline:
        """Every left row with every right row: the right side is broadcast to the left's tasks."""
        build = self.stage(self.compile(node.right), ExchangeSink(SinglePartitioning()), "build")
        probe = self.compile(node.left)
        probe.sides[build.name] = ExchangeInput(build, "all")
        probe.ops.append(node.operator(build.name))
        self.notes.append(f"{node.label()}: the right side {build.name} is broadcast to every task of the left")
        return probe

    def _union(self, node: Union) -> Pipeline:
        """Inputs one after the other: each input's pipeline ends in a stage; one task per
        producing task reads them in input order."""
        stages = [self.stage(self.compile(child), ExchangeSink(SinglePartitioning()), "union-input") for child in node.inputs]
        return Pipeline(UnionSource(tuple(ExchangeInput(s, "forward") for s in stages)))

    def _window(self, node: Window) -> Pipeline:
        """Window expressions need whole partitions in one task: a hash exchange on the partition
        keys, or (no keys) everything in one task. Where the result's row order is seen (Polars
        keeps the input order through ``over``), rows are tagged with their input position before
        the exchange and sorted back on it after."""
        op = WindowOp(node.exprs, node.partition_by, node.order_by, node.descending, node.nulls_last)
        pipe = self.compile(node.input)
        if pipe.single:
            pipe.ops.append(op)
            return pipe
        keep_order = id(node) in self._order_seen
        tag = hidden_prefix([*node.input.schema.names(), *node.schema.names()], ROW_TAG)
        if keep_order:
            pipe.ops.append(TagRows(tag))
        if node.partition_by:
            stage = self.stage(pipe, ExchangeSink(HashPartitioning(node.partition_by)), "window-input")
            out = Pipeline(ExchangeInput(stage, "partition"), [op])
        else:
            stage = self.stage(pipe, ExchangeSink(SinglePartitioning()), "window-input")
            out = Pipeline(ExchangeInput(stage, "all"), [op])
        return self._sorted_back(out, tag, node) if keep_order else out

    def _sorted_back(self, pipe: Pipeline, tag: str, node: Node) -> Pipeline:
        """``pipe``'s rows (``node``'s, an exchange scattered them) sorted back into their input
        order on the row tag ``tag`` they were given before it, the tag dropped again."""
        self.notes.append(f"{node.label()}: rows sorted back into their input order after the exchange")
        out = self._sorted(pipe, (Col(tag),), (False,), False, "input order")
        out.ops.append(Select(tuple(Col(c) for c in node.schema.names())))
        return out

    def _sort(self, node: Sort) -> Pipeline:
        return self._sorted(self.compile(node.input), node.by, node.descending, node.nulls_last, node.label())

    def _sorted(self, pipe: Pipeline, by: tuple[Expr, ...], descending: tuple[bool, ...], nulls_last: bool | tuple[bool, ...], label: str) -> Pipeline:
        """``pipe``'s rows sorted: in one task when small, else through a range exchange."""
        op = SortOp(by, descending, nulls_last)
        if pipe.single:
            pipe.ops.append(op)
            return pipe
        stage = self.stage(pipe, ExchangeSink(SinglePartitioning(), sample_by=by, sample_rows=SAMPLE_ROWS), "sort-input")
        out = self.wait(stage)
        limit = self.config.gather_limit
        if out is None or out.bytes <= limit:
            what = "at run time" if out is None else f"{format_bytes(out.bytes)}"
            self.notes.append(f"{label}: input {what}: one task sorts if <= {format_bytes(limit)}, else a range exchange")
            return Pipeline(ExchangeInput(stage, "all"), [op])
        assert self.runner is not None
        decision = self.runner.binder.early(out.bytes, out.tasks, "measured", sort_phases(self.runner.exchanges.format_of("frames")))
        p = decision.workers
        splitters = choose_frame_splitters(out.samples, descending, nulls_last, p)
        partitioning = RangePartitioning(by, descending, nulls_last, splitters)
        self.notes.append(f"{label}: input {format_bytes(out.bytes)} > {format_bytes(limit)} -> range exchange: {decision.how}")
        ranged = self.stage(Pipeline(ExchangeInput(stage, "forward")), ExchangeSink(partitioning, plan=decision.plan), "range")
        return Pipeline(ExchangeInput(ranged, "partition"), [op])

    def _limit(self, node: Limit) -> Pipeline:
        """Each task keeps its first offset + n rows (top-k: its best ones), one task the slice;
        from the end (tail), each its last n and the one task their last n: tasks are gathered in
        input order, so the last n of the last rows are the last n."""
        keep = Head(node.n, from_end=True) if node.from_end else Head(node.offset + node.n)
        final = Head(node.n, from_end=True) if node.from_end else Head(node.n, node.offset)
        if isinstance(node.input, Sort):  # top-k
            sort = node.input
            op = SortOp(sort.by, sort.descending, sort.nulls_last)
            pipe = self.compile(sort.input)
            if pipe.single:
                pipe.ops += [op, final]
                return pipe
            pipe.ops += [op, keep]
            stage = self.stage(pipe, ExchangeSink(SinglePartitioning()), "top-k")
            return Pipeline(ExchangeInput(stage, "all"), [op, final])
        pipe = self.compile(node.input)
        if pipe.single:
            pipe.ops.append(final)
            return pipe
        pipe.ops.append(keep)
        stage = self.stage(pipe, ExchangeSink(SinglePartitioning()), "limit")
        return Pipeline(ExchangeInput(stage, "all"), [final])


def finish(compiler: Compiler, pipe: Pipeline, sink: Sink) -> Stage:
    """Submit the last stage of a query (TeraSort records become rows unless written as records)."""
    from croupier.dag.operators import RecordsToFrame
    from croupier.dag.stage import OutputSink

    if pipe.rep == "records":
        if isinstance(sink, OutputSink) and sink.fmt in ("parquet", "gensort"):
            sink = replace(sink, fmt=f"records-{sink.fmt}")  # TeraSort's own writer: croupier sort's bytes
        else:
            pipe.ops.append(RecordsToFrame())
            pipe.rep = "frames"
    return compiler.stage(pipe, sink, "final", name=pipe.final_name)


def preview_exchanges(compiler: Compiler, store_of: Any) -> list[str]:
    """Explain lines for a dry compile: for each exchange whose producers read stored files, the
    selector's candidates for the bytes those files hold (an upper bound of what the producers will
    write; at run time D is measured). ``store_of(url)`` opens stores for listing."""
    from functools import partial

    from croupier.dag.binding import Binder, early_kinds, format_for, stage_kinds
    from croupier.dag.scan import resolve

    lines: list[str] = []
    tmp_url = compiler.config.tmp_url or "file:///tmp"
    binder = Binder(compiler.config, tmp_url)
    format_of = partial(format_for, compiler.config.shuffle_encoding(tmp_url))  # as the runner encodes

    for stage in compiler.stages:
        sink = stage.sink
        if not isinstance(sink, ExchangeSink) or isinstance(sink.partitioning, SinglePartitioning) or not isinstance(stage.source, ScanSource):
            continue
        try:
            _, objects = resolve(stage.source.spec.url, store_of)
        except CroupierError as exc:
            lines.append(f"{stage.name}: cannot estimate its output ({exc})")
            continue
        nbytes = sum(o.size for o in objects)
        senders = max(1, len(objects))
        # priced with the phase kinds the runner passes when it binds the exchange (not a sort's)
        if binder.binds_early(sink):  # as the runner binds it
            decision = binder.early(nbytes, senders, "estimated from the files it reads", phases=early_kinds(stage, format_of))
        else:
            consumer = next((c for c in compiler.stages if isinstance(c.source, ExchangeInput) and c.source.stage is stage), None)
            kinds = {"reduce": stage_kinds(consumer, format_of)} if consumer is not None else None
            decision = binder.late(nbytes, senders, binder.fine_buckets(), "estimated", phases=kinds)
        assert decision.choice is not None
        lines.append(f"{stage.name} (if it wrote all it reads): {decision.how}")
        for c in decision.choice.ranked(5):
            d = c.dominant()
            mark = "*" if c is decision.choice.best else " "
            lines.append(f"  {mark} {c.plan.name:<18} P={c.workers:<4} {c.seconds:8.3f} s ({c.low:.3f}-{c.high:.3f})  dominant: {d.name} ({d.why})")
        if compiler.config.fast_tier is not None and compiler.config.tier != "slow":  # the tier candidates (model/tier.py)
            lines += tier_preview(binder, compiler.config, nbytes, senders, early_kinds(stage, format_of), sink)
    return lines


def tier_preview(binder: Any, config: Any, nbytes: int, senders: int, phases: Any, sink: ExchangeSink) -> list[str]:
    """Explain lines of the tier choice: the selector over tier x algorithm x P (slow, fast and
    hybrid candidates side by side, each with its dominant term) and the tier it picks, as the
    runner searches it for the exchange ``sink`` writes (:func:`croupier.dag.tiers.search_options`)."""
    from croupier.dag.tiers import search_options
    from croupier.model.tier import from_selection

    if config.tier in ("fast", "hybrid"):
        variant = "" if config.tier == "fast" else ", pipelined" if config.pipelined else ", not pipelined" if config.pipelined is False else ", pipelined or not as the model prefers when it binds"
        return [f"    tier: {config.tier} (tier forced: {config.tier}{variant})"]
    options = search_options(config, None, sink.in_rounds, sink.spills)
    choice = binder.tiered(nbytes, senders, None, options, phases)  # as the runner's exchanges do (dag/tiers.py)
    picked = from_selection(choice, options)
    lines = [f"    tier: {picked.label} ({picked.why})"]
    ranked = sorted(choice.candidates, key=lambda c: (c.seconds, c.cost))
    shown = {c.tier: c for c in reversed(ranked)}  # the best of each tier, beside the first few overall
    for c in sorted({id(c): c for c in ranked[:3] + list(shown.values())}.values(), key=lambda c: (c.seconds, c.cost)):
        d = c.dominant()
        name = c.plan.name + (f" @fast {c.fast_share:.0%}" if c.tier == "fast" and c.fast_share < 1 else " @fast" if c.tier == "fast" else "")
        lines.append(f"      {name:<20} P={c.workers:<4} {c.seconds:8.3f} s ({c.low:.3f}-{c.high:.3f})  tier {c.tier:<6} dominant: {d.name} ({d.why})")
    return lines


#: The column that carries each row's input position through a window's or join's exchange.
ROW_TAG = "__croupier_row"

#: Nodes that keep their input's row order (Polars: filter, select/with_columns, over, slice,
#: concat; and a row tag, whose tags are that order).
ORDER_KEEPING = (Filter, Project, Window, Limit, Union, Tagged)


def order_seen(root: Node) -> set[int]:
    """Nodes (by identity) whose output row order shows in the result: the root and the inputs
    of a node that picks rows or values by their order (:func:`reads_order`: a row tag, a head
    or tail, first/last, a running or positional window function), and below them what keeps
    its input's order, down to the nodes that decide their own (a limit over a sort: the sort
    decides). A join keeps its left input's order when it says so (a cross join always: Polars
    pairs each left row with every right one; ``x - x.mean()`` over a window's result lost the
    window's order), so its left input's order shows too, as a window below it would otherwise
    hand it rows in its partitions' order. A shuffled window, or join that keeps its left
    input's order (an ``is_in`` filter's semi join), sorts its rows back only for these."""
    seen: set[int] = set()
    stack = [root, *(child for n in walk(root) if reads_order(n) for child in n.children())]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, ORDER_KEEPING) and not (isinstance(node, Limit) and isinstance(node.input, Sort)):
            stack.extend(node.children())
        elif isinstance(node, Join) and node.keeps_left_order():
            stack.append(node.left)
    return seen


#: Window functions whose value depends on the rows' order (beside first/last aggregations):
#: every one but rank, which does only with its ordinal method (:func:`_positional`).
ORDER_FUNCTIONS = frozenset(name for name, f in FUNCTIONS.items() if f.kind == WINDOW) - {"rank"}


def reads_order(node: Node) -> bool:
    """Whether ``node``'s answer depends on the order of its input's rows: a row tag, a head or
    tail (not of a sort, which decides), an aggregation taking first/last values, a window
    without order keys computing a running or positional function (or first/last, or an
    ordinal rank)."""
    if isinstance(node, Tagged):
        return True
    if isinstance(node, Limit):
        return not isinstance(node.input, Sort)
    if isinstance(node, Aggregate):
        return any(_positional(e) for e in node.aggs)
    if isinstance(node, Window):
        return not node.order_by and any(_positional(e) for e in node.exprs)
    return False


def _positional(expr: Expr) -> bool:
    for e in walk_expr(expr):
        if isinstance(e, Agg) and e.fn in ("first", "last"):
            return True
        if isinstance(e, Func) and (e.fn in ORDER_FUNCTIONS or (e.fn == "rank" and e.args and e.args[0] == "ordinal")):
            return True
    return False


def _filters_groups(node: Node) -> bool:
    """Whether ``node`` filters the groups of an aggregation (SQL's HAVING, or a WHERE on a
    grouped subquery's result), through projections: what the planner takes for few rows."""
    if not isinstance(node, Filter):
        return False
    below = node.input
    while isinstance(below, Project):
        below = below.input
    return isinstance(below, Aggregate) and bool(below.keys)


def rescanned(node: Node) -> bool:
    """Whether ``node`` is a scan under projections and filters only (none with a subquery):
    cheaper read twice than computed once into a stage that every user then reads. TPC-H Q2
    shared partsupp's projection: writing its 19 MB took 54 ms of its tasks, reading it back 40,
    where scanning it took 38 per use, and the extra stage cost its own start and end."""
    while isinstance(node, (Project, Filter)):
        exprs = node.exprs if isinstance(node, Project) else (node.predicate,)
        if any(e.has_subquery() for e in exprs):
            return False
        node = node.input
    return isinstance(node, Scan)


def shared_nodes(root: Node) -> dict[int, int]:
    """Nodes (by identity) that more than one parent reads, with how many read them; scans and
    what only projects and filters a scan are left out (:func:`rescanned`)."""
    parents: dict[int, int] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for child in node.children():
            parents[id(child)] = parents.get(id(child), 0) + 1
            stack.append(child)
    nodes: dict[int, Node] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) not in nodes:
            nodes[id(node)] = node
            stack.extend(node.children())
    return {k: n for k, n in parents.items() if n > 1 and not rescanned(nodes[k])}
