"""Payload codecs: how a producer turns its bucketed data into exchange chunks, and back.

Two representations travel through exchanges:

* **records** — TeraSort's 100-byte records as ``(n, 100)`` uint8 arrays (sort's numpy kernels).
  ``raw``: the records' own bytes (no encoding cost; best on a fast local folder); ``arrow``,
  ``arrow-lz4``, ``arrow-zstd``: Arrow IPC record batches of one fixed-size-binary(100) column,
  compressed (fewer bytes where writes are slow, as S3 PUT bandwidth is).
* **frames** — query rows as Polars DataFrames, sent as Arrow IPC record-batch messages (no schema
  message; the schema travels in the task's metadata), uncompressed or lz4/zstd. A producer may
  send its rows *condensed* (:class:`Condensed`): fewer columns, from which the reader derives
  the declared ones (a partial aggregation that passes its rows through sends each row's key and
  value, not its count, sum, min and max: 12 bytes a row instead of 36). Such a chunk says so
  itself — it starts with :data:`CONDENSED` and its own schema, whose metadata tells how to
  expand it — so a reader needs no word from the driver about which producers condensed.

Every bucket's payload is independently decodable, and the concatenation of several plain payloads
of one codec is a valid payload, so the exchange moves chunks without decoding them. Encoding writes
all buckets of a task into ONE Arrow stream and cuts it at message boundaries: one pass, no copy per
bucket. The partitioner (which row goes to which bucket) is pure CPU work in
:mod:`croupier.ops.partition`; nothing here touches storage.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from croupier.exchange.segments import Chunk
from croupier.storage.backend import Buffer
from croupier.ops.codec import SMALL_MESSAGES, fixed_binary_bytes, write_options
from croupier.ops.partition import contiguous
from croupier.ops.records import RECORD_SIZE

RECORD_FORMATS = ("raw", "arrow", "arrow-lz4", "arrow-zstd")
FRAME_FORMATS = ("arrow", "arrow-lz4", "arrow-zstd")
_COMPRESSION = {"arrow": None, "arrow-lz4": "lz4", "arrow-zstd": "zstd"}
_RECORD_SCHEMA = pa.schema([("record", pa.binary(RECORD_SIZE))])
#: Bytes per bucket (on average, per producer) below which buckets are written uncompressed, and
#: payloads below which a reader decodes them as one stream. lz4 and zstd cost about 70 us per
#: message to decode whatever its size, and each payload read apart costs about 15 us: a broadcast
#: of a hash-partitioned build side (TPC-H Q12 at SF 1: 12 producers x 128 buckets, 1,536
#: messages of about 400 bytes) took 160 ms per reading task with lz4, 7 ms uncompressed in one
#: stream. A message says whether it is compressed, so readers need not know.
SMALL_PAYLOAD = 64 * 1024
#: Below this many bytes an uncompressed stream is written in one pass into a growing buffer (the
#: counting pass cost a fifth of a 10,000-row producer's encode into 128 buckets).
ONE_PASS_BYTES = 4 << 20


def _stream_cuts(schema: pa.Schema, fmt: str, groups: Sequence[Sequence[pa.RecordBatch]], size: int) -> tuple[pa.Buffer, list[int]]:
    """Write each group's batches into one IPC stream; return the stream and the offset where each
    group's messages start (plus the end). The schema message at the front belongs to no group.
    ``size``: the groups' bytes together (from the caller's whole table: summing the slices' sizes
    took a sixth of an encode of 128 buckets)."""
    small = size < SMALL_PAYLOAD * max(1, len(groups))  # tiny buckets: compression costs more than it saves
    compression = None if small else _COMPRESSION[fmt]
    options = write_options(compression, size / max(1, sum(len(g) for g in groups)))
    header = schema.serialize()
    if compression is None and size >= ONE_PASS_BYTES:
        # uncompressed, the stream's size is known before writing it (a counting pass copies
        # nothing): one buffer of that size, where a growing one reallocated and copied its way
        # up; on this kind of VM that took a final stage's 180 MB encode from 0.05 s to 0.45 s
        # (a small one, which grows in a few steps, is written in one pass)
        counter = pa.MockOutputStream()
        _write_groups(counter, schema, options, groups, header.size)
        stream = pa.allocate_buffer(counter.size())
        sink: Any = pa.FixedSizeBufferWriter(stream)
        cuts = _write_groups(sink, schema, options, groups, header.size)
    else:
        sink = pa.BufferOutputStream()
        cuts = _write_groups(sink, schema, options, groups, header.size)
        stream = sink.getvalue()
    if groups and stream[: header.size] != header:  # pragma: no cover - pyarrow guarantees the layout
        raise RuntimeError("Arrow IPC stream does not start with its schema message; cannot cut it into chunks")
    return stream, cuts


def _write_groups(sink: Any, schema: pa.Schema, options: pa.ipc.IpcWriteOptions, groups: Sequence[Sequence[pa.RecordBatch]], header: int) -> list[int]:
    """Write ``groups`` as one IPC stream into ``sink``; return where each group starts (and the end)."""
    cuts: list[int] = []
    with pa.ipc.new_stream(sink, schema, options=options) as writer:
        for batches in groups:
            cuts.append(sink.tell() or header)  # the stream writes its schema with the first batch
            for batch in batches:
                writer.write_batch(batch)
        cuts.append(sink.tell())
    return cuts


def _decode_messages(payloads: Sequence[memoryview | bytes], schema: pa.Schema) -> list[pa.RecordBatch]:
    """Record batches from IPC message payloads (no schema message) of ``schema``: large payloads
    read in place, runs of small ones copied into one stream and read by Arrow in one call."""
    batches: list[pa.RecordBatch] = []
    small: list[memoryview | bytes] = []
    for payload in payloads:
        nbytes = memoryview(payload).nbytes
        if not nbytes:
            continue
        if nbytes < SMALL_PAYLOAD:
            small.append(payload)
            continue
        batches += _read_stream(small, schema) + _read_in_place(payload, schema)
        small = []
    return batches + _read_stream(small, schema)


def _read_in_place(payload: memoryview | bytes, schema: pa.Schema) -> list[pa.RecordBatch]:
    """The batches of one payload, read where it lies (no copy; pyarrow's read_record_batch takes
    no read options: Arrow's pool decompresses its buffers)."""
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(pa.py_buffer(payload)))
    return [pa.ipc.read_record_batch(message, schema) for message in reader]


def _read_stream(payloads: Sequence[memoryview | bytes], schema: pa.Schema) -> list[pa.RecordBatch]:
    """The batches of ``payloads`` (small ones), read as one IPC stream behind the schema message."""
    if len(payloads) <= 1:
        return [b for payload in payloads for b in _read_in_place(payload, schema)]
    stream = b"".join([schema.serialize().to_pybytes(), *payloads])
    return list(pa.ipc.open_stream(pa.py_buffer(stream), options=SMALL_MESSAGES))  # small by construction


# --- records ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordsCodec:
    """TeraSort records in exchange chunks (see the module docstring for the formats)."""

    fmt: str = "raw"

    def __post_init__(self) -> None:
        if self.fmt not in RECORD_FORMATS:
            raise ValueError(f"records format must be one of {RECORD_FORMATS}, got {self.fmt!r}")

    def encode(self, buckets: dict[int, list[np.ndarray]], origin: int) -> list[Chunk]:
        """One chunk per non-empty bucket; ``buckets`` maps bucket -> record arrays in row order."""
        keys = [b for b in sorted(buckets) if sum(len(a) for a in buckets[b])]
        if self.fmt == "raw":
            return [Chunk(b, origin, sum(len(a) for a in buckets[b]), tuple(memoryview(np.ascontiguousarray(a).reshape(-1)) for a in buckets[b] if len(a))) for b in keys]
        groups = [[_record_batch(a) for a in buckets[b] if len(a)] for b in keys]
        stream, cuts = _stream_cuts(_RECORD_SCHEMA, self.fmt, groups, sum(a.nbytes for b in keys for a in buckets[b]))
        view = memoryview(stream)
        return [Chunk(b, origin, sum(len(a) for a in buckets[b]), (view[cuts[i] : cuts[i + 1]],)) for i, b in enumerate(keys)]

    def decode(self, chunks: Sequence[Chunk]) -> np.ndarray:
        """All records of ``chunks``, in chunk order, as one ``(n, 100)`` array."""
        payloads = [p for c in chunks for p in c.parts]
        if self.fmt == "raw":
            total = sum(memoryview(p).nbytes for p in payloads)
            out = np.empty(total, dtype=np.uint8)
            pos = 0
            for p in payloads:
                n = memoryview(p).nbytes
                out[pos : pos + n] = np.frombuffer(p, dtype=np.uint8)
                pos += n
            return out.reshape(-1, RECORD_SIZE)
        batches = _decode_messages(payloads, _RECORD_SCHEMA)
        if not batches:
            return np.empty((0, RECORD_SIZE), dtype=np.uint8)
        return np.concatenate([fixed_binary_bytes(b.column(0)) for b in batches]).reshape(-1, RECORD_SIZE)


def _record_batch(records: np.ndarray) -> pa.RecordBatch:
    data = pa.py_buffer(np.ascontiguousarray(records))
    column = pa.FixedSizeBinaryArray.from_buffers(pa.binary(RECORD_SIZE), len(records), [None, data])
    return pa.record_batch([column], schema=_RECORD_SCHEMA)


# --- frames ----------------------------------------------------------------------------------------


def wire_schema(schema: pl.Schema) -> pa.Schema:
    """The Arrow schema a frame of ``schema`` travels with (categoricals as plain strings: IPC
    dictionary batches cannot be cut per bucket). Remembered per schema: working it out builds
    an empty frame, 0.2 ms, twice in every exchange read and write."""
    items = tuple(schema.items())
    try:
        return _wire_schema(items)
    except TypeError:  # a dtype that cannot be hashed: work it out every time
        return _wire_schema.__wrapped__(items)


@functools.lru_cache(maxsize=256)
def _wire_schema(items: tuple[tuple[str, Any], ...]) -> pa.Schema:
    return pl.DataFrame(schema=_plain(pl.Schema(items))).to_arrow().schema


def _plain(schema: pl.Schema) -> pl.Schema:
    return pl.Schema({k: (pl.String if isinstance(v, (pl.Categorical, pl.Enum)) else v) for k, v in schema.items()})


#: The first bytes of a condensed chunk (an Arrow IPC message starts with 0xFFFFFFFF instead);
#: eight, so that the messages behind it keep the 8-byte alignment Arrow reads in place.
CONDENSED = b"CRC1\0\0\0\0"
#: The schema metadata key under which a condensed chunk says how to expand it.
EXPAND_KEY = b"croupier.expand"
#: How a declared column comes from a condensed one: the value itself, the constant 1 (a row
#: counts once), whether it is not null (a count), or the value with nulls as 0 (a sum).
EXPANSIONS = ("value", "one", "valid", "or_zero")


@dataclass(frozen=True)
class Expansion:
    """How condensed rows become the declared ones: per declared column (in order), ``(name,
    how, source)``, ``how`` one of :data:`EXPANSIONS` and ``source`` a condensed column (None for
    ``one``). Travels as JSON in the condensed chunk's schema metadata."""

    columns: tuple[tuple[str, str, str | None], ...]

    def __post_init__(self) -> None:
        for name, how, source in self.columns:
            if how not in EXPANSIONS or (source is None) != (how == "one"):
                raise ValueError(f"column {name!r}: cannot expand {how!r} of {source!r}; expansions are {EXPANSIONS}")

    def to_json(self) -> bytes:
        return json.dumps([list(c) for c in self.columns]).encode()

    @classmethod
    def from_json(cls, text: bytes) -> Expansion:
        return cls(tuple((str(name), str(how), None if source is None else str(source)) for name, how, source in json.loads(text)))

    def apply(self, df: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
        """The declared frame of ``schema`` from the condensed ``df`` (columns named only as the
        source of ``value`` share its memory: no copy)."""
        if [name for name, _, _ in self.columns] != list(schema):
            raise ValueError(f"a condensed chunk expands to columns {[c[0] for c in self.columns]}, but the exchange declares {list(schema)}: the producer and the reader disagree on the stage's output")
        exprs = []
        for name, how, source in self.columns:
            if how == "one":
                e = pl.lit(1)
            elif how == "valid":
                e = pl.col(source).is_not_null()
            elif how == "or_zero":
                e = pl.col(source).fill_null(0)
            else:
                e = pl.col(source)
            exprs.append(e.cast(schema[name]).alias(name))
        return df.select(exprs)


@dataclass(frozen=True)
class Condensed:
    """A task's rows sent condensed into an exchange: ``frame`` has the columns ``expansion``
    reads, and :meth:`expanded` gives the ``schema`` the stage declares (what every reader sees)."""

    frame: pl.DataFrame
    expansion: Expansion
    schema: pl.Schema

    @property
    def height(self) -> int:
        return self.frame.height

    def expanded(self) -> pl.DataFrame:
        return self.expansion.apply(self.frame, self.schema)

    def expanded_bytes(self) -> int:
        """About the bytes of :meth:`expanded` (what its readers decode and work through), without
        building it: a fixed-width column its width a row (a sum widens its value), another what
        its condensed source takes."""
        rows = self.frame.height
        total = 0
        for name, _, source in self.expansion.columns:
            width = _WIDTHS.get(self.schema[name].base_type())
            total += rows * width if width is not None or source is None else self.frame[source].estimated_size()
        return total


#: Bytes a value of a fixed-width dtype takes (Polars' buffers; validity bits left out).
_WIDTHS: dict[Any, int] = {
    pl.Boolean: 1, pl.Int8: 1, pl.UInt8: 1, pl.Int16: 2, pl.UInt16: 2, pl.Int32: 4, pl.UInt32: 4, pl.Float32: 4, pl.Date: 4,
    pl.Int64: 8, pl.UInt64: 8, pl.Float64: 8, pl.Datetime: 8, pl.Duration: 8, pl.Time: 8, pl.Decimal: 16,
}  # fmt: skip


def _condensed_parts(chunk: Chunk) -> tuple[bytes, list[Buffer]] | None:
    """A condensed chunk's schema message and the buffers of its record batch messages; None
    for a plain chunk. (An IPC message is 0xFFFFFFFF, its metadata's length, the metadata; a
    schema message has no body.)"""
    if not chunk.parts:
        return None
    first = memoryview(chunk.parts[0])
    if bytes(first[: len(CONDENSED)]) != CONDENSED:
        return None
    start = len(CONDENSED)
    end = start + 8 + int.from_bytes(first[start + 4 : start + 8], "little")
    rest = [first[end:]] if first.nbytes > end else []
    return bytes(first[start:end]), rest + list(chunk.parts[1:])


def _expanded(header: bytes, bodies: list[Buffer], plain: pl.Schema, arrow_schema: pa.Schema) -> list[pa.RecordBatch]:
    """The declared rows of condensed chunks sharing the schema message ``header`` (its metadata
    says how to expand them), decoded together and expanded once: a consumer of a 12M-group
    group-by reads 200 chunks of a few thousand rows, and expanding each apart cost a fixed
    half millisecond, most of its read."""
    schema = pa.ipc.read_schema(pa.py_buffer(header))
    expansion = Expansion.from_json((schema.metadata or {})[EXPAND_KEY])
    batches = _decode_messages(bodies, schema)
    if not batches:
        return []
    df = pl.from_arrow(pa.Table.from_batches(batches).replace_schema_metadata(None), rechunk=False)
    assert isinstance(df, pl.DataFrame)
    out = expansion.apply(df, plain).to_arrow()
    return (out if out.schema == arrow_schema else out.cast(arrow_schema)).to_batches()


@dataclass(frozen=True)
class FrameCodec:
    """Query rows in exchange chunks: Arrow IPC record-batch messages, optionally compressed."""

    fmt: str = "arrow"

    def __post_init__(self) -> None:
        if self.fmt not in FRAME_FORMATS:
            raise ValueError(f"frame format must be one of {FRAME_FORMATS}, got {self.fmt!r}")

    def encode(self, df: pl.DataFrame, bucket: np.ndarray, buckets: int, origin: int, expansion: Expansion | None = None) -> list[Chunk]:
        """One chunk per non-empty bucket; row ``i`` goes to bucket ``bucket[i]`` (row order kept).
        With ``expansion``, ``df`` is condensed (see :class:`Condensed`) and each chunk carries its
        own schema and the expansion, behind :data:`CONDENSED`."""
        if df.height == 0:
            return []
        plain = _plain(df.schema)
        if plain != df.schema:
            df = df.cast(dict(plain))  # type: ignore[arg-type]
        if buckets > 1:
            # a stable sort of small integers: numpy's radix sort (7x faster than on int64)
            order = np.argsort(bucket.astype(np.uint16 if buckets <= 1 << 16 else np.uint32), kind="stable")
            df = contiguous(df)[order]  # from a scan's chunk per row group, a gather took 3x as long
            counts = np.bincount(bucket, minlength=buckets)
        else:
            counts = np.array([df.height])
        table = df.to_arrow()
        if expansion is not None:
            table = table.replace_schema_metadata({EXPAND_KEY: expansion.to_json()})
        starts = np.concatenate([[0], np.cumsum(counts)])
        keys = [int(b) for b in np.flatnonzero(counts)]
        batches = table.to_batches()
        if len(batches) == 1:  # the usual case: a batch's slices cost a third of a table's
            whole = batches[0]
            groups = [[whole.slice(int(starts[b]), int(counts[b]))] for b in keys]
        else:
            groups = [table.slice(int(starts[b]), int(counts[b])).to_batches() for b in keys]
        stream, cuts = _stream_cuts(table.schema, self.fmt, groups, table.nbytes)
        view = memoryview(stream)
        if expansion is not None:  # each chunk readable alone: the marker and the schema first
            head = CONDENSED + table.schema.serialize().to_pybytes()
            return [Chunk(b, origin, int(counts[b]), (head, view[cuts[i] : cuts[i + 1]])) for i, b in enumerate(keys)]
        return [Chunk(b, origin, int(counts[b]), (view[cuts[i] : cuts[i + 1]],)) for i, b in enumerate(keys)]

    def decode(self, chunks: Sequence[Chunk], schema: pl.Schema, combine: bool = True) -> pl.DataFrame:
        """All rows of ``chunks`` in chunk order, as a DataFrame of ``schema``; one chunk per
        column unless ``combine`` is False (a query's result handed to the user, which no
        operator runs on: copying it into one chunk took a tenth of an 11.7M-group group-by)."""
        plain = _plain(schema)
        arrow_schema = wire_schema(schema)
        batches: list[pa.RecordBatch] = []
        # runs of consecutive plain chunks, and of condensed ones of one schema, decode together
        run: list[Buffer] = []
        header: bytes | None = None  # the run's schema message: None for plain chunks
        for chunk in chunks:
            parts = _condensed_parts(chunk)
            this, payload = (None, list(chunk.parts)) if parts is None else parts
            if this != header:
                batches += _decode_messages(run, arrow_schema) if header is None else _expanded(header, run, plain, arrow_schema)
                run, header = [], this
            run += payload
        batches += _decode_messages(run, arrow_schema) if header is None else _expanded(header, run, plain, arrow_schema)
        if not batches:
            return pl.DataFrame(schema=schema)
        # one contiguous chunk per column: a broadcast read gathers every bucket of every producer
        # (12 producers x 128 buckets = 1,536 batches in TPC-H Q12), and Polars keeps each batch as
        # a chunk of its own, which made the join that followed 25x slower (82 ms instead of 3);
        # even 16 chunks of 4 MB made a gather 4x and a join 2.5x slower than one chunk, while the
        # copy costs about 10 ms per 60 MB in memory a worker keeps (see compute.worker)
        table = pa.Table.from_batches(batches, arrow_schema)
        df = pl.from_arrow(table.combine_chunks() if combine and len(batches) > 1 else table, rechunk=False)
        assert isinstance(df, pl.DataFrame)
        if plain != schema:
            df = df.cast(dict(schema))  # type: ignore[arg-type]
        return df
