"""Record kernels: gensort layout and determinism, key columns, checksum, stable sort order."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.ops.gensort import BLOCK, generate
from croupier.ops.records import (
    as_records,
    checksum,
    duplicate_count,
    key_columns,
    record_hashes,
    sort_order,
    take,
    unsorted_count,
)


def test_generation_is_deterministic_and_independent_of_splitting() -> None:
    whole = generate(0, 3 * BLOCK // 2, seed=7)
    pieces = np.concatenate([generate(0, 1000, 7), generate(1000, BLOCK, 7), generate(1000 + BLOCK, BLOCK // 2 - 1000, 7)])
    assert (whole == pieces).all()
    assert not (generate(0, 1000, 8) == whole[:1000]).all()


def test_ascii_layout_is_printable_with_row_ids() -> None:
    recs = generate(42, 3, seed=1, ascii_keys=True)
    for i, row in enumerate(recs):
        raw = bytes(row)
        assert all(32 <= b < 127 for b in raw[:10])
        assert raw[10:12] == b"  " and raw[44:46] == b"  " and raw[98:] == b"\r\n"
        assert int(raw[12:44], 16) == 42 + i


def test_binary_layout_markers_and_row_ids() -> None:
    recs = generate(1 << 40, 2, seed=1)
    for i, row in enumerate(recs):
        raw = bytes(row)
        assert raw[10:12] == b"\x00\x11" and raw[28:32] == b"\x88\x99\xaa\xbb" and raw[96:] == b"\xcc\xdd\xee\xff"
        assert int.from_bytes(raw[12:28], "big") == (1 << 40) + i


def test_key_columns_order_like_the_key_bytes() -> None:
    recs = generate(0, 5000, seed=3)
    hi, lo = key_columns(recs)
    by_bytes = sorted(range(len(recs)), key=lambda i: bytes(recs[i, :10]))
    by_columns = np.lexsort((lo, hi))
    assert list(by_columns) == by_bytes


def test_checksum_is_order_independent_and_content_sensitive() -> None:
    recs = generate(0, 10_000, seed=5)
    shuffled = recs[np.random.default_rng(0).permutation(len(recs))]
    assert checksum(recs) == checksum(shuffled)
    altered = recs.copy()
    altered[123, 57] ^= 1
    assert checksum(altered) != checksum(recs)
    swapped = recs.copy()
    swapped[9, [20, 21]] = swapped[9, [21, 20]]
    assert swapped[9, 20] == swapped[9, 21] or checksum(swapped) != checksum(recs)
    assert checksum(recs[:0]) == 0
    assert len(set(record_hashes(recs).tolist())) == len(recs)


def test_truncated_buffer_is_named_in_the_error() -> None:
    import pytest

    from croupier.errors import InputError

    with pytest.raises(InputError, match=r"in/part-3: size 250 bytes is not a multiple"):
        as_records(b"x" * 250, "in/part-3")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=300))
def test_sort_order_is_the_stable_key_order(pairs: list[tuple[int, int]]) -> None:
    hi = np.array([p[0] for p in pairs], dtype=np.uint64)
    lo = np.array([p[1] for p in pairs], dtype=np.uint16)
    expected = pl.DataFrame({"hi": hi, "lo": lo}).with_row_index("i").sort(["hi", "lo"], maintain_order=True)
    assert sort_order(hi, lo).tolist() == expected.get_column("i").to_list()


def test_sorted_records_pass_the_order_checks() -> None:
    recs = generate(0, 20_000, seed=11, ascii_keys=True)
    hi, lo = key_columns(recs)
    assert unsorted_count(hi, lo) > 0
    out = take(recs, sort_order(hi, lo))
    h2, l2 = key_columns(out)
    assert unsorted_count(h2, l2) == 0
    assert duplicate_count(h2, l2) == duplicate_count(*key_columns(out))
    assert checksum(out) == checksum(recs)
