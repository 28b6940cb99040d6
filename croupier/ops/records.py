"""TeraSort records in memory: 100-byte rows with a 10-byte key, as numpy arrays.

A batch of ``n`` records is an ``(n, 100)`` uint8 array viewing the bytes as stored (no copy). Keys
compare as unsigned big-endian byte strings, so a key splits into two integers that sort the same
way: ``hi`` (bytes 0-7, big-endian uint64) and ``lo`` (bytes 8-9, big-endian uint16).

The checksum is order-independent (a sum over records of a 64-bit hash of each record), so the
checksum of a sorted output must equal that of its input: the same guarantee as valsort's sum of
per-record CRC32s, computed with vectorised numpy instead of one CRC call per record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from croupier.errors import InputError
from croupier.storage.backend import Buffer

RECORD_SIZE = 100
KEY_SIZE = 10

# Odd multipliers, one per 8-byte word of a record (12 words + the 4-byte tail), so that moving
# bytes between positions changes the hash; then a 64-bit finaliser (murmur3 fmix64) mixes it.
_MASK64 = (1 << 64) - 1
_HASH_CHUNK = 65536
_WORD_MULTIPLIERS = np.array(
    [(0x9E3779B97F4A7C15 + 2 * i * 0x632BE59BD9B4E019) & _MASK64 | 1 for i in range(13)], dtype=np.uint64
)


def as_records(buf: Buffer, where: str) -> np.ndarray:
    """View ``buf`` as an ``(n, 100)`` uint8 array; ``where`` names the object in errors."""
    size = memoryview(buf).nbytes
    if size % RECORD_SIZE:
        raise InputError(
            f"{where}: size {size} bytes is not a multiple of the {RECORD_SIZE}-byte record size "
            f"({size % RECORD_SIZE} trailing bytes); the object is truncated or not gensort data"
        )
    return np.frombuffer(buf, dtype=np.uint8).reshape(-1, RECORD_SIZE)


def key_columns(records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (hi, lo): the key as a uint64 of bytes 0-7 and a uint16 of bytes 8-9, both big-endian."""
    hi = np.ascontiguousarray(records[:, 0:8]).view(">u8").ravel().astype(np.uint64)
    lo = np.ascontiguousarray(records[:, 8:10]).view(">u2").ravel().astype(np.uint16)
    return hi, lo


def record_hashes(records: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each record (position-sensitive within the record).

    Works in chunks that stay in cache: one chunk's words are multiplied by their per-position
    constants, summed, then mixed; 6x faster than whole-array column passes.
    """
    out = np.empty(len(records), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, len(records), _HASH_CHUNK):
            chunk = records[start : start + _HASH_CHUNK]
            words = np.ascontiguousarray(chunk[:, :96]).view("<u8")
            h = (words * _WORD_MULTIPLIERS[None, :12]).sum(axis=1, dtype=np.uint64)
            h += np.ascontiguousarray(chunk[:, 96:]).view("<u4").ravel() * _WORD_MULTIPLIERS[12]
            h ^= h >> np.uint64(33)
            h *= np.uint64(0xFF51AFD7ED558CCD)
            h ^= h >> np.uint64(33)
            h *= np.uint64(0xC4CEB9FE1A85EC53)
            h ^= h >> np.uint64(33)
            out[start : start + len(chunk)] = h
    return out


def checksum(records: np.ndarray) -> int:
    """Order-independent checksum: sum of :func:`record_hashes` modulo 2**64."""
    if len(records) == 0:
        return 0
    with np.errstate(over="ignore"):
        return int(record_hashes(records).sum(dtype=np.uint64))


def add_checksums(a: int, b: int) -> int:
    """Combine two checksums (addition modulo 2**64)."""
    return (a + b) & _MASK64


def unsorted_count(hi: np.ndarray, lo: np.ndarray) -> int:
    """How many adjacent pairs are out of order (key[i+1] < key[i])."""
    if len(hi) < 2:
        return 0
    down = (hi[1:] < hi[:-1]) | ((hi[1:] == hi[:-1]) & (lo[1:] < lo[:-1]))
    return int(np.count_nonzero(down))


def duplicate_count(hi: np.ndarray, lo: np.ndarray) -> int:
    """How many records repeat the key of the record before them (input assumed sorted)."""
    if len(hi) < 2:
        return 0
    return int(np.count_nonzero((hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1])))


def sort_order(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Stable permutation that sorts records by key; ties keep their input order.

    A quicksort on ``hi`` alone does almost all the work (2-3x faster than a stable two-column
    sort); only the runs of equal ``hi`` are then re-sorted by (hi, lo, input position), which
    makes the result exactly the stable order whatever quicksort did with ties.
    """
    order = np.argsort(hi, kind="quicksort")
    sorted_hi = hi[order]
    tie = sorted_hi[1:] == sorted_hi[:-1]
    if not tie.any():
        return order
    in_run = np.zeros(len(hi), dtype=bool)
    in_run[1:] |= tie
    in_run[:-1] |= tie
    slots = np.flatnonzero(in_run)
    members = order[slots]
    order[slots] = members[np.lexsort((members, lo[members], hi[members]))]
    return order


def take(records: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Gather records in ``order``.

    ``np.take`` along axis 0 copies each 100-byte row as one block; measured 4-10x faster than
    fancy indexing on a ``V100`` view for 5M records.
    """
    return np.take(records, order, axis=0)


@dataclass
class RecordRuns:
    """Records of a task as runs (one per input piece, never concatenated until a kernel needs
    it), each with the global row position of its first record (the sort's tiebreak)."""

    parts: list[np.ndarray]
    first_rows: list[int]

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def concatenated(self) -> np.ndarray:
        """All records as one ``(n, 100)`` array (no copy when there is one run)."""
        if len(self.parts) == 1:
            return self.parts[0]
        return np.concatenate(self.parts) if self.parts else np.empty((0, RECORD_SIZE), np.uint8)
