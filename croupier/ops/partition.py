"""Range partitioning on the record key, with splitters from a sample; pure CPU, no storage.

Why a tiebreak: with many equal keys (skew, or all keys equal) plain key ranges would send every
copy of a hot key to one reducer. Each record therefore gets a composite sort key that is unique:

    A = key bytes 0-7 (uint64)      B = key bytes 8-9 << 48 | global row position (48 bits)

and splitters are composite keys too, so equal keys spread over several reducers while the
concatenation of reducer outputs stays ordered by key. Reducer ``j`` gets the records with
``splitter[j-1] < (A, B) <= splitter[j]`` (splitter[-1] = -inf, splitter[P-1] = +inf).
"""

from __future__ import annotations

import numpy as np

ROWPOS_BITS = 48
MAX_ROWS = 1 << ROWPOS_BITS


def composite_keys(hi: np.ndarray, lo: np.ndarray, first_row: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (A, B) for records whose global row positions start at ``first_row``."""
    if first_row + len(hi) > MAX_ROWS:
        raise ValueError(f"more than 2**{ROWPOS_BITS} records are not supported")
    rows = np.arange(first_row, first_row + len(hi), dtype=np.uint64)
    return hi, (lo.astype(np.uint64) << np.uint64(ROWPOS_BITS)) | rows


def choose_splitters(a: np.ndarray, b: np.ndarray, partitions: int) -> tuple[np.ndarray, np.ndarray]:
    """Pick ``partitions - 1`` splitters at even quantiles of the sampled composite keys."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if partitions == 1 or len(a) == 0:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    order = np.lexsort((b, a))
    picks = (np.arange(1, partitions) * len(a)) // partitions
    picks = np.minimum(picks, len(a) - 1)
    return a[order][picks], b[order][picks]


def assign(a: np.ndarray, b: np.ndarray, split_a: np.ndarray, split_b: np.ndarray) -> np.ndarray:
    """Reducer index of each record: how many splitters are <= its composite key."""
    left = np.searchsorted(split_a, a, side="left")
    right = np.searchsorted(split_a, a, side="right")
    result = left.astype(np.int64)
    tied = np.flatnonzero(left != right)  # records whose A equals some splitter's A
    if len(tied):
        for start in np.unique(left[tied]):
            members = tied[left[tied] == start]
            stop = right[members[0]]
            result[members] = start + np.searchsorted(split_b[start:stop], b[members], side="right")
    return result


def group_by_partition(parts: np.ndarray, partitions: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (order, bounds): a stable permutation grouping rows by partition, and P+1 offsets."""
    order = np.argsort(parts.astype(np.uint32 if partitions > 65535 else np.uint16), kind="stable")
    counts = np.bincount(parts, minlength=partitions)
    bounds = np.zeros(partitions + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    return order, bounds
