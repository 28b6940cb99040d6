"""TeraSort input as record pieces: cutting the input into shares, sampling keys, reading records.

A :class:`Piece` is part of one input object: rows [start, stop) with the global position of its
first row (the composite sort key's tiebreak). gensort objects are cut at record boundaries so every
task gets the same number of records; Parquet objects (columns ``key`` and ``payload``) are read
whole, grouped greedily by bytes in name order. Sampling reads a few runs of records by ranged GETs
(gensort) or only the footer and the ``key`` column chunks (Parquet), so a probe stage learns the
record count (hence the shuffle volume D) and the splitters cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from croupier.errors import InputError
from croupier.ops import partition
from croupier.ops.formats import check_record_name, detect_format, key_bytes, read_records
from croupier.ops.records import KEY_SIZE, RECORD_SIZE, key_columns
from croupier.storage import ObjectInfo, Store
from croupier.storage.rangefile import RangeFile

#: Sampled keys per reducer; ~100 per reducer keeps partitions within a few % of even.
SAMPLES_PER_REDUCER = 128
MIN_SAMPLES = 1024
SAMPLE_RUNS = 8  # ranged reads per piece when sampling gensort data


@dataclass(frozen=True)
class Piece:
    """Part of one input object a task reads: rows [start, stop) of ``key``; stop=-1 = to the end."""

    key: str
    fmt: str
    start: int
    stop: int
    first_row: int = 0  # global row position of row ``start`` (filled in after sampling)
    row_groups: tuple[int, int] | None = None  # Parquet: only row groups [a, b) (bounded memory)


def input_format(objects: list[ObjectInfo]) -> str:
    """The one format of the input objects; gensort sizes must be whole records."""
    formats = {detect_format(o.key) for o in objects}
    if len(formats) > 1:
        raise InputError(f"input mixes gensort and Parquet objects ({objects[0].key}, ...); use one format")
    fmt = formats.pop()
    if fmt == "gensort":
        for o in objects:
            check_record_name(o.key)
            if o.size % RECORD_SIZE:
                raise InputError(
                    f"{o.key}: size {o.size} bytes is not a multiple of the {RECORD_SIZE}-byte record size; "
                    "the object is truncated or not gensort data"
                )
    return fmt


def plan_pieces(objects: list[ObjectInfo], tasks: int, rows: list[int] | None = None) -> list[list[Piece]]:
    """Split the input into ``tasks`` shares of about equal size (see the module docstring).

    ``rows`` (records per object, known after the probe) sets each piece's global first row;
    without it Parquet pieces are open-ended and rows are numbered per object.
    """
    fmt = input_format(objects)
    if fmt == "parquet":
        return _group_whole(objects, tasks, rows)
    counts = [o.size // RECORD_SIZE for o in objects]
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    total = int(starts[-1])
    shares: list[list[Piece]] = []
    for m in range(tasks):
        lo, hi = total * m // tasks, total * (m + 1) // tasks
        share = []
        for i, o in enumerate(objects):
            a, b = max(lo, int(starts[i])), min(hi, int(starts[i + 1]))
            if a < b:
                share.append(Piece(o.key, "gensort", a - int(starts[i]), b - int(starts[i]), a))
        shares.append(share)
    return shares


def _group_whole(objects: list[ObjectInfo], groups: int, rows: list[int] | None) -> list[list[Piece]]:
    total = sum(o.size for o in objects) or 1
    bases = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64) if rows is not None else None
    shares: list[list[Piece]] = [[] for _ in range(groups)]
    seen = 0
    for i, o in enumerate(objects):
        stop = rows[i] if rows is not None else -1
        first = int(bases[i]) if bases is not None else 0
        shares[min(groups - 1, seen * groups // total)].append(Piece(o.key, "parquet", 0, stop, first))
        seen += o.size
    return shares


def sample_pieces(store: Store, share: list[Piece], samples: int, seed: int) -> list[tuple[int, bytes, bytes]]:
    """Per piece of a share: (rows in the piece, sampled A keys, sampled B keys).

    B carries the sampled record's row number within its object; the driver adds the object's
    global first row once every object's size is known.
    """
    rng = np.random.default_rng(seed)
    per_piece = max(1, samples // max(1, len(share)))
    out = []
    for piece in share:
        keys, positions, n = _sample_piece(store, piece, per_piece, rng)
        hi, lo = key_columns(keys)
        b = (lo.astype(np.uint64) << np.uint64(partition.ROWPOS_BITS)) | positions.astype(np.uint64)
        out.append((n, hi.tobytes(), b.tobytes()))
    return out


def _sample_piece(store: Store, piece: Piece, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """(sampled records, their row numbers within the object, rows in the piece)."""
    if piece.fmt == "parquet":
        keys = read_parquet_keys(store, piece.key)
        n = len(keys)
        picks = np.sort(rng.choice(n, size=min(k, n), replace=False)) if n else np.empty(0, np.int64)
        rows = np.zeros((len(picks), RECORD_SIZE), np.uint8)
        rows[:, :KEY_SIZE] = keys[picks]
        return rows, picks, n
    n = piece.stop - piece.start
    if n == 0:
        return np.empty((0, RECORD_SIZE), np.uint8), np.empty(0, np.int64), 0
    run = max(1, -(-k // SAMPLE_RUNS))
    starts = np.unique(rng.integers(0, max(1, n - run + 1), size=min(SAMPLE_RUNS, n)))
    stops = np.minimum(starts + run, n)
    ranges = [((piece.start + int(a)) * RECORD_SIZE, (piece.start + int(b)) * RECORD_SIZE) for a, b in zip(starts, stops)]
    chunks = store.get_ranges(piece.key, ranges)
    records = np.concatenate([read_records(c, "gensort", f"{store.url}/{piece.key}") for c in chunks])
    positions = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)]) + piece.start
    return records, positions, n


def read_parquet_keys(store: Store, key: str) -> np.ndarray:
    """Keys of a Parquet object as (n, 10) uint8, fetching only its footer and key column chunks."""
    where = f"{store.url}/{key}"
    try:
        table = pq.read_table(RangeFile(store, key), columns=["key"])
    except (pa.ArrowInvalid, OSError, KeyError) as exc:
        raise InputError(f"{where}: cannot read column 'key' as Parquet ({exc}); is it truncated or corrupt?") from exc
    return key_bytes(table, where)


def read_piece(store: Store, piece: Piece) -> np.ndarray:
    """The records of one piece; checks it still has the rows sampling saw."""
    where = f"{store.url}/{piece.key}"
    if piece.fmt == "parquet" and piece.row_groups is not None:
        return _read_row_groups(store, piece, where)
    if piece.fmt == "gensort":
        buf = store.get_range(piece.key, piece.start * RECORD_SIZE, piece.stop * RECORD_SIZE)
    else:
        buf = store.get(piece.key)
    records = read_records(buf, piece.fmt, where)
    if piece.stop >= 0 and len(records) != piece.stop - piece.start:
        raise InputError(
            f"{where}: has {len(records)} records now but {piece.stop - piece.start} when sampled; "
            "was the input changed during the sort?"
        )
    return records


def global_splitters(rows: list[int], found: list[tuple[int, np.ndarray, np.ndarray]], reducers: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Splitters for ``reducers`` partitions from sampled keys: ``found`` holds (object index, A, B
    with B's row position relative to its object); object row counts ``rows`` make it global."""
    bases = np.concatenate([[0], np.cumsum(rows)]).astype(np.uint64)
    if int(bases[-1]) >= partition.MAX_ROWS:
        raise InputError(f"{where}: {int(bases[-1])} records exceed the supported 2**{partition.ROWPOS_BITS}")
    empty = np.empty(0, np.uint64)
    a = np.concatenate([f[1] for f in found]) if found else empty
    b = np.concatenate([f[2] + bases[f[0]] for f in found]) if found else empty
    return partition.choose_splitters(a, b, reducers)


def partition_records(records: np.ndarray, first_row: int, split: tuple[np.ndarray, np.ndarray], buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Group one piece's records by bucket (stable); return (grouped records, B+1 offsets)."""
    from croupier.ops.records import take

    if not len(records):
        return records, np.zeros(buckets + 1, np.int64)
    hi, lo = key_columns(records)
    a, b = partition.composite_keys(hi, lo, first_row)
    order, bounds = partition.group_by_partition(partition.assign(a, b, *split), buckets)
    return take(records, order), bounds


def _read_row_groups(store: Store, piece: Piece, where: str) -> np.ndarray:
    """The records of row groups [a, b) of a Parquet object (ranged reads of just those)."""
    from croupier.ops.formats import records_from_table

    a, b = piece.row_groups or (0, 0)
    try:
        parquet = pq.ParquetFile(RangeFile(store, piece.key), buffer_size=8 << 20)
        table = parquet.read_row_groups(list(range(a, b)), columns=["key", "payload"], use_threads=False)
    except (pa.ArrowInvalid, OSError, KeyError) as exc:
        raise InputError(f"{where}: not a readable TeraSort Parquet file ({exc}); is it truncated or corrupt?") from exc
    return records_from_table(table, where)


def row_group_pieces(store: Store, key: str, size: int, max_rows: int) -> list[Piece]:
    """A Parquet object cut into pieces of whole row groups of at most ``max_rows`` rows each (one
    row group may exceed it), from its footer."""
    where = f"{store.url}/{key}"
    try:
        meta = pq.read_metadata(RangeFile(store, key, size))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{where}: not a readable Parquet file ({exc}); is it truncated or corrupt?") from exc
    pieces: list[Piece] = []
    first, rows = 0, 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        if rows and rows + n > max_rows:
            pieces.append(Piece(key, "parquet", 0, -1, 0, (first, g)))
            first, rows = g, 0
        rows += n
    pieces.append(Piece(key, "parquet", 0, -1, 0, (first, meta.num_row_groups)))
    return pieces
