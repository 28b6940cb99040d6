"""Scans: finding input objects, cutting them into splits, and reading one split in a task.

* Parquet: the driver reads each footer, prunes row groups whose min/max statistics cannot match
  the pushed-down predicate, and groups the rest into splits. A task fetches only the column chunks
  of the needed columns, as concurrent ranged GETs (Lambada §4), then decodes them; a local
  folder's file is decoded in place (Polars reads the chunks it needs from it, no copy).
* CSV: byte ranges aligned to line boundaries: a line belongs to the split holding its first byte.
  Quoted fields must not contain line breaks.
* gensort: byte ranges on 100-byte record boundaries; columns ``key`` (10 bytes) and ``payload``.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import os
import tempfile
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from croupier.errors import CroupierError, InputError
from croupier.expr import Binary, Cast, Col, Expr, IsIn, Lit, Unary, may_match
from croupier.expr.analysis import selectivity
from croupier.model.profile import signed_kind
from croupier.ops.formats import is_hidden
from croupier.storage import Location, ObjectInfo, Store, parse_location
from croupier.storage.commit import read_parts
from croupier.storage.local import file_version
from croupier.storage.rangefile import RangeFile

FORMATS = ("parquet", "csv", "gensort")
RECORD = 100
#: Byte gap up to which neighbouring column chunks are fetched as one request.
COALESCE_GAP = 64 * 1024
#: Bytes read past a CSV split's end to find the end of its last line (more is read if needed).
LOOKAHEAD = 64 * 1024
#: CSV rows the schema is inferred from.
INFER_ROWS = 10_000


@dataclass(frozen=True)
class CsvOptions:
    """How CSV files are laid out."""

    separator: str = ","
    has_header: bool = True
    quote_char: str | None = '"'
    null_values: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScanSpec:
    """What to scan: ``url`` (a file, a prefix/folder, or a glob), the format, and pushdowns.

    ``columns`` is the projection (None: all); ``predicate`` prunes row groups and filters rows.
    """

    url: str
    format: str
    columns: tuple[str, ...] | None = None
    predicate: Expr | None = None
    csv: CsvOptions = field(default_factory=CsvOptions)
    #: the compression of its (first) file's data, Parquet's "snappy", "zstd", ... ("": not known)
    codec: str = ""

    @property
    def cost_kind(self) -> str:
        """The phase kind of reading it: ``read:<format>[-<codec>]`` signed with the columns and
        predicate (what decoding costs depends on them; not the location: the same scan of a
        copy, or of another scale factor, costs the same per byte). The codec is part of the kind
        because decoding cost depends on it: Polars decodes a zstd-compressed TPC-H lineitem file
        in 1.8x the time of the same file in snappy, and a calibration on zstd priced snappy
        reads 1.5x too high. Planner and tasks name the same kind (the codec is read with the
        schema, from the first file's footer, when the scan is made)."""
        columns = ",".join(self.columns) if self.columns is not None else "*"
        kind = f"read:{self.format}-{self.codec}" if self.codec else f"read:{self.format}"
        return signed_kind(kind, f"{columns} where {self.predicate.show() if self.predicate is not None else 'true'}")


@dataclass(frozen=True)
class Split:
    """One task's share of a scan: part of one object."""

    base: str
    key: str
    size: int
    row_groups: tuple[int, ...] = ()
    ranges: tuple[tuple[int, int], ...] = ()
    start: int = 0
    end: int = 0

    @property
    def where(self) -> str:
        return str(parse_location(self.base).join(self.key))


def _has_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


def input_location(url: str) -> Location:
    """The location a scan of ``url`` reads: the folder of a glob, else the URL's own location
    (what an output must not overlap)."""
    location = parse_location(url)
    return location.parent if _has_glob(location.name) else location


def resolve(url: str, open_store: Callable[[str], Store]) -> tuple[str, list[ObjectInfo]]:
    """The store URL and the data objects ``url`` names, in order.

    Names are literal: an object whose name is exactly the URL's last segment is that one file
    (unless the URL ends in ``/``); else a last segment with ``*``, ``?`` or ``[`` is a pattern
    matched against the objects of its folder; else the URL is a folder/prefix, read as a
    Croupier output is read (by its manifest, see :func:`croupier.storage.commit.read_parts`).
    """
    location = parse_location(url)  # validates the URL with a clear error
    name, parent = location.name, location.parent
    if name and not url.endswith("/"):
        store = open_store(str(parent))
        if store.exists(name):
            return str(parent), [store.head(name)]
        if _has_glob(name):
            objects = [o for o in store.list() if "/" not in o.key and fnmatch.fnmatchcase(o.key, name) and not is_hidden(o.key)]
            if not objects:
                raise InputError(f"no input objects match {url}; check the pattern")
            return str(parent), sorted(objects, key=lambda o: o.key)
    objects = read_parts(open_store(str(location)))
    if not objects:
        raise InputError(f"no input objects under {url}; check the path (and the endpoint for s3:// URLs)")
    return str(location), objects


# --- schemas -------------------------------------------------------------------------------


def gensort_schema() -> pl.Schema:
    """gensort records as rows: the 10-byte ``key`` and the 90-byte ``payload`` (TeraSort Parquet's names)."""
    return pl.Schema({"key": pl.Binary, "payload": pl.Binary})


def parquet_schema(store: Store, obj: ObjectInfo) -> pl.Schema:
    """Schema of one Parquet object, from its footer."""
    return _footer_schema(_footer(store, obj))


def _footer_schema(meta: pq.FileMetaData) -> pl.Schema:
    return pl.Schema(pl.from_arrow(meta.schema.to_arrow_schema().empty_table()).schema)  # type: ignore[union-attr]


def parquet_facts(store: Store, objects: Sequence[ObjectInfo]) -> tuple[pl.Schema, str]:
    """The schema of a Parquet scan's first object, and its data's compression (:func:`parquet_codec`):
    that of the first object with any row groups (an empty part file, as Spark and Polars write,
    says nothing of it); "" when none has any."""
    meta = _footer(store, objects[0])
    schema = _footer_schema(meta)
    for obj in objects:
        codec = parquet_codec(meta if obj is objects[0] else _footer(store, obj))
        if codec:
            return schema, codec
    return schema, ""


def csv_schema(store: Store, obj: ObjectInfo, options: CsvOptions) -> pl.Schema:
    """Schema of a CSV object inferred from its first rows (up to 1 MiB)."""
    head = bytes(store.get_range(obj.key, 0, min(obj.size, 1 << 20)))
    if obj.size > len(head):
        head = head[: head.rfind(b"\n") + 1]
    ends = np.flatnonzero(np.frombuffer(head, dtype=np.uint8) == 10)
    if len(ends) > INFER_ROWS:  # infer from the first rows only; bad rows further on are the tasks' to report
        head = head[: int(ends[INFER_ROWS]) + 1]
    try:
        df = pl.read_csv(io.BytesIO(head), has_header=options.has_header, separator=options.separator, quote_char=options.quote_char, infer_schema_length=INFER_ROWS, null_values=list(options.null_values) or None)
    except Exception as exc:  # noqa: BLE001 - polars raises many kinds; all mean "bad CSV"
        raise InputError(f"{store.url}/{obj.key}: cannot read as CSV ({exc})") from exc
    return df.schema


def read_footers(store: Store, objects: Sequence[ObjectInfo], threads: int = 16) -> dict[str, pq.FileMetaData]:
    """The footers of Parquet ``objects`` by key, read concurrently (one round trip of latency
    for many files on object storage, instead of one per file)."""
    if len(objects) <= 1:
        return {o.key: _footer(store, o) for o in objects}
    with ThreadPoolExecutor(max_workers=min(threads, len(objects)), thread_name_prefix="croupier-footer") as pool:
        return dict(zip((o.key for o in objects), pool.map(lambda o: _footer(store, o), objects)))


#: Parquet footers read by this process, by (store URL, key, size, version): a session's queries
#: read the same files again and again, and each run read every footer of every table it scans
#: before its first task could start (TPC-H q8: 7 tables, 10 ms here; on object storage a round
#: trip per table). Only objects whose listing gave a version (a local file's modification time,
#: inode and size; an S3 ETag) are remembered, so a replaced file is read again.
_FOOTERS: OrderedDict[tuple[str, str, int, str], pq.FileMetaData] = OrderedDict()
_FOOTERS_LOCK = threading.Lock()
#: Bytes of footers remembered at most (their serialised size; a wide table's with many row groups
#: takes a megabyte, TPC-H's a few KB).
FOOTERS_MAX_BYTES = 64 << 20
_footer_bytes = 0


def _footer(store: Store, obj: ObjectInfo) -> pq.FileMetaData:
    """The footer of ``obj``: remembered when its version is known (see :data:`_FOOTERS`)."""

    def parse() -> pq.FileMetaData:
        try:
            return pq.read_metadata(RangeFile(store, obj.key, obj.size))
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{store.url}/{obj.key}: not a valid Parquet file ({exc})") from exc

    return _remembered((store.url, obj.key, obj.size, obj.version) if obj.version else None, parse)


def _remembered(key: tuple[str, str, int, str] | None, parse: Callable[[], pq.FileMetaData]) -> pq.FileMetaData:
    """The footer kept under ``key`` in :data:`_FOOTERS`, else ``parse()``'s, kept (unless the
    key is None: an object of unknown version)."""
    if key is not None:
        with _FOOTERS_LOCK:
            meta = _FOOTERS.get(key)
            if meta is not None:
                _FOOTERS.move_to_end(key)
                return meta
    meta = parse()
    if key is not None:
        _remember(key, meta)
    return meta


def _remember(key: tuple[str, str, int, str], meta: pq.FileMetaData) -> None:
    """Keep ``meta`` in :data:`_FOOTERS`, dropping the least recently used beyond the byte bound."""
    global _footer_bytes
    with _FOOTERS_LOCK:
        if key in _FOOTERS:
            return
        _FOOTERS[key] = meta
        _footer_bytes += meta.serialized_size
        while _footer_bytes > FOOTERS_MAX_BYTES and _FOOTERS:
            _footer_bytes -= _FOOTERS.popitem(last=False)[1].serialized_size


# --- planning splits -----------------------------------------------------------------------


def _chunk_range(column: Any) -> tuple[int, int]:
    """Byte range of one column chunk in its file: from its first page (the dictionary's when it
    has one) on. An offset of 0 is none (the file starts with its magic bytes): pyarrow writes
    an empty row group's data page offset as 0 and its dictionary page where the bytes are."""
    offsets = [o for o in (column.data_page_offset, column.dictionary_page_offset if column.has_dictionary_page else None) if o]
    start = min(offsets) if offsets else 0
    return start, start + column.total_compressed_size


def leaf_columns(meta: pq.FileMetaData, columns: Sequence[str] | None) -> list[int]:
    """Indices of the Parquet leaf columns that hold top-level ``columns`` (all when None): a
    flat column is one leaf (its path is its name); a struct, list or map is every leaf whose
    path starts with its name and a dot."""
    if columns is None:
        return list(range(meta.num_columns))
    wanted = set(columns)
    out = []
    for i in range(meta.num_columns):
        path = meta.schema.column(i).path
        if path in wanted or any(path.startswith(f"{c}.") for c in wanted):
            out.append(i)
    return out


def chunk_ranges(meta: pq.FileMetaData, row_groups: Sequence[int], columns: Sequence[str] | None) -> list[tuple[int, int]]:
    """Byte ranges of the column chunks of ``columns`` in ``row_groups``: what decoding them reads."""
    leaves = leaf_columns(meta, columns)
    return [_chunk_range(meta.row_group(r).column(i)) for r in row_groups for i in leaves]


def _coalesce(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start - out[-1][1] <= COALESCE_GAP:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _row_group_stats(rg: Any, names: dict[str, int], wanted: set[str]) -> dict[str, tuple[Any, Any]]:
    stats: dict[str, tuple[Any, Any]] = {}
    for name in wanted:
        index = names.get(name)
        if index is None:
            continue
        s = rg.column(index).statistics
        if s is not None and s.has_min_max:
            stats[name] = (s.min, s.max)
    return stats


#: Bytes per value in memory of Parquet's fixed-width physical types.
_FIXED_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}
#: Bytes per value of a decoded variable-width value beside its characters (a string view).
_VIEW_WIDTH = 16


def decoded_bytes(chunk: pq.ColumnChunkMetaData, column: pq.ColumnSchema) -> int:
    """About the bytes one column chunk takes once decoded: its values times their width, or for
    strings and binaries a view per value, at least the chunk's encoded size. (The encoded size
    alone, before compression, is far smaller for dictionary- or RLE-encoded columns: TPC-H
    lineitem's four q3 columns take 89 MiB encoded and 160 MiB decoded at SF 1.)"""
    kind = chunk.physical_type
    if kind == "FIXED_LEN_BYTE_ARRAY":
        return chunk.num_values * max(1, column.length or 1)
    if kind in _FIXED_WIDTH:
        return chunk.num_values * _FIXED_WIDTH[kind]
    return max(chunk.total_uncompressed_size, chunk.num_values * _VIEW_WIDTH)


def parquet_splits(
    spec: ScanSpec, base: str, store: Store, objects: list[ObjectInfo], parts: int, smallest: int, largest: int, footers: Mapping[str, pq.FileMetaData] | None = None
) -> tuple[list[Split], dict[str, int]]:
    """Row-group splits of the Parquet ``objects`` after pruning, about ``parts`` of them; and counts.

    Split size aims at (needed bytes / parts) within [smallest, largest]; a split never crosses
    files. Needed bytes are the column chunks of the projected columns in unpruned row groups
    (``bytes_decoded``: about what decoding them yields in memory, see :func:`decoded_bytes`);
    ``rows_read`` are their rows, ``rows_kept`` a guess of how many pass the predicate (from the
    row groups' statistics, :func:`croupier.expr.analysis.selectivity`).
    ``footers``: the objects' footers by key, already read (else each is read here, in turn).
    """
    counts = {"row_groups": 0, "row_groups_pruned": 0, "bytes_needed": 0, "bytes_decoded": 0, "rows_read": 0, "rows_kept": 0}
    wanted = spec.predicate.columns() if spec.predicate is not None else set()
    kept: list[tuple[ObjectInfo, int, list[tuple[int, int]]]] = []
    for obj in objects:
        meta = footers[obj.key] if footers is not None and obj.key in footers else _footer(store, obj)
        names = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
        columns = leaf_columns(meta, spec.columns)
        for r in range(meta.num_row_groups):
            rg = meta.row_group(r)
            counts["row_groups"] += 1
            share = 1.0
            if spec.predicate is not None:
                stats = _row_group_stats(rg, names, wanted)
                if not may_match(spec.predicate, stats):
                    counts["row_groups_pruned"] += 1
                    continue
                share = selectivity(spec.predicate, stats)
            counts["rows_read"] += rg.num_rows
            counts["rows_kept"] += round(rg.num_rows * share)
            kept.append((obj, r, [_chunk_range(rg.column(i)) for i in columns]))
            counts["bytes_decoded"] += sum(decoded_bytes(rg.column(i), meta.schema.column(i)) for i in columns)
    counts["bytes_needed"] = sum(e - s for _, _, chunk in kept for s, e in chunk)
    target = min(largest, max(smallest, counts["bytes_needed"] // max(1, parts)))
    splits: list[Split] = []
    group: list[int] = []
    ranges: list[tuple[int, int]] = []
    size = 0
    current: ObjectInfo | None = None
    for obj, r, chunk in kept:
        nbytes = sum(e - s for s, e in chunk)
        if group and current is not None and (obj.key != current.key or size + nbytes > target):
            splits.append(Split(base, current.key, current.size, tuple(group), tuple(_coalesce(ranges))))
            group, ranges, size = [], [], 0
        current = obj
        group.append(r)
        ranges += chunk
        size += nbytes
    if group and current is not None:
        splits.append(Split(base, current.key, current.size, tuple(group), tuple(_coalesce(ranges))))
    return splits, counts


def parquet_codec(meta: pq.FileMetaData) -> str:
    """The compression most of a file's data uses (by compressed bytes of its first row group's
    column chunks), lowercased as pyarrow names it ("snappy", "zstd", "lz4", "gzip",
    "uncompressed", ...); "" for a file without row groups."""
    if not meta.num_row_groups:
        return ""
    rg = meta.row_group(0)
    sizes: dict[str, int] = {}
    for i in range(meta.num_columns):
        chunk = rg.column(i)
        codec = str(chunk.compression).lower()
        sizes[codec] = sizes.get(codec, 0) + chunk.total_compressed_size
    return max(sizes, key=lambda c: sizes[c]) if sizes else ""


def byte_splits(base: str, objects: list[ObjectInfo], target: int, align: int = 1) -> list[Split]:
    """Contiguous byte ranges of about ``target`` bytes (multiples of ``align``)."""
    splits = []
    step = max(align, target // align * align)
    for obj in objects:
        for start in range(0, obj.size, step):
            splits.append(Split(base, obj.key, obj.size, start=start, end=min(obj.size, start + step)))
    return splits


def check_gensort(base: str, objects: list[ObjectInfo]) -> None:
    """gensort objects must hold whole 100-byte records, and not be named like other files."""
    from croupier.ops.formats import check_record_name

    for obj in objects:
        try:
            check_record_name(obj.key)
        except InputError as exc:
            raise InputError(f"{base}/{exc}") from None
        if obj.size % RECORD:
            raise InputError(f"{base}/{obj.key}: size {obj.size:,} is not a multiple of {RECORD}; a truncated or non-gensort file")


# --- reading one split (in a task) ------------------------------------------------------------


#: Whether a process can open a file it holds by descriptor as a path (Linux' /proc/self/fd), so
#: that a decoder reads the very file the store opened.
_PROC_FD = os.path.isdir("/proc/self/fd")
#: Bytes at the end of a Parquet object fetched with its column chunks: the footer (and the page
#: indexes written before it) usually fit; a longer footer is fetched whole in a second request.
TAIL = 64 * 1024


@contextmanager
def _sparse_copy(store: Store, split: Split, columns: Sequence[str]) -> Iterator[tuple[str, pq.FileMetaData]]:
    """A local sparse file of ``split``'s object holding only what reading ``columns`` of the
    split needs, at their offsets (everything else is a hole), its path and its footer.

    The column chunks the driver planned and the footer are fetched as concurrent ranged GETs
    through ``store`` (counted, retried, prefetched like every read); then the footer says which
    chunks decoding really reads, and any the plan missed are fetched too, so the decoder never
    reads a hole. Why a file: Polars' Parquet decoder is 2-8x faster than Arrow's followed by a
    conversion (strings above all), and it reads only the parts of a local file it needs, where
    a Python file object is read whole."""
    tail = (max(0, split.size - TAIL), split.size)
    fetched = _coalesce(list(split.ranges) + [tail])
    chunks = list(zip(fetched, store.get_ranges(split.key, fetched)))
    (last_start, _), last = chunks[-1]
    footer = int.from_bytes(bytes(last[-8:-4]), "little") + 8 if len(last) >= 8 else 0
    if last_start > split.size - footer >= 0:  # a footer longer than TAIL: the rest of it
        extra = (split.size - footer, last_start)
        chunks.append((extra, store.get_range(split.key, *extra)))
    with _scratch(split) as (fd, path):
        for start, data in ((s, d) for (s, _), d in chunks):
            _write_at(fd, data, start, split)
        have = [r for r, _ in chunks]
        del chunks, last  # the file holds them now
        meta = _planned_row_groups(split, pq.read_metadata(path))  # a bad file: read_split names it
        missing = _coalesce([r for r in chunk_ranges(meta, split.row_groups, columns) if not any(s <= r[0] and r[1] <= e for s, e in have)])
        for (start, _), data in zip(missing, store.get_ranges(split.key, missing)):
            _write_at(fd, data, start, split)
        yield path, meta


def _planned_row_groups(split: Split, meta: pq.FileMetaData) -> pq.FileMetaData:
    """``meta``, refused when the file lacks a row group the plan reads (replaced since)."""
    if any(r >= meta.num_row_groups for r in split.row_groups):
        raise InputError(f"{split.where}: has {meta.num_row_groups} row groups, but the plan read row group {max(split.row_groups)} (was the file replaced while the query ran?)")
    return meta


@contextmanager
def _scratch(split: Split) -> Iterator[tuple[int, str]]:
    """An empty file of the split's object's size (all hole) and a path to open it by, gone on
    exit. In memory where the system can (Linux: ``memfd_create``, freed with the process even
    when it is killed, and not bound by a /dev/shm mount's size), else a temporary file."""
    try:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("croupier-split", os.MFD_CLOEXEC)
            path = f"/proc/self/fd/{fd}"
        else:  # pragma: no cover - not Linux
            fd, path = tempfile.mkstemp(prefix="croupier-split-", suffix=".parquet")
    except OSError as exc:  # out of descriptors or space: not the input's fault, tried again
        raise CroupierError(f"cannot make room to decode {split.where} ({exc})") from exc
    try:
        try:
            os.ftruncate(fd, split.size)
        except OSError as exc:
            raise CroupierError(f"cannot make room to decode {split.where} ({exc})") from exc
        yield fd, path
    finally:
        os.close(fd)
        if not path.startswith("/proc/"):  # pragma: no cover - not Linux
            os.unlink(path)


def _write_at(fd: int, data: Any, offset: int, split: Split) -> None:
    """Write all of ``data`` at ``offset`` (``pwrite`` may write less than asked). Out of memory
    or space is not the input's fault: raised so that the task is tried again, not as bad input."""
    view = memoryview(data).cast("B")
    try:
        while view:
            written = os.pwrite(fd, view, offset)
            if written <= 0:
                raise OSError(f"wrote nothing at offset {offset}")
            view, offset = view[written:], offset + written
    except OSError as exc:
        raise CroupierError(f"cannot hold the bytes of {split.where} to decode them ({exc})") from exc


def _row_runs(meta: pq.FileMetaData, row_groups: Sequence[int]) -> list[tuple[int, int]]:
    """(first row, rows) of each run of consecutive row groups in ``row_groups``."""
    starts = np.cumsum([0] + [meta.row_group(r).num_rows for r in range(meta.num_row_groups)])
    runs: list[tuple[int, int]] = []
    for r in sorted(row_groups):
        first, rows = int(starts[r]), int(starts[r + 1] - starts[r])
        if runs and sum(runs[-1]) == first:
            runs[-1] = (runs[-1][0], runs[-1][1] + rows)
        else:
            runs.append((first, rows))
    return runs


#: Expression nodes a predicate evaluated while decoding may hold (see :func:`filters_in_read`).
_DECODER_NODES = (Col, Lit, Binary, Unary, IsIn, Cast)


#: Largest share of a scan's rows its predicate may keep (guessed from the row groups' statistics)
#: for the read to evaluate it while decoding (:func:`filters_in_read`).
IN_READ_SHARE = 0.5


def filters_in_read(spec: ScanSpec, kept: float = 0.0) -> bool:
    """Whether reading a split of ``spec`` should keep only the rows its predicate accepts, rather
    than an operator after the read: Parquet, a predicate of comparisons, logic and set
    membership, and at most :data:`IN_READ_SHARE` of the rows ``kept`` (a guess). Polars' decoder
    then evaluates it on the predicate's columns first and decodes the others for the rows kept:
    a TPC-H Q19 row group of lineitem (string equalities, 3% kept) 5.9 ms -> 3.6, Q12's 3.1 -> 2.2.
    But a ``LIKE '%green%'`` took 12 ms instead of 8, so string functions stay after the read; and
    where most rows pass, an operator in the stage's one lazy query filters them as they stream
    into what follows (Q1's 98%: 6.6 ms to read three row groups, 11.2 filtering while decoding)."""
    if spec.format != "parquet" or spec.predicate is None or kept > IN_READ_SHARE:
        return False
    return not spec.predicate.has_subquery() and _decoder_only(spec.predicate)


def _decoder_only(e: Expr) -> bool:
    """``e`` holds only :data:`_DECODER_NODES`, and no cast that can fail (a strict one: its error
    is the query's, which an operator reports as such, not a file that cannot be read)."""
    if isinstance(e, Cast) and e.strict:
        return False
    return isinstance(e, _DECODER_NODES) and all(_decoder_only(c) for c in e.children())


def _polars_decode(path: str, meta: pq.FileMetaData, row_groups: Sequence[int], schema: pl.Schema, predicate: Expr | None = None) -> pl.DataFrame | None:
    """The split's rows decoded by Polars (only those ``predicate`` accepts, when given), or None
    where Polars would not give exactly what the scan's schema says (a type it maps differently
    from Arrow, a row count that is off): the caller then decodes with Arrow, the reference the
    schema was taken from."""
    columns = list(schema)
    if not columns:
        return None  # no columns: a frame of none has no rows in Polars
    scan = pl.scan_parquet(path, hive_partitioning=False, glob=False, cache=False).select(columns)
    try:
        # each run on its own: concatenated lazily, Polars would share one scan of every row group
        # between them (common subplans), reading the holes between the runs
        runs = [scan.slice(first, rows) for first, rows in _row_runs(meta, row_groups)]
        parts = [(run if predicate is None else run.filter(predicate.to_polars())).collect() for run in runs]
        df = pl.concat(parts) if len(parts) > 1 else parts[0]
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException):
        return None
    # the types checked on the result, not asked of the scan first: that parsed the footer once
    # more, 9% of reading a TPC-H split (a type Polars maps otherwise is rare: decoded twice then)
    if df.schema != schema:
        return None
    # one chunk per row group, not made contiguous here: Polars' lazy engine, which runs the
    # operators, takes chunks as they are, and the exchange's bucket gather makes its input
    # contiguous first (croupier.ops.partition.contiguous)
    return df if predicate is not None or df.height == sum(meta.row_group(r).num_rows for r in row_groups) else None


def projected(spec: ScanSpec, file_schema: pl.Schema) -> pl.Schema:
    """The scan's output schema: the file schema cut to the projection."""
    if spec.columns is None:
        return file_schema
    return pl.Schema({c: file_schema[c] for c in spec.columns})


def read_split(store: Store, spec: ScanSpec, split: Split, file_schema: pl.Schema, filters: bool = False) -> pl.DataFrame:
    """Read one split as a DataFrame of the projected columns (errors name the object); the empty
    split (no key) reads nothing. ``filters``: keep only the rows ``spec.predicate`` accepts,
    evaluated while decoding (where :func:`filters_in_read` allows; else every row is kept)."""
    return read_split_decoded(store, spec, split, file_schema, filters)[0]


def read_split_decoded(store: Store, spec: ScanSpec, split: Split, file_schema: pl.Schema, filters: bool = False) -> tuple[pl.DataFrame, int]:
    """:func:`read_split`, and the rows it decoded: more than it returns where it filtered while
    decoding, which is what decoding cost depends on."""
    if not split.key:
        return pl.DataFrame(schema=projected(spec, file_schema)), 0
    try:
        rows = None
        if spec.format == "parquet":
            df, rows = _read_parquet(store, split, projected(spec, file_schema), spec.predicate if filters and filters_in_read(spec) else None)
        elif spec.format == "csv":
            df = _read_csv(store, spec, split, file_schema)
        else:
            df = _read_gensort(store, split)
        df = _in_order(df, list(projected(spec, file_schema)))
        return df, df.height if rows is None else rows
    except InputError:
        raise
    except (pa.ArrowInvalid, pl.exceptions.PolarsError, OSError, ValueError) as exc:
        where = split.where + (f" bytes {split.start:,}-{split.end:,}" if spec.format != "parquet" else "")
        raise InputError(f"{where}: cannot read as {spec.format} ({exc})") from exc


@contextmanager
def _in_place(store: Store, split: Split, fd: int) -> Iterator[tuple[str, pq.FileMetaData]]:
    """A path to ``split``'s object as the local file it already is (``fd``, opened by the store),
    and its footer: Polars reads the column chunks it needs straight from it, where copying them
    into a scratch file first (:func:`_sparse_copy`) took a quarter of reading TPC-H's lineitem.
    The footer and the decoder read the one opened file, even if the object is replaced meanwhile;
    a file whose size is not the one planned was replaced since, and is refused. (Polars maps the
    file: one truncated in place by another program while it is decoded ends the worker, and the
    task's retry refuses it by its size; Croupier's own writes replace files whole.)"""
    try:
        st = os.fstat(fd)
        if st.st_size != split.size:
            raise InputError(f"{split.where}: is {st.st_size:,} bytes, but was {split.size:,} when the query was planned (was the file replaced while the query ran?)")
        path = f"/proc/self/fd/{fd}"  # the opened file itself (only where /proc is: _PROC_FD)
        meta = _planned_row_groups(split, _opened_footer(store, split, path, st))
        yield path, meta
        store.record_local_read(sum(e - s for s, e in split.ranges))
    finally:
        os.close(fd)


def _opened_footer(store: Store, split: Split, path: str, st: os.stat_result) -> pq.FileMetaData:
    """The footer of the opened file at ``path`` (``st``: its status), the object ``split`` reads,
    remembered in :data:`_FOOTERS` by its modification time, inode and size, and its change time,
    which no program can set back (a file rewritten in place with its old modification time
    restored, as ``cp -p`` does, is parsed again). Parsing it took 6% of reading TPC-H's splits,
    and a session's tasks read the same files again and again. (A bad file raises: read_split
    names it.)"""
    version = f"{file_version(st)}-{st.st_ctime_ns:x}"
    return _remembered((store.url, split.key, split.size, version), lambda: pq.read_metadata(path))


def _read_parquet(store: Store, split: Split, schema: pl.Schema, predicate: Expr | None = None) -> tuple[pl.DataFrame, int]:
    """The split's rows (those ``predicate`` accepts, when given) as a frame of ``schema``, and
    the rows decoded (its row groups' rows)."""
    columns = list(schema)
    # in place where the decoder can open the very file the store opened (Linux' /proc/self/fd);
    # elsewhere the file's name could name a replacement by the time it is decoded
    fd = store.open_local(split.key) if _PROC_FD else None
    source = _sparse_copy(store, split, columns) if fd is None else _in_place(store, split, fd)
    with source as (path, meta):
        names = meta.schema.to_arrow_schema().names
        missing = [c for c in columns if c not in names]
        if missing:
            raise InputError(f"{split.where}: has no column(s) {missing}; its columns are {names} (schemas differ across files?)")
        rows = sum(meta.row_group(r).num_rows for r in split.row_groups)
        df = _polars_decode(path, meta, split.row_groups, schema, predicate)
        if df is None:
            pf = pq.ParquetFile(path, pre_buffer=False)
            frame = pl.from_arrow(pf.read_row_groups(sorted(split.row_groups), columns=columns, use_threads=False))
            assert isinstance(frame, pl.DataFrame)
            frame = _conform(frame, schema, split.where)
            return (frame if predicate is None else frame.filter(predicate.to_polars())), rows
    return _conform(df, schema, split.where), rows


def _conform(df: pl.DataFrame, schema: pl.Schema, where: str) -> pl.DataFrame:
    """Check ``df`` has ``schema``'s types (files of one scan must agree)."""
    for name, dtype in schema.items():
        if df.schema[name] != dtype:
            raise InputError(f"{where}: column {name!r} is {df.schema[name]}, but the first file has {dtype}; schemas differ across files")
    return _in_order(df, list(schema))


def _in_order(df: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """``df`` cut to ``columns`` in that order; ``df`` itself when it already is (a select goes
    through Polars' lazy engine: 0.2 ms, twice per split, 10% of reading TPC-H's)."""
    return df if df.columns == columns else df.select(columns)


def _csv_bounds(store: Store, split: Split) -> tuple[bytes, int]:
    """The bytes of the lines that start inside [start, end), and where they start in the file."""
    lo = max(0, split.start - 1)
    hi = min(split.size, split.end + LOOKAHEAD)
    data = bytes(store.get_range(split.key, lo, hi))
    if split.start == 0:
        first = 0
    else:
        nl = data.find(b"\n")
        if nl < 0 or lo + nl + 1 >= split.end:
            return b"", split.start  # the first line start after lo lies beyond this split
        first = nl + 1
    end_rel = split.end - 1 - lo
    while True:
        nl = data.find(b"\n", max(first, end_rel))
        if nl >= 0 or hi >= split.size:
            return (data[first : nl + 1] if nl >= 0 else data[first:]), lo + first
        more = min(split.size, hi + 4 * (hi - lo))
        data += bytes(store.get_range(split.key, hi, more))
        hi = more


def _read_csv(store: Store, spec: ScanSpec, split: Split, file_schema: pl.Schema) -> pl.DataFrame:
    data, offset = _csv_bounds(store, split)
    options = spec.csv
    if split.start == 0 and options.has_header:
        cut = data.find(b"\n") + 1 if b"\n" in data else len(data)
        data, offset = data[cut:], offset + cut
    if not data.strip():
        return pl.DataFrame(schema=file_schema)
    try:
        df = _parse_csv(data, options, file_schema)
    except pl.exceptions.PolarsError as exc:
        problem = _diagnose_csv(data, options, file_schema)
        if problem is None:
            raise
        row, text = problem
        raise InputError(f"{split.where}: row starting at byte {offset + row:,}: {text}") from exc
    # Polars fills the missing fields of a short row with nulls; a short row always leaves the
    # last column null, so only then are the rows counted (with the csv module: quotes respected).
    if len(df) and df[df.columns[-1]].null_count():
        short = _short_row(data, options, file_schema)
        if short is not None:
            row, text = short
            raise InputError(f"{split.where}: row starting at byte {offset + row:,}: {text}")
    return df


def _parse_csv(data: bytes, options: CsvOptions, schema: pl.Schema) -> pl.DataFrame:
    return pl.read_csv(
        io.BytesIO(data),
        has_header=False,
        new_columns=list(schema),
        schema=schema,
        separator=options.separator,
        quote_char=options.quote_char,
        null_values=list(options.null_values) or None,
    )


def _short_row(data: bytes, options: CsvOptions, schema: pl.Schema) -> tuple[int, str] | None:
    """(byte offset in ``data``, what is wrong) of the first row with fewer fields than ``schema``."""
    starts = np.concatenate([[0], np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1])
    rows = csv.reader(io.StringIO(data.decode("utf-8", errors="replace")), delimiter=options.separator, quotechar=options.quote_char or '"')
    for i, fields in enumerate(rows):
        if fields and len(fields) < len(schema):
            return int(starts[min(i, len(starts) - 1)]), f"{len(fields)} fields, expected {len(schema)} ({', '.join(schema)})"
    return None


def _diagnose_csv(data: bytes, options: CsvOptions, schema: pl.Schema) -> tuple[int, str] | None:
    """(byte offset in ``data`` of the first bad row, what is wrong with it), or None if no row is."""
    starts = np.concatenate([[0], np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1])
    rows = csv.reader(io.StringIO(data.decode("utf-8", errors="replace")), delimiter=options.separator, quotechar=options.quote_char or '"')
    for i, fields in enumerate(rows):
        if fields and len(fields) != len(schema):
            return int(starts[min(i, len(starts) - 1)]), f"{len(fields)} fields, expected {len(schema)} ({', '.join(schema)})"
    text = _parse_csv(data, options, pl.Schema({name: pl.String for name in schema}))
    nulls = list(options.null_values)
    for name, dtype in schema.items():
        if dtype == pl.String:
            continue
        raw = text[name]
        bad = raw.cast(dtype, strict=False).is_null() & raw.is_not_null() & ~raw.is_in(nulls)
        hits = bad.arg_true()
        if len(hits):
            i = int(hits[0])
            return int(starts[i]), f"value {raw[i]!r} in column {name!r} is not a valid {dtype}"
    return None


def _read_gensort(store: Store, split: Split) -> pl.DataFrame:
    buf = store.get_range(split.key, split.start, split.end)
    raw = np.frombuffer(memoryview(buf), dtype=np.uint8)
    if raw.size % RECORD:
        raise InputError(f"{split.where}: bytes {split.start:,}-{split.end:,} do not hold whole {RECORD}-byte records")
    records = raw.reshape(-1, RECORD)
    keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(10), len(records), [None, pa.py_buffer(np.ascontiguousarray(records[:, :10]).tobytes())])
    values = pa.FixedSizeBinaryArray.from_buffers(pa.binary(90), len(records), [None, pa.py_buffer(np.ascontiguousarray(records[:, 10:]).tobytes())])
    df = pl.from_arrow(pa.table({"key": keys.cast(pa.binary()), "payload": values.cast(pa.binary())}))
    assert isinstance(df, pl.DataFrame)
    return df
