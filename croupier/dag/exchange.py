"""Exchange objects of query stages: one object per task, cut into buckets.

A producing task writes ONE object (write combining): an Arrow IPC stream whose record batches
are its rows grouped by bucket, in bucket order; it returns the B+1 bucket offsets and the stream's
schema message to the driver. A consuming task that owns buckets [a, b) reads them from each
producer with ONE ranged GET of ``offsets[a]:offsets[b]`` (skipped when empty) and decodes those
batches with the schema it was handed, so a piece costs one request and one decode however many
buckets it spans. Because P is chosen after the producers finished
(late binding, from the bytes they report), any P <= B works without rewriting anything.

Buckets come from a hash of the key columns (hash exchange) or from sampled splitters in sort
order (range exchange); a plain exchange is one bucket.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from croupier.storage import Store

#: Polars IPC compression per Croupier intermediate encoding.
COMPRESSION = {"raw": "uncompressed", "arrow": "uncompressed", "arrow-lz4": "lz4", "arrow-zstd": "zstd"}
#: Concurrent GETs one task keeps in flight when reading exchange pieces.
READ_FANOUT = 8
_SEED = 0x5EED


@dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of object ``key``: whole record batches of the stream with schema ``header``."""

    key: str
    start: int
    end: int
    header: bytes


@dataclass(frozen=True)
class ObjectRef:
    """What a producing task wrote: its object (None if it wrote no rows), offsets, schema and rows."""

    key: str | None
    size: int
    offsets: tuple[int, ...]
    rows: int
    header: bytes = b""

    def piece(self, first: int, last: int) -> Piece | None:
        """The piece holding buckets [first, last), or None when they are empty."""
        if self.key is None or self.offsets[first] == self.offsets[last]:
            return None
        return Piece(self.key, self.offsets[first], self.offsets[last], self.header)


def bucket_range(task: int, tasks: int, buckets: int) -> tuple[int, int]:
    """Buckets [first, last) owned by consumer ``task`` of ``tasks`` (contiguous, balanced)."""
    return task * buckets // tasks, (task + 1) * buckets // tasks


def _key_exprs(df: pl.DataFrame, keys: Sequence[str]) -> list[pl.Expr]:
    """Key columns normalised so equal values hash equally whatever their integer/float width."""
    exprs = []
    for k in keys:
        dtype = df.schema[k]
        if dtype.is_integer():
            exprs.append(pl.col(k).cast(pl.Int64))
        elif dtype.is_float():
            exprs.append(pl.col(k).cast(pl.Float64))
        else:
            exprs.append(pl.col(k))
    return exprs


def hash_buckets(df: pl.DataFrame, keys: Sequence[str], buckets: int) -> np.ndarray:
    """Bucket of each row: a seeded hash of its key columns modulo ``buckets``."""
    if buckets == 1 or df.height == 0:
        return np.zeros(df.height, dtype=np.int64)
    hashed = df.select(pl.struct(_key_exprs(df, keys)).hash(seed=_SEED).alias("h")).to_series()
    return (hashed % buckets).cast(pl.Int64).to_numpy()


def sort_keys(df: pl.DataFrame, by: Sequence[pl.Expr]) -> pl.DataFrame:
    """The sort-key columns of ``df``, named __k0, __k1, ... (samples and splitters use these)."""
    return df.select([e.alias(f"__k{i}") for i, e in enumerate(by)])


def range_buckets(df: pl.DataFrame, by: Sequence[pl.Expr], descending: Sequence[bool], nulls_last: bool, splitters: pl.DataFrame) -> np.ndarray:
    """Bucket of each row: how many splitter rows sort at or before it (ties go up).

    The rows' keys and the splitters are sorted together with the query's own sort rules, so
    buckets agree exactly with the final order, nulls and descending keys included.
    """
    if splitters.height == 0 or df.height == 0:
        return np.zeros(df.height, dtype=np.int64)
    names = [f"__k{i}" for i in range(len(by))]
    rows = sort_keys(df, by).with_columns(
        pl.lit(False).alias("__split"), pl.int_range(pl.len(), dtype=pl.Int64).alias("__row")
    )
    cuts = splitters.rename(dict(zip(splitters.columns, names))).with_columns(pl.lit(True).alias("__split"), pl.lit(-1, dtype=pl.Int64).alias("__row"))
    cuts = cuts.cast(dict(rows.schema))  # type: ignore[arg-type]
    both = pl.concat([cuts, rows], how="vertical")
    ordered = both.sort(names + ["__split"], descending=list(descending) + [True], nulls_last=nulls_last, maintain_order=True)
    ordered = ordered.with_columns(pl.col("__split").cast(pl.Int64).cum_sum().alias("__bucket")).filter(~pl.col("__split"))
    return ordered.sort("__row")["__bucket"].to_numpy()


def encode_buckets(df: pl.DataFrame, bucket: np.ndarray, buckets: int, compression: str) -> tuple[bytes, tuple[int, ...], bytes]:
    """One IPC stream of ``df``'s rows in bucket order (a batch run per bucket); the B+1 offsets of
    the bucket boundaries in it; and its schema message."""
    if buckets > 1 and df.height:
        df = df[np.argsort(bucket, kind="stable")]
    counts = np.bincount(bucket, minlength=buckets) if df.height else np.zeros(buckets, dtype=np.int64)
    table = df.to_arrow()
    header = table.schema.serialize().to_pybytes()
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=None if compression == "uncompressed" else compression)
    offsets = [len(header)]
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        start = 0
        for b in range(buckets):
            n = int(counts[b])
            if n:
                writer.write_table(table.slice(start, n))
                start += n
            offsets.append(sink.tell() if start else len(header))
    data = sink.getvalue().to_pybytes()
    if data[: len(header)] != header:  # pragma: no cover - pyarrow guarantees the layout
        raise RuntimeError("IPC stream does not start with its schema message; cannot cut buckets")
    return data, tuple(offsets), header


def write_buckets(store: Store, key: str, df: pl.DataFrame, bucket: np.ndarray, buckets: int, compression: str) -> ObjectRef:
    """Write ``df`` cut into buckets as one object; nothing is written when ``df`` is empty."""
    if df.height == 0:
        return ObjectRef(None, 0, (0,) * (buckets + 1), 0)
    data, offsets, header = encode_buckets(df, bucket, buckets, compression)
    store.put(key, data)
    return ObjectRef(key, len(data), offsets, df.height, header)


def decode_piece(data: memoryview | bytes, piece: Piece, schemas: dict[bytes, pa.Schema] | None = None) -> pa.Table:
    """The record batches of one fetched piece, as a table."""
    schemas = {} if schemas is None else schemas
    schema = schemas.get(piece.header)
    if schema is None:
        schema = schemas[piece.header] = pa.ipc.read_schema(pa.py_buffer(piece.header))
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(pa.py_buffer(data)))
    return pa.Table.from_batches([pa.ipc.read_record_batch(message, schema) for message in reader], schema)


def read_pieces(store: Store, pieces: Sequence[Piece], schema: pl.Schema) -> pl.DataFrame:
    """Fetch ``pieces`` (several GETs in flight) and concatenate them in order."""
    if not pieces:
        return pl.DataFrame(schema=schema)
    schemas: dict[bytes, pa.Schema] = {}

    def fetch(piece: Piece) -> pa.Table:
        return decode_piece(memoryview(store.get_range(piece.key, piece.start, piece.end)), piece, schemas)

    if len(pieces) == 1:
        tables = [fetch(pieces[0])]
    else:
        with ThreadPoolExecutor(min(READ_FANOUT, len(pieces))) as pool:
            tables = list(pool.map(fetch, pieces))
    df = pl.from_arrow(pa.concat_tables(tables))
    assert isinstance(df, pl.DataFrame)
    return df
