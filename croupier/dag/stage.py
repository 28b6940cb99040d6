"""The low-level job API: stages, their inputs, operators and sinks (SEER's annotation API in spirit).

A job is a DAG of :class:`Stage` objects. Each stage reads ONE main input — a scan of stored files,
or the output of another stage — plus optional side inputs, runs its operators on every task's
data, and writes a sink. Dependencies are the stages it reads; the runner
(:mod:`croupier.dag.runner`) runs them in topological order, independent ones at the same time.

How a stage reads another stage (``StageInput.mode``):

* ``"partition"``: P tasks; task j reads bucket range j of every producer object. The producer's
  sink must cut buckets (hash or range). P is chosen when the producers have finished, from the
  bytes they wrote (late binding, with the selector), unless ``Stage.workers`` fixes it.
* ``"all"``: one task reads everything (a gather), or — as a side input — every task reads
  everything (a broadcast).
* ``"object"``: one task per producer object.

Sinks: :class:`HashSink` (buckets by key hash), :class:`RangeSink` (buckets by sampled splitters),
:class:`PlainSink` (one bucket; optionally a key sample for a later range exchange) and
:class:`ParquetSink` (final output files).

    lineitem = Stage("scan", ScanInput(ScanSpec("data/lineitem.parquet", "parquet")),
                     ops=(Aggregate(("l_orderkey",), (AggSpec("sum", "l_quantity", "q"),)),),
                     sink=HashSink(("l_orderkey",)))
    final = Stage("final", StageInput(lineitem), ops=(Aggregate(("l_orderkey",), (AggSpec("sum", "q", "q"),)),))
    outputs = run_job([final], config)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Union

import numpy as np
import polars as pl

from croupier.compute.context import TaskContext
from croupier.dag.exchange import (
    COMPRESSION,
    Piece,
    hash_buckets,
    range_buckets,
    read_pieces,
    sort_keys,
    write_buckets,
)
from croupier.dag.operators import Operator, run_pipeline
from croupier.dag.scan import ScanSpec, Split, read_split
from croupier.errors import ConfigError
from croupier.expr import Expr

MODES = ("partition", "all", "object")


@dataclass(frozen=True, eq=False)
class ScanInput:
    """Read stored files; one task per split. ``file_schema`` is filled in by the runner if absent."""

    spec: ScanSpec
    file_schema: Mapping[str, Any] | None = None


@dataclass(frozen=True, eq=False)
class StageInput:
    """Read the output of ``stage`` (see the module docstring for the modes)."""

    stage: Stage
    mode: str = "partition"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"stage input mode must be one of {MODES}, got {self.mode!r}")


@dataclass(frozen=True)
class HashSink:
    """Cut the output into buckets by a hash of ``keys`` (B from the config when None)."""

    keys: tuple[str, ...]
    buckets: int | None = None


@dataclass(frozen=True)
class RangeSink:
    """Cut the output into ``len(splitters) + 1`` buckets in sort order (splitters set at run time)."""

    by: tuple[Expr, ...]
    descending: tuple[bool, ...]
    nulls_last: bool = False
    splitters: pl.DataFrame | None = None


@dataclass(frozen=True)
class PlainSink:
    """One object per task; with ``sample_by``, each task also returns a sample of those keys."""

    sample_by: tuple[Expr, ...] = ()
    sample_rows: int = 0


@dataclass(frozen=True)
class ParquetSink:
    """Write the output as Parquet files under ``url`` (at most ``max_rows_per_file`` rows each),
    below ``staging`` (a key prefix) until the job commits them."""

    url: str
    max_rows_per_file: int | None = None
    staging: str = ""


Sink = Union[HashSink, RangeSink, PlainSink, ParquetSink]
Input = Union[ScanInput, StageInput]


@dataclass(eq=False)
class Stage:
    """One stage of a job: main input, side inputs, operators, sink, and optionally a fixed P."""

    name: str
    source: Input
    ops: tuple[Operator, ...] = ()
    sides: dict[str, StageInput] = field(default_factory=dict)
    sink: Sink = field(default_factory=PlainSink)
    workers: int | None = None

    def __post_init__(self) -> None:
        needed = {s for op in self.ops for s in op.sides}
        if needed - set(self.sides):
            raise ConfigError(f"stage {self.name!r}: operators read side input(s) {sorted(needed - set(self.sides))} that the stage does not declare")

    def inputs(self) -> list[StageInput]:
        """The stage inputs (main first), i.e. the dependencies."""
        main = [self.source] if isinstance(self.source, StageInput) else []
        return main + list(self.sides.values())

    def describe(self) -> str:
        if isinstance(self.source, ScanInput):
            src = f"scan {self.source.spec.format} {self.source.spec.url}"
        else:
            src = f"{self.source.mode} of {self.source.stage.name}"
        sides = "".join(f"; side {k}: {v.mode} of {v.stage.name}" for k, v in self.sides.items())
        return f"{self.name}: {src}{sides} -> {type(self.sink).__name__}"


# --- what one task does --------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanRead:
    """A task's scan input: one split."""

    spec: ScanSpec
    split: Split
    file_schema: Mapping[str, Any]


@dataclass(frozen=True)
class ExchangeRead:
    """A task's exchange input: pieces of producer objects under ``base``."""

    base: str
    pieces: tuple[Piece, ...]
    schema: Mapping[str, Any]


@dataclass(frozen=True)
class TaskSpec:
    """Everything one task needs, picklable."""

    index: int
    main: ScanRead | ExchangeRead
    sides: Mapping[str, ExchangeRead]
    ops: tuple[Operator, ...]
    sink: Sink
    out_base: str
    out_key: str
    encoding: str
    buckets: int


def _read(ctx: TaskContext, source: ScanRead | ExchangeRead) -> pl.DataFrame:
    if isinstance(source, ScanRead):
        store = ctx.store(source.split.base)
        return read_split(store, source.spec, source.split, pl.Schema(source.file_schema))
    return read_pieces(ctx.store(source.base, "exchange"), source.pieces, pl.Schema(source.schema))


def run_task(ctx: TaskContext, spec: TaskSpec) -> dict[str, Any]:
    """Read, run the operators, write the sink; return the small metadata the driver needs."""
    df = _read(ctx, spec.main)
    sides = {name: _read(ctx, read) for name, read in spec.sides.items()}
    df = run_pipeline(df, spec.ops, sides)
    return write_sink(ctx, spec, df)


def write_sink(ctx: TaskContext, spec: TaskSpec, df: pl.DataFrame) -> dict[str, Any]:
    """Write ``df`` as ``spec.sink`` says."""
    sink = spec.sink
    if isinstance(sink, ParquetSink):
        return {"files": _write_parquet(ctx, sink, spec.index, df), "rows": df.height}
    store = ctx.store(spec.out_base, "exchange")
    compression = COMPRESSION[spec.encoding]
    out: dict[str, Any] = {}
    if isinstance(sink, HashSink):
        bucket = hash_buckets(df, sink.keys, spec.buckets)
    elif isinstance(sink, RangeSink):
        assert sink.splitters is not None, "range sink without splitters"
        bucket = range_buckets(df, [e.to_polars() for e in sink.by], sink.descending, sink.nulls_last, sink.splitters)
    else:
        bucket = np.zeros(df.height, dtype=np.int64)
        if sink.sample_by and df.height:
            keys = sort_keys(df, [e.to_polars() for e in sink.sample_by])
            take = np.unique(np.linspace(0, df.height - 1, min(df.height, sink.sample_rows)).astype(np.int64))
            out["sample"] = keys[take]
    out["object"] = write_buckets(store, spec.out_key, df, bucket, spec.buckets, compression)
    return out


def _write_parquet(ctx: TaskContext, sink: ParquetSink, index: int, df: pl.DataFrame) -> list[tuple[str, int]]:
    """Write this task's rows as part files (none when it has no rows)."""
    import io

    store = ctx.store(sink.url)
    step = sink.max_rows_per_file or max(1, df.height)
    files = []
    for k, start in enumerate(range(0, df.height, step)):
        buf = io.BytesIO()
        part = df.slice(start, step)
        part.write_parquet(buf)
        name = f"part-{index:05d}-{k:04d}.parquet"
        store.put(sink.staging + name, buf.getvalue())
        files.append((name, part.height))
    return files


def empty_output(sink: ParquetSink, schema: Mapping[str, Any]) -> bytes:
    """An empty Parquet file with the output schema (written when no task had rows)."""
    import io

    buf = io.BytesIO()
    pl.DataFrame(schema=pl.Schema(schema)).write_parquet(buf)
    return buf.getvalue()
