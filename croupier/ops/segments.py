"""Segments: the unit of data in exchange objects — records of several partitions plus an index.

::

    "CRS1" | n (u32) | n partition ids (u32) | n record counts (u64) | records (codec-encoded)

Records are grouped by partition in the order the index lists. Intermediate levels of a multi-level
exchange need each record's final partition; the index carries it, so nothing is recomputed and no
per-record ids are stored. A segment is never empty on the wire (the header is always there), so
even a receiver with no data costs exactly one read, as the plans count.
"""

from __future__ import annotations

import struct

import numpy as np

from croupier.ops import codec
from croupier.ops.records import RECORD_SIZE
from croupier.storage.backend import Buffer

MAGIC = b"CRS1"


def encode(blocks: list[tuple[int, list[np.ndarray]]], fmt: str) -> list[Buffer]:
    """Encode (partition, arrays) pairs as one segment; returns buffers to write back to back."""
    parts = [(p, arrays) for p, arrays in blocks if sum(len(a) for a in arrays)]
    ids = np.array([p for p, _ in parts], dtype="<u4")
    counts = np.array([sum(len(a) for a in arrays) for _, arrays in parts], dtype="<u8")
    header = MAGIC + struct.pack("<I", len(parts)) + ids.tobytes() + counts.tobytes()
    body = codec.encode_parts([a for _, arrays in parts for a in arrays if len(a)], fmt)
    return [header, *(body if isinstance(body, list) else [body])]


def decode(buf: Buffer, fmt: str, where: str) -> list[tuple[int, np.ndarray]]:
    """Inverse of :func:`encode`: (partition, records) pairs in index order."""
    view = memoryview(buf)
    if view.nbytes < 8 or bytes(view[:4]) != MAGIC:
        raise ValueError(f"{where}: not an exchange segment (bad header)")
    (n,) = struct.unpack("<I", view[4:8])
    ids = np.frombuffer(view, dtype="<u4", count=n, offset=8)
    counts = np.frombuffer(view, dtype="<u8", count=n, offset=8 + 4 * n)
    records = codec.decode(view[8 + 12 * n :], fmt) if n else np.empty((0, RECORD_SIZE), np.uint8)
    if len(records) != int(counts.sum()):
        raise ValueError(f"{where}: segment index says {int(counts.sum())} records but holds {len(records)}")
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return [(int(p), records[bounds[i] : bounds[i + 1]]) for i, p in enumerate(ids)]


def size(parts: list[Buffer]) -> int:
    """Bytes of an encoded segment."""
    return sum(memoryview(p).nbytes for p in parts)
