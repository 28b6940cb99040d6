"""The job model: stages, what they read, what they run and what they write; exchanges between them.

A job is a DAG of :class:`Stage` objects. Every stage reads ONE main source — stored files, generated
TeraSort records, or the output of another stage through an exchange — plus optional side inputs
(other stages' outputs, e.g. a join's build side), runs its operators on each task's data, and writes
a sink. Dependencies are the stages it reads; the runner (:mod:`croupier.dag.runner`) runs them in
topological order, independent ones at the same time, and every stage boundary is an exchange run
by the one exchange executor (:mod:`croupier.exchange.move`) from a plan chosen at run time::

    producer stage ──ExchangeSink(partitioning)──> [level 2..k stages] ──> consumer stage
                      level-1 objects                (P tasks each)         ExchangeInput(read=...)

How a consumer reads a producer (``ExchangeInput.read``):

* ``"partition"``: P tasks, task j reads partition j of every producer. P, the topology and write
  combining are chosen when the producers have reported their bytes (late binding), unless the
  producer's sink carries a plan chosen earlier (``ExchangeSink.plan``, e.g. a sort's range
  exchange planned from a sample). Co-partitioned inputs (a shuffle join) share P.
* ``"all"``: as the main input, one task reads everything (a gather); as a side input, every task
  reads everything (a broadcast, direct or multi-level).
* ``"forward"``: task i reads what producer i wrote (no repartitioning; a stage boundary only).

Data in a stage is either **frames** (Polars DataFrames: queries) or **records** (TeraSort's
100-byte records as numpy arrays, with the sort's numpy kernels), see ``Stage.rep``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Union

import polars as pl

from croupier.dag.operators import Operator, fuse
from croupier.dag.scan import ScanSpec
from croupier.errors import ConfigError
from croupier.exchange.plan import ExchangePlan
from croupier.expr import Expr

READS = ("partition", "all", "forward")
REPS = ("frames", "records")

# --- partitionings: which bucket each row of a producer goes to --------------------------------


@dataclass(frozen=True)
class HashPartitioning:
    """Buckets by a seeded hash of the ``keys`` columns (equal keys, equal bucket, any int width)."""

    keys: tuple[str, ...]

    def describe(self) -> str:
        return f"hash({', '.join(self.keys)})"


@dataclass(frozen=True)
class RangePartitioning:
    """Buckets by sort key ranges: ``splitters`` (B-1 rows of the key columns ``__k0..``) cut B
    buckets in the query's own order; rows equal to a splitter go up."""

    by: tuple[Expr, ...]
    descending: tuple[bool, ...]
    nulls_last: bool = False
    splitters: pl.DataFrame | None = None

    def describe(self) -> str:
        return "range(" + ", ".join(f"{e.show()}{' desc' if d else ''}" for e, d in zip(self.by, self.descending)) + ")"


@dataclass(frozen=True)
class RecordsRangePartitioning:
    """TeraSort: buckets by splitters on the composite key (key, global row position), so hot and
    all-equal keys still split evenly (see :mod:`croupier.ops.partition`)."""

    splitters: tuple[bytes, bytes] = (b"", b"")

    def describe(self) -> str:
        return "range(key, row) [TeraSort]"


@dataclass(frozen=True)
class SinglePartitioning:
    """Every row in bucket 0: a gather, a broadcast, or a forward."""

    def describe(self) -> str:
        return "single"


Partitioning = Union[HashPartitioning, RangePartitioning, RecordsRangePartitioning, SinglePartitioning]

# --- sinks: what a stage's tasks write ------------------------------------------------------------


@dataclass(frozen=True)
class ExchangeSink:
    """Write level 1 of an exchange. ``plan``: chosen before the producers run (early binding; its
    ``senders`` must equal the producer count); None: producers cut their rows into fine buckets and
    the consumers' plan is chosen from the bytes they wrote (late binding). ``eager``: consumers of an
    early, plain direct exchange start once a share of the producers finished (SEER §5.1).
    ``sample_by``: each task also returns ``sample_rows`` rows of these sort keys. ``to_driver``: the
    driver is the one reader (``collect``): tasks whose rows are small return them inline instead."""

    partitioning: Partitioning = field(default_factory=SinglePartitioning)
    plan: ExchangePlan | None = None
    eager: bool = False
    sample_by: tuple[Expr, ...] = ()
    sample_rows: int = 0
    to_driver: bool = False

    @property
    def in_rounds(self) -> bool:
        """Whether the exchange may run as the hybrid's rounds (croupier.exchange.hybrid): a
        partitioned one whose consumers are not eager (they would read before the rounds end)."""
        return not isinstance(self.partitioning, SinglePartitioning) and not self.eager

    @property
    def spills(self) -> bool:
        """Whether a producer the fast tier refuses may write its objects to the slow tier
        instead: not with eager consumers, which read before it could say where it wrote."""
        return not self.eager


@dataclass(frozen=True)
class OutputSink:
    """Write final output parts under ``url`` as ``fmt`` ("parquet", "csv", "gensort", or for
    records "records-gensort"/"records-parquet"), named by ``namer(task index, file index)``."""

    url: str
    fmt: str
    tag: str
    max_rows_per_file: int | None = None
    compression: str = "zstd"  # of Parquet parts (Polars' default)


@dataclass(frozen=True)
class ResultSink:
    """Return the operators' (small) result to the driver as task metadata."""


Sink = Union[ExchangeSink, OutputSink, ResultSink]

# --- sources: what a stage's tasks read -----------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ScanSource:
    """Read stored files as frames; one task per split. ``file_schema`` is filled in if absent.
    ``filters``: the reads keep only the rows ``spec.predicate`` accepts, evaluating it while
    decoding (:func:`croupier.dag.scan.filters_in_read`); else they keep every row."""

    spec: ScanSpec
    file_schema: Mapping[str, Any] | None = None
    filters: bool = False


@dataclass(frozen=True, eq=False)
class TaskSource:
    """One task per item of ``reads``: explicit read specs the planner built (TeraSort shares,
    generated ranges, objects to validate)."""

    reads: tuple[Any, ...]
    bytes: int | None = None  # what the tasks read in all, when the planner knows (the tier choice uses it)


@dataclass(frozen=True, eq=False)
class ExchangeInput:
    """Read the output of ``stage`` (see the module docstring for ``read``)."""

    stage: Stage
    read: str = "partition"

    def __post_init__(self) -> None:
        if self.read not in READS:
            raise ConfigError(f"exchange read must be one of {READS}, got {self.read!r}")
        if not isinstance(self.stage.sink, ExchangeSink):
            raise ConfigError(f"stage {self.stage.name!r} writes {type(self.stage.sink).__name__}, not an exchange; it cannot be read")


@dataclass(frozen=True, eq=False)
class UnionSource:
    """The outputs of several stages, one after the other: one task per producer task, in input
    order, each reading what that producer task wrote (``forward`` reads; a concatenation)."""

    inputs: tuple[ExchangeInput, ...]

    def __post_init__(self) -> None:
        if not self.inputs or any(i.read != "forward" for i in self.inputs):
            raise ConfigError("a union reads one or more stages, each 'forward'")


Source = Union[ScanSource, TaskSource, ExchangeInput, UnionSource]


@dataclass(eq=False)
class Stage:
    """One stage: main source, side inputs, operators, sink; ``workers`` fixes P of a partition-wise
    main input; ``rep`` is the data representation (frames or records). Consecutive frame
    operators are fused into one lazy Polars query (:func:`croupier.dag.operators.fuse`)."""

    name: str
    source: Source
    ops: tuple[Operator, ...] = ()
    sides: dict[str, ExchangeInput] = field(default_factory=dict)
    sink: Sink = field(default_factory=ExchangeSink)
    workers: int | None = None
    rep: str = "frames"

    def __post_init__(self) -> None:
        self.ops = fuse(tuple(self.ops))
        needed = {s for op in self.ops for s in op.sides}
        if needed - set(self.sides):
            raise ConfigError(f"stage {self.name!r}: operators read side input(s) {sorted(needed - set(self.sides))} that the stage does not declare")
        if self.rep not in REPS:
            raise ConfigError(f"stage {self.name!r}: rep must be one of {REPS}, got {self.rep!r}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"stage {self.name!r}: workers must be >= 1, got {self.workers}")

    def inputs(self) -> list[ExchangeInput]:
        """The exchange inputs (main first), i.e. the dependencies."""
        if isinstance(self.source, UnionSource):
            main = list(self.source.inputs)
        else:
            main = [self.source] if isinstance(self.source, ExchangeInput) else []
        return main + list(self.sides.values())

    def describe(self) -> str:
        """One line for explain: source, sides, operators, sink."""
        if isinstance(self.source, ScanSource):
            src = f"scan {self.source.spec.format} {self.source.spec.url}"
        elif isinstance(self.source, TaskSource):
            src = f"{len(self.source.reads)} planned task(s)"
        elif isinstance(self.source, UnionSource):
            src = "union of " + ", ".join(i.stage.name for i in self.source.inputs)
        else:
            src = f"{self.source.read} of {self.source.stage.name}"
        sides = "".join(f"; side {k}: {v.read} of {v.stage.name}" for k, v in self.sides.items())
        ops = "".join(f" | {op.describe()}" for op in self.ops)
        return f"{self.name}: {src}{sides}{ops} -> {describe_sink(self.sink)}"


def describe_sink(sink: Sink) -> str:
    """One line for a sink."""
    if isinstance(sink, ExchangeSink):
        how = f"plan {sink.plan.name} P={sink.plan.workers} (bound before the producers run)" if sink.plan else "plan bound late"
        return f"exchange {sink.partitioning.describe()}, {how}" + (", eager consumers" if sink.eager else "")
    if isinstance(sink, OutputSink):
        return f"output {sink.fmt} {sink.url}"
    return "result to the driver"
