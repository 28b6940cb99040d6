"""Encoding of shuffle objects: raw records, or Arrow IPC with lz4/zstd compression.

Raw is the records' own bytes: no encoding cost, so it wins on fast local storage. Arrow IPC
(one fixed-size-binary column) with compression trades CPU for fewer bytes, which wins where writes
are slow (S3 PUT bandwidth). ``bench/intermediate_format.py`` measures them; on this machine, 1 GB,
P=4: local folder raw 3.5 s, lz4 4.5 s, zstd 5.3 s; SeaweedFS raw 19.6 s, lz4 18.9 s, zstd 18.4 s
(gensort payloads compress 3.2x with zstd). Hence the "auto" default: raw locally, zstd on S3.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from croupier.ops.records import RECORD_SIZE
from croupier.storage.backend import Buffer

FORMATS = ("raw", "arrow", "arrow-lz4", "arrow-zstd")
_SCHEMA = pa.schema([("record", pa.binary(RECORD_SIZE))])


def encode(records: np.ndarray, fmt: str) -> Buffer:
    """Serialise ``(n, 100)`` records for a shuffle object."""
    blob = encode_parts([records], fmt)
    return blob[0] if isinstance(blob, list) else blob


def encode_parts(parts: list[np.ndarray], fmt: str) -> Buffer | list[Buffer]:
    """Serialise the concatenation of several record arrays without concatenating them.

    raw: the arrays' own bytes as a list of buffers (written as one object by ``Store.put``);
    Arrow: one IPC stream with a record batch per array.
    """
    if fmt == "raw":
        return [memoryview(np.ascontiguousarray(p).reshape(-1)) for p in parts if len(p)] or [b""]
    compression = {"arrow": None, "arrow-lz4": "lz4", "arrow-zstd": "zstd"}[fmt]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, _SCHEMA, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        for records in parts:
            if len(records):
                writer.write_batch(_batch(records))
    return sink.getvalue()


def _batch(records: np.ndarray) -> pa.RecordBatch:
    data = pa.py_buffer(np.ascontiguousarray(records))
    column = pa.FixedSizeBinaryArray.from_buffers(pa.binary(RECORD_SIZE), len(records), [None, data])
    return pa.record_batch([column], schema=_SCHEMA)


def decode(buf: Buffer, fmt: str) -> np.ndarray:
    """Inverse of :func:`encode`: an ``(n, 100)`` uint8 array."""
    if fmt == "raw":
        return np.frombuffer(buf, dtype=np.uint8).reshape(-1, RECORD_SIZE)
    table = pa.ipc.open_stream(pa.py_buffer(buf)).read_all()
    parts = [fixed_binary_bytes(chunk) for chunk in table.column(0).chunks]
    if not parts:
        return np.empty((0, RECORD_SIZE), dtype=np.uint8)
    return np.concatenate(parts).reshape(-1, RECORD_SIZE)


def fixed_binary_bytes(array: pa.Array) -> np.ndarray:
    """The value bytes of a fixed-size-binary or binary Arrow array, without nulls, as uint8."""
    if array.null_count:
        raise ValueError("null values are not records")
    if pa.types.is_fixed_size_binary(array.type):
        width = array.type.byte_width
        data = array.buffers()[1]
        flat = np.frombuffer(data, dtype=np.uint8)
        return flat[array.offset * width : (array.offset + len(array)) * width]
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32 if pa.types.is_binary(array.type) else np.int64)
    offsets = offsets[array.offset : array.offset + len(array) + 1]
    flat = np.frombuffer(array.buffers()[2], dtype=np.uint8) if array.buffers()[2] else np.empty(0, np.uint8)
    return flat[offsets[0] : offsets[-1]]
