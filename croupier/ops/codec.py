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
#: Bytes per message from which Arrow compresses or decompresses a message's buffers on its
#: thread pool (when the process has more than one core). Below it the hand-off costs more than
#: it saves: decoding 768 zstd messages of about 60 KB (a TPC-H Q3 exchange read at SF 1) took
#: 150-220 ms through the pool and 100 ms in the calling thread, on a pool of two threads or of
#: one (a function's); encoding 128 such messages 46 and 37 ms with zstd, 35 and 16 ms with lz4.
#: One 45 MB message on two idle cores: encoded in 70 ms with the pool, 115 ms without. (An
#: exchange reader decodes its small payloads, below payload.SMALL_PAYLOAD, as one stream with
#: these options; larger ones it reads in place, where pyarrow's read_record_batch takes no
#: options and always uses the pool.)
THREADED_MESSAGE = 1 << 20
#: Read options for messages below :data:`THREADED_MESSAGE`.
SMALL_MESSAGES = pa.ipc.IpcReadOptions(use_threads=False)


def write_options(compression: str | None, message_bytes: float) -> pa.ipc.IpcWriteOptions:
    """IPC write options for messages of about ``message_bytes``: buffers compressed on Arrow's
    pool only for large messages in a process with more than one core (see THREADED_MESSAGE)."""
    threads = compression is not None and pa.cpu_count() > 1 and message_bytes >= THREADED_MESSAGE
    return pa.ipc.IpcWriteOptions(compression=compression, use_threads=threads)


def read_options(message_bytes: float) -> pa.ipc.IpcReadOptions:
    """IPC read options for messages of about ``message_bytes`` (see :func:`write_options`)."""
    if pa.cpu_count() > 1 and message_bytes >= THREADED_MESSAGE:
        return pa.ipc.IpcReadOptions(use_threads=True)
    return SMALL_MESSAGES


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
    sizes = [len(p) for p in parts if len(p)]
    options = write_options(compression, RECORD_SIZE * sum(sizes) / max(1, len(sizes)))
    with pa.ipc.new_stream(sink, _SCHEMA, options=options) as writer:
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
    stream = pa.py_buffer(buf)
    reader = pa.ipc.open_stream(stream, options=read_options(stream.size))  # sized by the whole: an upper bound
    table = reader.read_all()
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
