"""Payload codecs: every bucket's chunk decodes alone, and chunks concatenate, for records and frames."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.exchange import segments
from croupier.ops.payload import FRAME_FORMATS, RECORD_FORMATS, Condensed, Expansion, FrameCodec, RecordsCodec
from tests import data


@pytest.mark.parametrize("fmt", RECORD_FORMATS)
def test_records_round_trip_per_bucket_and_concatenated(fmt: str) -> None:
    records = data.uniform(500)
    buckets = {0: [records[:100], records[100:150]], 3: [records[150:400]], 5: [], 7: [records[400:]]}
    codec = RecordsCodec(fmt)
    chunks = codec.encode(buckets, origin=4)
    assert [(c.bucket, c.origin, c.rows) for c in chunks] == [(0, 4, 150), (3, 4, 250), (7, 4, 100)]
    for chunk, (lo, hi) in zip(chunks, [(0, 150), (150, 400), (400, 500)]):
        assert np.array_equal(codec.decode([chunk]), records[lo:hi])
    # through the wire format: the chunks of several segments decode as one payload
    wire = segments.decode(b"".join(bytes(b) for b in segments.encode(chunks)), "x")
    assert np.array_equal(codec.decode(wire), records)
    assert codec.decode([]).shape == (0, 100)


frames = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(-5, 5)), st.one_of(st.none(), st.text(max_size=4)), st.one_of(st.none(), st.floats(allow_nan=False))),
    max_size=60,
)


@settings(max_examples=40, deadline=None)
@given(rows=frames, buckets=st.integers(1, 9), fmt=st.sampled_from(FRAME_FORMATS), seed=st.integers(0, 10))
def test_frames_round_trip_in_bucket_order(rows: list[tuple[int | None, str | None, float | None]], buckets: int, fmt: str, seed: int) -> None:
    df = pl.DataFrame(rows, schema={"i": pl.Int32, "s": pl.String, "f": pl.Float64}, orient="row")
    bucket = np.random.default_rng(seed).integers(0, buckets, df.height)
    codec = FrameCodec(fmt)
    chunks = codec.encode(df, bucket, buckets, origin=1)
    assert sum(c.rows for c in chunks) == df.height
    expected = pl.concat([df.filter(pl.Series(bucket == b)) for b in range(buckets)]) if df.height else df
    wire = segments.decode(b"".join(bytes(b) for b in segments.encode(chunks)), "x")
    got = codec.decode(wire, df.schema)
    assert got.schema == df.schema
    assert got.equals(expected)


def test_frames_keep_dtypes_including_categoricals_dates_and_binary() -> None:
    df = pl.DataFrame(
        {"c": ["a", "b", None], "d": [dt.date(2020, 1, 1), None, dt.date(1999, 12, 31)], "b": [b"\x00\x01", None, b""], "u": [1, 2, 3]},
        schema={"c": pl.Categorical, "d": pl.Date, "b": pl.Binary, "u": pl.UInt8},
    )
    codec = FrameCodec("arrow-zstd")
    chunks = codec.encode(df, np.array([1, 0, 1]), 2, origin=0)
    got = codec.decode(chunks, df.schema)
    assert got.schema == df.schema
    assert got.to_dicts() == [df.row(1, named=True), df.row(0, named=True), df.row(2, named=True)]
    assert codec.decode([], df.schema).schema == df.schema


@pytest.mark.parametrize("fmt", FRAME_FORMATS)
def test_many_small_and_large_payloads_decode_in_order_as_one_contiguous_frame(fmt: str) -> None:
    """A broadcast read gathers every bucket of every producer: hundreds of tiny payloads, read as
    one stream, mixed with large ones read in place; rows come back in payload order, in one chunk
    per column (Polars ops on a frame of 1,536 chunks ran 25x slower), compressed or not."""
    from croupier.ops.payload import SMALL_PAYLOAD

    rng = np.random.default_rng(3)
    codec = FrameCodec(fmt)
    small = pl.DataFrame({"k": rng.integers(0, 1000, 3000), "s": rng.choice(["MAIL", "SHIP", None], 3000)})
    large = pl.DataFrame({"k": np.arange(40_000), "s": ["x" * 5] * 40_000})
    chunks = codec.encode(small, rng.integers(0, 128, small.height), 128, 0)  # ~20 rows per bucket
    big = codec.encode(large, np.zeros(large.height, dtype=np.int64), 1, 1)
    assert sum(memoryview(p).nbytes for c in big for p in c.parts) >= SMALL_PAYLOAD
    more = codec.encode(small, rng.integers(0, 128, small.height), 128, 2)
    order = chunks + big + more
    got = codec.decode(order, small.schema)
    parts = [codec.decode([c], small.schema) for c in order]
    assert got.equals(pl.concat(parts))
    assert got.height == 2 * small.height + large.height
    assert got.n_chunks("all") == [1, 1]
    # a result for the user (no operator runs on it) keeps its batches: the same rows, uncopied
    kept = codec.decode(order, small.schema, combine=False)
    assert kept.equals(got) and kept.n_chunks() > 1


def test_wire_schemas_are_remembered_per_exact_schema() -> None:
    """The remembered wire schema of one schema is never handed to another that differs only in a
    dtype's parameters (a wrong one would decode the bytes as the wrong type)."""
    from croupier.ops.payload import wire_schema

    variants = [
        {"d": pl.Decimal(10, 2)}, {"d": pl.Decimal(12, 2)}, {"d": pl.Decimal(10, 3)},
        {"d": pl.Datetime("us")}, {"d": pl.Datetime("ns")}, {"d": pl.Datetime("us", "UTC")},
        {"d": pl.List(pl.Datetime("us"))}, {"d": pl.List(pl.Datetime("ms"))}, {"d": pl.Array(pl.Int8, 3)},
    ]  # fmt: skip
    got = [wire_schema(pl.Schema(v)) for v in variants]
    assert len({str(s) for s in got}) == len(variants)
    assert all(wire_schema(pl.Schema(v)) is s for v, s in zip(variants, got))


def test_arrow_uses_its_thread_pool_only_for_large_messages_in_a_process_with_cores_to_spare(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small exchange messages are (de)compressed in the calling thread: through Arrow's pool,
    decoding 768 zstd messages of 60 KB took 1.5-2x as long, on a pool of one thread (a
    function's) as of two. A large message on a process with cores to spare uses the pool."""
    import pyarrow as pa

    from croupier.ops import codec

    big, small = codec.THREADED_MESSAGE, codec.THREADED_MESSAGE // 16
    monkeypatch.setattr(pa, "cpu_count", lambda: 4)
    assert codec.write_options("zstd", big).use_threads and codec.read_options(big).use_threads
    assert not codec.write_options("zstd", small).use_threads and not codec.read_options(small).use_threads
    assert not codec.write_options(None, big).use_threads  # nothing to compress
    monkeypatch.setattr(pa, "cpu_count", lambda: 1)  # a function of one core (workers set Arrow's pool to their threads)
    assert not codec.write_options("lz4", big).use_threads and not codec.read_options(big).use_threads


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 9), st.integers(0, 1000), st.lists(st.binary(max_size=40), min_size=1, max_size=3)), max_size=4), max_size=6))
def test_segments_encode_with_their_size_and_decode_to_their_chunks(segs: list[list[tuple[int, int, int, list[bytes]]]]) -> None:
    """Segments of no chunk, of one chunk of one buffer (a producer's bucket: packed at once) and
    of several chunks and buffers, back to back: each says its size, and they decode to the same
    chunks (a chunk's buffers joined) in order."""
    wire, expected = b"", []
    for seg in segs:
        chunks = [segments.Chunk(b, o, r, tuple(parts)) for b, o, r, parts in seg]
        parts, size = segments.encode_sized(chunks)
        blob = b"".join(bytes(p) for p in parts)
        assert len(blob) == size and parts == segments.encode(chunks)
        wire += blob
        expected += [(b, o, r, b"".join(ps)) for b, o, r, ps in seg]
    assert [(c.bucket, c.origin, c.rows, bytes(c.parts[0])) for c in segments.decode(wire, "x")] == expected


condensed_rows = st.lists(st.tuples(st.integers(-3, 3), st.one_of(st.none(), st.integers(-9, 9)), st.one_of(st.none(), st.text(max_size=3))), max_size=50)


@settings(max_examples=40, deadline=None)
@given(rows=condensed_rows, buckets=st.integers(1, 6), fmt=st.sampled_from(FRAME_FORMATS), order=st.randoms(use_true_random=False))
def test_condensed_chunks_decode_beside_plain_ones_in_chunk_order(rows: list[tuple[int, int | None, str | None]], buckets: int, fmt: str, order: Any) -> None:
    """A producer's condensed chunks (key and value) and another's plain ones (partial
    aggregates) of the same exchange, in any order, in memory and through the wire format:
    the reader sees the declared columns and dtypes, rows in chunk order, nulls kept (a count of
    a null is 0, a sum of it 0, its min null)."""
    raw = pl.DataFrame(rows, schema={"k": pl.Int64, "v": pl.Int32, "s": pl.String}, orient="row")
    expansion = Expansion((("k", "value", "k"), ("n", "one", None), ("c", "valid", "v"), ("t", "or_zero", "v"), ("lo", "value", "s"), ("hi", "value", "v")))
    declared = pl.Schema({"k": pl.Int64, "n": pl.Int64, "c": pl.Int64, "t": pl.Int64, "lo": pl.String, "hi": pl.Int32})
    full = raw.select(pl.col("k"), pl.lit(1, pl.Int64).alias("n"), pl.col("v").is_not_null().cast(pl.Int64).alias("c"), pl.col("v").fill_null(0).cast(pl.Int64).alias("t"), pl.col("s").alias("lo"), pl.col("v").alias("hi"))
    assert Condensed(raw, expansion, declared).expanded().equals(full)
    bucket = (raw["k"].to_numpy() % buckets).astype(np.int64)
    codec = FrameCodec(fmt)
    condensed = codec.encode(raw, bucket, buckets, origin=0, expansion=expansion)
    plain = codec.encode(full, bucket, buckets, origin=1)
    assert all(bytes(c.parts[0][:8]) == b"CRC1\0\0\0\0" and len(c.parts[0]) % 8 == 0 for c in condensed)  # messages stay 8-aligned
    chunks = condensed + plain
    order.shuffle(chunks)
    expected = pl.concat([full.filter(pl.Series(bucket == c.bucket)) for c in chunks]) if chunks else full.head(0)
    assert codec.decode(chunks, declared).equals(expected)
    wire = segments.decode(b"".join(bytes(b) for b in segments.encode(chunks)), "x")
    assert codec.decode(wire, declared).equals(expected)


def test_a_condensed_chunk_that_does_not_expand_to_the_declared_columns_is_refused() -> None:
    raw = pl.DataFrame({"k": [1, 2]})
    chunks = FrameCodec().encode(raw, np.zeros(2, np.int64), 1, 0, Expansion((("k", "value", "k"), ("n", "one", None))))
    with pytest.raises(ValueError, match=r"expands to columns \['k', 'n'\], but the exchange declares \['k', 'm'\]"):
        FrameCodec().decode(chunks, pl.Schema({"k": pl.Int64, "m": pl.Int64}))
    with pytest.raises(ValueError, match="cannot expand"):
        Expansion((("n", "one", "k"),))


def test_consecutive_condensed_chunks_are_expanded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer reads a chunk per producer and bucket (hundreds, of a few thousand rows):
    consecutive condensed ones of one schema are decoded and expanded together, once (a fixed
    half millisecond per chunk expanded apart was most of a 12M-group group-by's read)."""
    expansion = Expansion((("k", "value", "k"), ("n", "one", None)))
    declared = pl.Schema({"k": pl.Int64, "n": pl.Int64})
    codec = FrameCodec()
    chunks = [c for origin in range(30) for c in codec.encode(pl.DataFrame({"k": [origin, origin + 100]}), np.array([0, 1]), 2, origin, expansion)]
    plain = codec.encode(pl.DataFrame({"k": [7], "n": [3]}), np.array([0]), 1, 99)
    calls = []
    real = Expansion.apply
    monkeypatch.setattr(Expansion, "apply", lambda self, df, schema: calls.append(df.height) or real(self, df, schema))
    wire = segments.decode(b"".join(bytes(b) for b in segments.encode(chunks[:40] + plain + chunks[40:])), "x")
    got = codec.decode(wire, declared)
    assert calls == [40, 20]  # the plain chunk between them ends the first run
    assert got["k"].to_list() == [k for o in range(20) for k in (o, o + 100)] + [7] + [k for o in range(20, 30) for k in (o, o + 100)]
    assert got["n"].to_list() == [1] * 40 + [3] + [1] * 20
