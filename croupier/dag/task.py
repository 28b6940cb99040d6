"""What one task of a stage does, in a function: read, run the operators, write; return metadata.

::

    main read ─┐
    side reads ─┴─> operators ──> write: exchange level 1 | output parts | result to the driver

Reads and writes are described by small picklable specs the runner builds; this module turns them
into I/O through the task's counted stores. Exchange objects move through the one exchange
executor (:mod:`croupier.exchange.move`); the partitioners and codecs are pure CPU kernels from
:mod:`croupier.ops`. A task returns only small metadata: segment boundaries, bytes, rows, key
samples, output file names, or an operator's small result.
"""

from __future__ import annotations

import functools
import io
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Union

import numpy as np
import polars as pl

from croupier.compute.context import TaskContext
from croupier.errors import StorageError
from croupier.dag.operators import Operator
from croupier.dag.scan import ScanSpec, Split, read_split_decoded
from croupier.dag.stage import HashPartitioning, Partitioning, RangePartitioning, RecordsRangePartitioning
from croupier.exchange import move
from croupier.exchange.broadcast import BroadcastPlan
from croupier.exchange.move import Fetch
from croupier.exchange.segments import Chunk, ordered
from croupier.exchange.levels import LevelsPlan
from croupier.exchange.plan import ExchangePlan
from croupier.expr import Expr
from croupier.ops import partition, terasort
from croupier.ops.gensort import generate
from croupier.ops.payload import Condensed, FrameCodec, RecordsCodec
from croupier.ops.records import RECORD_SIZE, RecordRuns
from croupier.report import PHASE_FIELDS
from croupier.storage import Store

try:
    import resource
except ImportError:  # not a Unix: fresh memory is not measured (reported as 0)
    resource = None  # type: ignore[assignment]
PAGE_SIZE = resource.getpagesize() if resource is not None else 4096

# --- reads ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanRead:
    """A split of stored files, read as a frame."""

    spec: ScanSpec
    split: Split
    file_schema: Mapping[str, Any]
    filters: bool = False  # keeps only the rows spec.predicate accepts (see ScanSource)


@dataclass(frozen=True)
class PiecesRead:
    """TeraSort records: pieces of input objects, with their global first rows."""

    url: str
    pieces: tuple[terasort.Piece, ...]


@dataclass(frozen=True)
class GenerateRead:
    """TeraSort records generated from the seed: rows [first, first + count)."""

    first: int
    count: int
    seed: int
    ascii: bool


@dataclass(frozen=True)
class SampleRead:
    """A probe: rows and sampled composite keys of TeraSort pieces (the result is the sample)."""

    url: str
    pieces: tuple[terasort.Piece, ...]
    samples: int
    seed: int


@dataclass(frozen=True)
class ExchangeRead:
    """Chunks of an exchange: ``fetches`` under ``url``, decoded as ``rep`` with codec ``fmt``."""

    url: str
    fetches: tuple[Fetch, ...]
    rep: str
    fmt: str
    schema: Mapping[str, Any] | None
    wait: float
    channel: str = "exchange"
    #: every task of the stage reads exactly these objects (a broadcast side): a worker keeps the
    #: decoded rows for its next tasks of the run (see :func:`read_shared`)
    shared: bool = False
    #: the columns the producers hash-partitioned the rows by (equal keys, one bucket), if so
    partitioned_by: tuple[str, ...] = ()


Read = Union[ScanRead, PiecesRead, GenerateRead, SampleRead, ExchangeRead]

# --- writes -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExchangeWrite:
    """Level 1 of an exchange: cut rows into the plan's buckets, write them as sender ``sender``."""

    url: str
    prefix: str
    plan: ExchangePlan | BroadcastPlan
    sender: int
    partitioning: Partitioning
    fmt: str
    sample_by: tuple[Expr, ...] = ()
    sample_rows: int = 0
    channel: str = "exchange"
    fallback: str = ""  # the slow tier, when ``url`` is the fast one: where to write if it fails
    inline: int = 0  # rows of at most this many bytes go back to the driver in the reply, not to storage


@dataclass(frozen=True)
class OutputWrite:
    """Final output: this task's rows as part file(s) ``<name>[-<n>].<ext>`` under ``url``."""

    url: str
    fmt: str
    name: str
    max_rows_per_file: int | None = None
    compression: str = "zstd"  # Parquet's: Polars' default; "snappy", "lz4", "uncompressed", ...


@dataclass(frozen=True)
class ResultWrite:
    """Return the operators' result to the driver."""


Write = Union[ExchangeWrite, OutputWrite, ResultWrite]


@dataclass(frozen=True)
class TaskSpec:
    """Everything one task needs, picklable."""

    index: int
    main: Read
    sides: Mapping[str, ExchangeRead]
    ops: tuple[Operator, ...]
    write: Write

    def inputs(self) -> tuple[tuple[str, str, int | None, int | None], ...]:
        """What the task will read, for look-ahead prefetch."""
        reads = [self.main, *self.sides.values()]
        out: list[tuple[str, str, int | None, int | None]] = []
        for read in reads:
            if isinstance(read, ExchangeRead) and read.shared:
                continue  # most tasks find it decoded in their worker: fetching it ahead would be waste
            if isinstance(read, ExchangeRead):
                out += [f.as_input(read.url) for f in read.fetches]
            elif isinstance(read, PiecesRead):
                out += [(read.url, p.key, p.start * RECORD_SIZE, p.stop * RECORD_SIZE) if p.fmt == "gensort" else (read.url, p.key, None, None) for p in read.pieces if p.row_groups is None]
        return tuple(out)


class Phases:
    """Where a task's time went, per phase kind: [bytes of data, wall seconds, request seconds,
    calls, fresh memory bytes]. Kinds name what ran (``read:parquet``, ``hash_aggregate``,
    ``write:exchange-frames``...), so the model can be calibrated per operator kind from every run.
    Fresh memory is what the phase's process first touched (:func:`fresh_bytes`): a function's
    first tasks fault their memory in, which later ones reuse (a TPC-H Q1 task took 390 ms cold and
    120 ms warm), so a phase that touched much of it measured a cold function, not its kind."""

    def __init__(self, ctx: TaskContext) -> None:
        self._ctx = ctx
        self.kinds: dict[str, list[float]] = {}

    def run(self, kind: str, fn: Any, *args: Any, sized: bool = False, also: int = 0) -> Any:
        """Call ``fn(*args)`` as phase ``kind``; its data size is that of its result (reads) or its
        first argument (operators, writes), plus ``also`` (bytes of further inputs it works
        through: a join's build side); ``sized``: ``fn`` returns (result, its size)."""
        io_before = _io_seconds(self._ctx)
        fresh = fresh_bytes()
        started = time.perf_counter()
        result = fn(*args)
        wall = time.perf_counter() - started
        fresh = fresh_bytes() - fresh
        if sized:
            result, nbytes = result
        else:
            nbytes = data_bytes(args[0] if args and not kind.startswith("read:") else result)
        entry = self.kinds.setdefault(kind, [0.0] * PHASE_FIELDS)
        entry[0] += nbytes + also
        entry[1] += wall
        entry[2] += _io_seconds(self._ctx) - io_before
        entry[3] += 1
        entry[4] += fresh
        return result


def fresh_bytes() -> float:
    """Memory this process has faulted in so far (minor page faults x page size): the difference
    over a phase is the fresh memory it touched; a warm function reusing kept memory touches next
    to none. 0 where the platform does not count page faults."""
    if resource is None:
        return 0.0
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_minflt * PAGE_SIZE)


def _io_seconds(ctx: TaskContext) -> float:
    """Wall-clock seconds the task has spent waiting on requests: concurrent requests count once
    (their union, not their sum), and prefetched ones, which ran while it did something else, not
    at all."""
    return ctx.clock.seconds()


def data_bytes(data: Any) -> int:
    """Bytes of data flowing through a phase (frames: Polars' estimate; records: 100 per record)."""
    if isinstance(data, pl.DataFrame):
        return int(data.estimated_size())
    if isinstance(data, Condensed):
        return int(data.frame.estimated_size())
    if isinstance(data, RecordRuns):
        return len(data) * RECORD_SIZE
    return 0


def read_kind(source: Read) -> str:
    """The phase kind of a read."""
    if isinstance(source, ScanRead):
        return source.spec.cost_kind
    if isinstance(source, ExchangeRead):
        return f"read:exchange-{source.rep}-{source.fmt}"
    if isinstance(source, PiecesRead):
        return f"read:records-{source.pieces[0].fmt if source.pieces else 'gensort'}"
    if isinstance(source, GenerateRead):
        return "read:generate"
    return "read:sample"


def write_kind(sink: Write, data: Any) -> str:
    """The phase kind of a write."""
    if isinstance(sink, ResultWrite) or inlined(sink, data):
        return "write:result"
    if isinstance(sink, OutputWrite):
        return f"write:output-{sink.fmt}"
    rep = "records" if isinstance(data, RecordRuns) else "frames"
    return f"write:exchange-{rep}-{sink.fmt}-{type(sink.partitioning).__name__.removesuffix('Partitioning').lower()}"


def run_task(ctx: TaskContext, spec: TaskSpec) -> dict[str, Any]:
    """Read, run the operators, write the sink; return the small metadata the driver needs, with
    the time and bytes of every phase."""
    phases = Phases(ctx)
    runs: list[int] = []
    data = phases.run(read_kind(spec.main), read_sized, ctx, spec.main, runs, sized=True)
    cached: dict[str, dict[str, int]] = {}
    sides = {name: read_shared(ctx, r, phases, cached) if r.shared else phases.run(read_kind(r), read, ctx, r) for name, r in spec.sides.items()}
    last = len(spec.ops) - 1
    for i, op in enumerate(spec.ops):
        # a join works through its build side as well as the stream: both sizes price it
        built = sum(data_bytes(sides[name]) for name in op.sides if name in sides)
        step = op.for_task(spec.index)
        # the last operator before an exchange may hand its rows condensed (see Condensed)
        apply = step.apply_to_exchange if i == last and isinstance(spec.write, ExchangeWrite) else step.apply
        if i == 0 and isinstance(spec.main, ExchangeRead) and step.splits_on(spec.main.partitioned_by) and isinstance(data, pl.DataFrame) and sum(runs) == data.height:
            apply = functools.partial(by_buckets, step.apply, runs)
        data = phases.run(op.cost_kind, apply, data, sides, also=built)
    out = phases.run(write_kind(spec.write, data), _write_data, data, ctx, spec.write)
    out["phases"] = phases.kinds
    if cached:
        out["cached"] = cached
    return out


#: Broadcast sides this worker decoded, newest last: {(store, fetches, format, schema): rows}.
_SHARED: OrderedDict[tuple[Any, ...], pl.DataFrame] = OrderedDict()
#: Share of the function's memory the kept sides may take together.
SHARED_SHARE = 1 / 16


def read_shared(ctx: TaskContext, source: ExchangeRead, phases: Phases, cached: dict[str, dict[str, int]]) -> pl.DataFrame:
    """A broadcast side: every task of its stage reads the same objects, so a worker that decoded
    them for one task keeps the rows for its next ones, and of 15 probe tasks on 2 workers 2 fetch
    and decode it instead of 15 (TPC-H Q12 at SF 1: 19 ms of each task). Local workers only in
    effect: Lithops runs each call in a process of its own, so its tasks never find one kept.
    Exchange objects of a run are written once and never change, and their store URL names the
    run, so equal fetches mean equal rows; rows of an earlier run are dropped on the next miss.
    A hit is a phase ``read:cached`` of no bytes, and its requests are counted apart (``cached``:
    per channel and kind), so an exchange's requests plus its cached ones still equal its plan's."""
    key = (source.url, source.fetches, source.fmt, tuple((source.schema or {}).items()))
    frame = _SHARED.get(key)
    if frame is None:
        for stale in [k for k in _SHARED if k[0] != source.url]:  # an earlier run's (its URL names it)
            del _SHARED[stale]
        frame = phases.run(read_kind(source), read, ctx, source)
        budget = ctx.config.function_memory * SHARED_SHARE
        size = frame.estimated_size()
        if size <= budget:
            _SHARED[key] = frame
            while sum(f.estimated_size() for f in _SHARED.values()) > budget:
                _SHARED.popitem(last=False)
        return frame
    _SHARED.move_to_end(key)
    started = time.perf_counter()
    counts = cached.setdefault(source.channel, {})
    for f in source.fetches:
        kind = "GET" if f.start is None else "GET_RANGE"
        counts[kind] = counts.get(kind, 0) + 1
    entry = phases.kinds.setdefault("read:cached", [0.0] * PHASE_FIELDS)
    entry[1] += time.perf_counter() - started
    entry[3] += 1
    return frame


#: Rows per call of an operator run bucket by bucket (:func:`by_buckets`): a hash aggregation's
#: table of 400 thousand rows took 100 ns a row on one core here, of 5 million 170 ns (the
#: table outgrows the caches), and each call costs a fixed half millisecond or so.
BUCKET_ROWS = 1 << 18


def bucket_rows(chunks: list[Chunk]) -> list[int]:
    """The rows of each bucket of ``chunks`` (in consumer order: bucket by bucket)."""
    rows: list[int] = []
    last = None
    for c in chunks:
        if c.bucket != last:
            rows.append(0)
            last = c.bucket
        rows[-1] += c.rows
    return rows


def by_buckets(apply: Any, runs: list[int], df: pl.DataFrame, sides: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """``apply`` to runs of whole buckets of ``df`` (``runs``: each bucket's rows, in order), at
    least :data:`BUCKET_ROWS` rows each, results concatenated: for an operator that
    :meth:`~croupier.dag.operators.Operator.splits_on` the exchange's hash keys (an aggregation
    whose keys are never split across buckets), the same rows, with smaller hash tables — as
    DuckDB's radix-partitioned aggregation does. A consumer of a 12M-group group-by took 170 ns
    a row for its 5 million rows at once."""
    ends = [0]  # where each slice ends
    size = 0
    for n in runs:
        if size >= BUCKET_ROWS:
            ends.append(ends[-1])
            size = 0
        ends[-1] += n
        size += n
    if len(ends) < 2:
        return apply(df, sides)  # type: ignore[no-any-return]
    return pl.concat([apply(df.slice(start, end - start), sides) for start, end in zip([0, *ends[:-1]], ends)])


def _write_data(data: Any, ctx: TaskContext, sink: Write) -> dict[str, Any]:
    return write(ctx, sink, data)


def read_sized(ctx: TaskContext, source: Read, runs: list[int] | None = None) -> tuple[Any, int]:
    """:func:`read`, and its size for the model: a scan that filtered while decoding counts the
    rows it decoded (at the kept rows' width), as a read that left filtering to an operator did.
    ``runs``: see :func:`read`."""
    if not isinstance(source, ScanRead):
        data = read(ctx, source, runs=runs)
        return data, data_bytes(data)
    df, rows = read_split_decoded(ctx.store(source.split.base), source.spec, source.split, pl.Schema(source.file_schema), source.filters)
    nbytes = data_bytes(df)
    if rows > df.height:
        width = nbytes / df.height if df.height else 8 * max(1, df.width)
        nbytes = int(width * rows)
    return df, nbytes


def read(ctx: TaskContext, source: Read, combine: bool = True, runs: list[int] | None = None) -> Any:
    """The data of one read spec: a frame, record runs, or a probe's sample (an exchange's frame
    in one chunk per column unless ``combine`` is False: see :meth:`FrameCodec.decode`).
    ``runs``: a hash-partitioned exchange's frame comes bucket by bucket, and the rows of each
    bucket are appended to it (see :func:`by_buckets`)."""
    if isinstance(source, ScanRead):
        return read_sized(ctx, source)[0]
    if isinstance(source, ExchangeRead):
        chunks = ordered(move.fetch(ctx.store(source.url, source.channel), source.fetches, source.wait, lambda url: ctx.store(url, source.channel)))
        if source.rep == "records":
            return RecordRuns([RecordsCodec(source.fmt).decode(chunks)], [0])
        assert source.schema is not None, "frame exchange read without a schema"
        df = FrameCodec(source.fmt).decode(chunks, pl.Schema(source.schema), combine)
        if runs is not None and source.partitioned_by:
            runs += bucket_rows(chunks)
        return df
    if isinstance(source, PiecesRead):
        store = ctx.store(source.url)
        return RecordRuns([terasort.read_piece(store, p) for p in source.pieces], [p.first_row for p in source.pieces])
    if isinstance(source, GenerateRead):
        return RecordRuns([generate(source.first, source.count, source.seed, source.ascii)], [source.first])
    return terasort.sample_pieces(ctx.store(source.url), list(source.pieces), source.samples, source.seed)


def run_level(ctx: TaskContext, url: str, plan: ExchangePlan | BroadcastPlan, level: int, worker: int, fetches: tuple[Fetch, ...], wait: float, prefix: str, channel: str) -> dict[str, Any]:
    """Task of an exchange's intermediate level: receive level ``level - 1``, pass it on."""
    fresh = fresh_bytes()
    started = time.perf_counter()
    written, nbytes = move.pass_level(ctx.store(url, channel), plan, level, worker, fetches, wait, prefix, lambda other: ctx.store(other, channel))
    wall = time.perf_counter() - started
    return {"written": written, "phases": {"regroup": [float(nbytes), wall, _io_seconds(ctx), 1.0, fresh_bytes() - fresh]}}


def run_memory_level(ctx: TaskContext, url: str, plan: LevelsPlan, level: int, task: int, fetches: tuple[tuple[Fetch, ...], ...], wait: float, prefix: str, channel: str) -> dict[str, Any]:
    """Task of a memory level (MinFlow): one group of workers in one task; level ``level`` happens
    in its memory, and it writes its members' objects of level ``level + 1``."""
    fresh = fresh_bytes()
    started = time.perf_counter()
    out = move.pass_memory_level(ctx.store(url, channel), plan, level, task, fetches, wait, prefix, lambda other: ctx.store(other, channel))
    wall = time.perf_counter() - started
    nbytes = float(sum(n for _, n in out))
    return {"written": [w for w, _ in out], "phases": {"regroup": [nbytes, wall, _io_seconds(ctx), 1.0, fresh_bytes() - fresh]}}


# --- writing ----------------------------------------------------------------------------------------


def write(ctx: TaskContext, sink: Write, data: Any) -> dict[str, Any]:
    """Write ``data`` as ``sink`` says; return the metadata for the driver."""
    inline = inlined(sink, data)
    if isinstance(data, Condensed) and (not isinstance(sink, ExchangeWrite) or inline):
        data = data.expanded()  # condensed rows are for exchange objects: their readers expand them
    if isinstance(sink, ResultWrite):
        return {"value": data}
    if isinstance(sink, OutputWrite):
        return {"files": write_output(ctx, sink, data)}
    if inline:
        # as Arrow: pickling a Polars frame (DataFrame.serialize) can hang in a forked worker
        return {"inline": data.to_arrow(), "rows": data.height}
    if isinstance(data, RecordRuns):
        chunks, rows = _record_chunks(sink, data)
        out: dict[str, Any] = {}
    else:
        chunks, rows, out = _frame_chunks(sink, data)
    try:
        written, nbytes = move.write_level(ctx.store(sink.url, sink.channel), sink.plan, 0, sink.sender, chunks, sink.prefix)
    except StorageError as exc:  # the fast tier is full or gone: this sender's objects go to the slow tier
        if not sink.fallback:
            raise
        _forget(ctx.store(sink.url, sink.channel), sink)
        written, nbytes = move.write_level(ctx.store(sink.fallback, sink.channel), sink.plan, 0, sink.sender, chunks, sink.prefix)
        out.update(url=sink.fallback, fell_back=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    # what the readers will decode and work through (the model prices their operators by it),
    # where ``bytes`` is what the objects hold: compressed, or condensed
    decoded = data.expanded_bytes() if isinstance(data, Condensed) else data_bytes(data)
    out.update(written=written, bytes=nbytes, rows=rows, data=decoded)
    return out


def inlined(sink: Write, data: Any) -> bool:
    """Whether a task returns its rows in its reply instead of writing them: the driver is their
    one reader and they are small (Polars' size estimate within ``sink.inline`` bytes)."""
    if not (isinstance(sink, ExchangeWrite) and sink.inline > 0):
        return False
    if isinstance(data, Condensed):  # it goes back expanded
        return data.expanded_bytes() <= sink.inline
    return isinstance(data, pl.DataFrame) and data.estimated_size() <= sink.inline


def _forget(store: Store, sink: ExchangeWrite) -> None:
    """Delete what a sender may have written on a fast tier that then failed (frees a full
    server; a dead one lost it anyway, so failing to delete is fine: the run's cleanup retries)."""
    plan = sink.plan
    keys = [sink.prefix + plan.key(0, sink.sender)] if isinstance(plan, BroadcastPlan) else [sink.prefix + o.key for o in plan.writes(0, sink.sender)]
    try:
        store.delete(keys)
    except StorageError:
        pass


def _buckets(plan: ExchangePlan | BroadcastPlan) -> int:
    return plan.bucket_count if isinstance(plan, ExchangePlan) else 1


def _record_chunks(sink: ExchangeWrite, data: RecordRuns) -> tuple[list[Any], int]:
    """Cut TeraSort record runs into the plan's buckets (never concatenating the runs)."""
    buckets = _buckets(sink.plan)
    grouped: dict[int, list[np.ndarray]] = {}
    part = sink.partitioning
    for records, first in zip(data.parts, data.first_rows):
        if isinstance(part, RecordsRangePartitioning):
            split = (np.frombuffer(part.splitters[0], np.uint64), np.frombuffer(part.splitters[1], np.uint64))
            ordered, bounds = terasort.partition_records(records, first, split, buckets)
            for b in np.flatnonzero(np.diff(bounds)):
                grouped.setdefault(int(b), []).append(ordered[bounds[b] : bounds[b + 1]])
        elif len(records):
            grouped.setdefault(0, []).append(records)
    fmt = sink.fmt
    return RecordsCodec(fmt).encode(grouped, sink.sender), sum(len(r) for r in data.parts)


def _frame_chunks(sink: ExchangeWrite, data: pl.DataFrame | Condensed) -> tuple[list[Any], int, dict[str, Any]]:
    """Cut a frame (or condensed rows) into the plan's buckets; with ``sample_by``, also a sample
    of its sort keys."""
    df, expansion = (data.frame, data.expansion) if isinstance(data, Condensed) else (data, None)
    buckets = _buckets(sink.plan)
    part = sink.partitioning
    if isinstance(part, HashPartitioning):
        bucket = partition.hash_buckets(df, part.keys, buckets)
    elif isinstance(part, RangePartitioning):
        assert part.splitters is not None, "range partitioning without splitters"
        bucket = partition.range_buckets(df, [e.to_polars() for e in part.by], part.descending, part.nulls_last, part.splitters)
    else:
        bucket = np.zeros(df.height, dtype=np.int64)
    out: dict[str, Any] = {}
    if sink.sample_by and df.height:
        keys = partition.sort_keys(df, [e.to_polars() for e in sink.sample_by])
        take = np.unique(np.linspace(0, df.height - 1, min(df.height, sink.sample_rows)).astype(np.int64))
        out["sample"] = keys[take]
    return FrameCodec(sink.fmt).encode(df, bucket, buckets, sink.sender, expansion), df.height, out


def write_output(ctx: TaskContext, sink: OutputWrite, data: Any) -> list[tuple[str, int, int]]:
    """Write this task's rows as output part files; return (name, rows, bytes) per file."""
    from croupier.ops.formats import write_records

    store = ctx.store(sink.url)
    if isinstance(data, RecordRuns):
        records = data.concatenated()
        fmt = sink.fmt.removeprefix("records-")
        blob = write_records(records, fmt)
        name = sink.name + (".parquet" if fmt == "parquet" else "")
        store.put(name, blob)
        return [(name, len(records), memoryview(blob).nbytes)]
    step = sink.max_rows_per_file or max(1, data.height)
    files = []
    for k, start in enumerate(range(0, data.height, step)):
        part = data.slice(start, step)
        buf = io.BytesIO()
        if sink.fmt == "csv":
            part.write_csv(buf)
        else:
            part.write_parquet(buf, compression=sink.compression)  # type: ignore[arg-type]
        suffix = f"-{k:04d}" if sink.max_rows_per_file else ""
        name = f"{sink.name}{suffix}.{sink.fmt}"
        store.put(name, buf.getvalue())
        files.append((name, part.height, buf.tell()))
    return files
