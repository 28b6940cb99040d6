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


# --- frames: hash and key-range buckets of query rows (Polars kernels) ---------------------------

import polars as pl  # noqa: E402 - the frame kernels below are the only users

#: Seed of the hash every producer of an exchange uses, so equal keys meet in one bucket.
HASH_SEED = 0x5EED


def _key_exprs(df: pl.DataFrame, keys: tuple[str, ...] | list[str]) -> list[pl.Expr]:
    """Key columns normalised so equal values hash equally whatever their integer/float width,
    named by position (a join may take one column as two keys: ``ON s.a = g.k AND s.a = g.k2``)."""
    exprs = []
    for k in keys:
        dtype = df.schema[k]
        if dtype.is_integer():
            exprs.append(pl.col(k).cast(pl.Int64))
        elif dtype.is_float():
            exprs.append(pl.col(k).cast(pl.Float64))
        elif isinstance(dtype, (pl.Categorical, pl.Enum)):
            exprs.append(pl.col(k).cast(pl.String))
        else:
            exprs.append(pl.col(k))
    return [e.alias(f"__k{i}") for i, e in enumerate(exprs)]


def contiguous(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with one chunk per column. Scans hand on one chunk per row group, which Polars' lazy
    engine (running the operators) takes as it is (a filter ran 2x faster than on the frame made
    contiguous), but a gather by index does not: gathering 1.5M rows in 18 chunks into exchange
    buckets took 186 ms, copying them into one first and gathering 65 ms. (An eager join of them
    took 130 ms against 75; lazy, 33 ms either way.)"""
    return df.rechunk() if max(df.n_chunks("all"), default=1) > 1 else df  # any column: the first may be whole


def hash_buckets(df: pl.DataFrame, keys: tuple[str, ...] | list[str], buckets: int) -> np.ndarray:
    """Bucket of each row: a seeded hash of its key columns modulo ``buckets``. One key column is
    hashed as it is (5x faster than as a struct of one field: 1.5M TPC-H order keys in 6 ms, not
    32), several as a struct; both agree on -0.0 and 0.0, and on every NaN. The modulo runs in
    the same Polars expression (a Series modulo after it was half the time)."""
    if buckets == 1 or df.height == 0:
        return np.zeros(df.height, dtype=np.int64)
    exprs = _key_exprs(df, keys)
    hashed = exprs[0].hash(seed=HASH_SEED) if len(exprs) == 1 else pl.struct(exprs).hash(seed=HASH_SEED)
    return df.select((hashed % buckets).cast(pl.Int64).alias("b")).to_series().to_numpy()


def sort_keys(df: pl.DataFrame, by: list[pl.Expr]) -> pl.DataFrame:
    """The sort-key columns of ``df``, named __k0, __k1, ... (samples and splitters use these)."""
    return df.select([e.alias(f"__k{i}") for i, e in enumerate(by)])


def range_buckets(df: pl.DataFrame, by: list[pl.Expr], descending: list[bool] | tuple[bool, ...], nulls_last: bool | tuple[bool, ...], splitters: pl.DataFrame) -> np.ndarray:
    """Bucket of each row: how many splitter rows sort at or before it (ties go up).

    The rows' keys and the splitters are sorted together with the query's own sort rules, so
    buckets agree exactly with the final order, nulls and descending keys included.
    """
    if splitters.height == 0 or df.height == 0:
        return np.zeros(df.height, dtype=np.int64)
    names = [f"__k{i}" for i in range(len(by))]
    rows = sort_keys(df, by).with_columns(pl.lit(False).alias("__split"), pl.int_range(pl.len(), dtype=pl.Int64).alias("__row"))
    cuts = splitters.rename(dict(zip(splitters.columns, names))).with_columns(pl.lit(True).alias("__split"), pl.lit(-1, dtype=pl.Int64).alias("__row"))
    cuts = cuts.cast(dict(rows.schema))  # type: ignore[arg-type]
    both = pl.concat([cuts, rows], how="vertical")
    nulls = list(nulls_last) + [False] if isinstance(nulls_last, (list, tuple)) else nulls_last
    ordered = both.sort(names + ["__split"], descending=list(descending) + [True], nulls_last=nulls, maintain_order=True)
    ordered = ordered.with_columns(pl.col("__split").cast(pl.Int64).cum_sum().alias("__bucket")).filter(~pl.col("__split"))
    return ordered.sort("__row")["__bucket"].to_numpy()


def choose_frame_splitters(samples: list[pl.DataFrame], descending: list[bool] | tuple[bool, ...], nulls_last: bool | tuple[bool, ...], parts: int) -> pl.DataFrame:
    """``parts - 1`` rows of the sorted key sample at even quantiles (fewer if the sample is small)."""
    sample = pl.concat(samples, how="vertical") if samples else pl.DataFrame()
    if sample.height == 0 or parts <= 1:
        return sample.head(0)
    nulls = list(nulls_last) if isinstance(nulls_last, tuple) else nulls_last
    ordered = sample.sort(list(sample.columns), descending=list(descending), nulls_last=nulls)
    picks = sorted({min(ordered.height - 1, (i * ordered.height) // parts) for i in range(1, parts)})
    return ordered[picks]
