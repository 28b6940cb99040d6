"""Reading Parquet splits: exactly the split's row groups (pruned ones leave gaps), every flat
type with its nulls, nested columns, footers larger than the bytes fetched with the column
chunks, and a file that is not Parquet (its error names it). Polars decodes what it maps as the
scan's schema says (the fast path); Arrow decodes the rest; neither ever reads bytes the task
did not fetch."""

from __future__ import annotations

import os
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from croupier.config import Config
from croupier.dag import scan
from croupier.dag.scan import ScanSpec, Split, chunk_ranges, parquet_schema, parquet_splits, read_split, resolve
from croupier.errors import InputError
from croupier.expr import col
from croupier.storage import open_store

ROWS = 5_000


def _table() -> pa.Table:
    """Every flat type a user's file may hold, with nulls; ``k`` ascends so that row groups prune."""
    k = list(range(ROWS))
    return pa.table(
        {
            "k": pa.array(k, pa.int64()),
            "i32": pa.array([None if i % 17 == 0 else i % 1000 for i in k], pa.int32()),
            "f": pa.array([i / 7 for i in k], pa.float64()),
            "flag": pa.array(["AR"[i % 2] for i in k], pa.string()),  # dictionary-encoded by the writer
            "text": pa.array([None if i % 11 == 0 else f"comment {i * 7919 % 10007} of row" for i in k], pa.string()),
            "d": pa.array([date(1995, 1, 1).toordinal() - date(1970, 1, 1).toordinal() + i % 900 for i in k], pa.date32()),
            "ts": pa.array([datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() * 1e6 + i for i in k], pa.int64()).cast(pa.timestamp("us", "UTC")),
            "dec": pa.array([Decimal(i) / 100 for i in k], pa.decimal128(12, 2)),
            "b": pa.array([i % 3 == 0 for i in k], pa.bool_()),
            "bin": pa.array([bytes([i % 256]) * 3 for i in k], pa.binary()),
        }
    )


@pytest.fixture(params=["in place", "fetched"])
def reading(request: pytest.FixtureRequest) -> str:
    """How a task gets a split's bytes: a local folder's file read in place, or (as from an
    object store) the column chunks fetched into a scratch copy with holes between them."""
    return str(request.param)


def _splits(path: Path, spec: ScanSpec, config: Config, parts: int = 4, reading: str = "in place") -> tuple[Any, list[Any], pl.Schema]:
    base, objects = resolve(path.as_uri(), lambda u: open_store(u, config))
    store = open_store(base, config)
    if reading == "fetched":  # the same bytes, fetched by ranged GETs as from S3
        store.open_local = lambda key: None
    splits, _ = parquet_splits(spec, base, store, objects, parts, 1, 1 << 30)
    return store, splits, parquet_schema(store, objects[0])


def _read_all(store: Any, spec: ScanSpec, splits: list[Any], schema: pl.Schema) -> pl.DataFrame:
    return pl.concat([read_split(store, spec, s, schema) for s in splits])


def test_splits_read_their_row_groups_around_pruned_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reading: str) -> None:
    """A predicate on ``k`` prunes row groups 2-3 and 5-7, so one split holds runs with gaps;
    rows, nulls and types equal the file's rows of the kept row groups, however it is split,
    and Polars decodes them all (the runs apart: one lazy scan shared between them read the
    holes between the runs, failed, and fell back to Arrow)."""
    used = _decoders(monkeypatch)
    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path, row_group_size=500)
    config = Config()
    keep = (col("k") < 1000) | ((col("k") >= 2000) & (col("k") < 2500)) | (col("k") >= 4000)
    spec = ScanSpec(str(path), "parquet", ("k", "flag", "text", "d", "ts", "dec", "i32", "f", "b", "bin"), keep)
    truth = pl.from_arrow(pq.read_table(path).take(pa.array([*range(1000), *range(2000, 2500), *range(4000, ROWS)])))
    assert isinstance(truth, pl.DataFrame)
    for parts, shape in ((1, [[0, 1, 4, 8, 9]]), (4, [[0], [1], [4], [8], [9]])):
        store, splits, schema = _splits(path, spec, config, parts, reading=reading)
        schema = pl.Schema({c: schema[c] for c in spec.columns or ()})
        assert [list(s.row_groups) for s in splits] == shape
        used.clear()
        got = _read_all(store, spec, splits, schema)
        assert got.schema == schema and got.equals(truth.select(list(schema)))
        assert used == [True] * len(splits)


def test_nested_columns_are_read_whole(tmp_path: Path, reading: str) -> None:
    path = tmp_path / "nested.parquet"
    table = pa.table({"k": pa.array(range(ROWS), pa.int64()), "xs": pa.array([[i, i + 1] if i % 5 else None for i in range(ROWS)], pa.list_(pa.int32()))})
    pq.write_table(table, path, row_group_size=700)
    spec = ScanSpec(str(path), "parquet")
    store, splits, schema = _splits(path, spec, Config(), reading=reading)
    got = _read_all(store, spec, splits, schema)
    assert got.equals(pl.read_parquet(path))


def test_a_footer_larger_than_the_fetched_tail_is_read(tmp_path: Path, reading: str) -> None:
    """300 columns in 20 row groups make a footer of several hundred kB."""
    path = tmp_path / "wide.parquet"
    table = pa.table({f"c{j:03d}": pa.array([i * j for i in range(2_000)], pa.int64()) for j in range(300)})
    pq.write_table(table, path, row_group_size=100)
    footer = int.from_bytes(path.read_bytes()[-8:-4], "little")
    assert footer > 64 * 1024  # more than the tail fetched with the column chunks
    spec = ScanSpec(str(path), "parquet", ("c007", "c299"))
    store, splits, schema = _splits(path, spec, Config(), reading=reading)
    got = _read_all(store, spec, splits, pl.Schema({c: schema[c] for c in ("c007", "c299")}))
    assert got.equals(pl.read_parquet(path, columns=["c007", "c299"]))


def test_a_file_that_is_not_parquet_fails_naming_it(tmp_path: Path, reading: str) -> None:
    good = tmp_path / "t.parquet"
    pq.write_table(_table(), good, row_group_size=1000)
    spec = ScanSpec(str(good), "parquet", ("k",))
    store, splits, schema = _splits(good, spec, Config(), reading=reading)
    good.write_bytes(good.read_bytes()[:-4] + b"XXXX")  # replaced after planning, as a concurrent writer might
    with pytest.raises(InputError, match=r"t\.parquet: cannot read as parquet"):
        read_split(store, spec, splits[0], pl.Schema({"k": schema["k"]}))


def _decoders(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, per split read, whether Polars decoded it (True) or Arrow had to (False)."""
    used: list[bool] = []
    polars_decode = scan._polars_decode

    def recording(*args: Any) -> pl.DataFrame | None:
        df = polars_decode(*args)
        used.append(df is not None)
        return df

    monkeypatch.setattr(scan, "_polars_decode", recording)
    return used


def test_polars_decodes_the_common_types_and_arrow_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reading: str) -> None:
    """Integers, floats, strings, dates, booleans, binary: the fast path; every column read either
    way equals the file's, with the scan's types."""
    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path, row_group_size=1000)
    used = _decoders(monkeypatch)
    for columns in (("k", "i32", "f", "flag", "text", "d", "b", "bin"), ("k", "ts", "dec")):
        spec = ScanSpec(str(path), "parquet", columns)
        store, splits, schema = _splits(path, spec, Config(), parts=1, reading=reading)
        schema = pl.Schema({c: schema[c] for c in columns})
        used.clear()
        got = _read_all(store, spec, splits, schema)
        truth = pl.from_arrow(pq.read_table(path, columns=list(columns)))
        assert got.schema == schema and got.equals(truth)
        if columns[1] == "i32":
            assert used and all(used), "the common types must not fall back to Arrow"


def test_nested_columns_of_a_projection_are_planned_and_read(tmp_path: Path, reading: str) -> None:
    """A struct and a list among other columns: the driver plans every leaf of the projected
    nested columns, so the task needs no second round of requests."""
    path = tmp_path / "nested.parquet"
    table = pa.table(
        {
            "k": pa.array(range(ROWS), pa.int64()),
            "s": pa.array([{"a": i, "b": f"x{i}"} if i % 4 else None for i in range(ROWS)], pa.struct([("a", pa.int32()), ("b", pa.string())])),
            "pad": pa.array([f"pad {i}" * 20 for i in range(ROWS)], pa.string()),
            "xs": pa.array([[i, i + 1] if i % 5 else None for i in range(ROWS)], pa.list_(pa.int32())),
        }
    )
    pq.write_table(table, path, row_group_size=700)
    columns = ("s", "xs")
    spec = ScanSpec(str(path), "parquet", columns)
    store, splits, schema = _splits(path, spec, Config(), reading=reading)
    meta = pq.read_metadata(path)
    for split in splits:
        for start, end in chunk_ranges(meta, split.row_groups, columns):
            assert any(s <= start and end <= e for s, e in split.ranges), "a nested leaf was left out of the plan"
    got = _read_all(store, spec, splits, pl.Schema({c: schema[c] for c in columns}))
    assert got.equals(pl.read_parquet(path, columns=list(columns)))


def test_a_task_fetches_chunks_its_plan_left_out(tmp_path: Path) -> None:
    """A split planned without byte ranges (or with too few) still reads right: the task checks
    what decoding needs against the footer and fetches the rest, so no decoder reads a hole of
    the sparse copy as data."""
    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path, row_group_size=1000)
    columns = ("k", "text", "dec")
    spec = ScanSpec(str(path), "parquet", columns)
    store, splits, schema = _splits(path, spec, Config(), parts=1, reading="fetched")
    bare = [Split(s.base, s.key, s.size, s.row_groups, ()) for s in splits]
    got = _read_all(store, spec, bare, pl.Schema({c: schema[c] for c in columns}))
    assert got.equals(pl.from_arrow(pq.read_table(path, columns=list(columns))))


def test_empty_row_groups_are_read_by_polars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reading: str) -> None:
    """Row groups of no rows between full ones (a writer flushed an empty table): their chunks
    start at the dictionary page (the data page offset is written as 0), which the plan fetches."""
    path = tmp_path / "empty-groups.parquet"
    n = 100_000
    table = pa.table({"k": pa.array(range(n), pa.int64()), "u": pa.array([f"unique value {i * 7919}" for i in range(n)]), "pad": pa.array([f"padding {i}" * 8 for i in range(n)])})
    with pq.ParquetWriter(path, table.schema) as writer:  # big row groups: the bytes between them are not fetched
        for start in range(0, n, 20_000):
            writer.write_table(table.slice(start, 20_000), row_group_size=20_000)
            writer.write_table(table.slice(0, 0))
    assert [pq.read_metadata(path).row_group(r).num_rows for r in range(2)] == [20_000, 0]
    used = _decoders(monkeypatch)
    spec = ScanSpec(str(path), "parquet", ("k", "u"))
    store, splits, schema = _splits(path, spec, Config(), parts=1, reading=reading)  # empty row groups inside the split
    got = _read_all(store, spec, splits, pl.Schema({c: schema[c] for c in ("k", "u")}))
    assert got.equals(pl.read_parquet(path, columns=["k", "u"])) and used == [True]


def test_short_writes_into_the_decoding_copy_are_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pwrite`` may write less than asked (a nearly full memory file system does): what it did
    not write would be a hole read as zeros, so the task writes the rest."""
    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path, row_group_size=1000)
    pwrite = scan.os.pwrite
    monkeypatch.setattr(scan.os, "pwrite", lambda fd, data, offset: pwrite(fd, memoryview(data)[:999], offset))
    columns = ("k", "text", "f")
    spec = ScanSpec(str(path), "parquet", columns)
    store, splits, schema = _splits(path, spec, Config(), parts=1, reading="fetched")
    got = _read_all(store, spec, splits, pl.Schema({c: schema[c] for c in columns}))
    assert got.equals(pl.read_parquet(path, columns=list(columns)))


def test_a_file_replaced_with_fewer_row_groups_fails_naming_it(tmp_path: Path, reading: str) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path, row_group_size=1000)
    spec = ScanSpec(str(path), "parquet", ("k",))
    store, splits, schema = _splits(path, spec, Config(), parts=1, reading=reading)
    pq.write_table(_table().slice(0, 1500), path, row_group_size=1000)  # 2 row groups now, not 5
    with pytest.raises(InputError, match=r"t\.parquet"):
        read_split(store, spec, splits[0], pl.Schema({"k": schema["k"]}))


def test_reading_leaves_no_files_and_no_descriptors(tmp_path: Path, reading: str) -> None:
    """The copy a task decodes is a memory file that is gone when it is closed (and when its
    process is killed): no file is left behind, no descriptor stays open."""
    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path, row_group_size=1000)
    spec = ScanSpec(str(path), "parquet", ("k", "text"))
    store, splits, schema = _splits(path, spec, Config(), reading=reading)
    before = len(list(Path("/proc/self/fd").iterdir()))
    _read_all(store, spec, splits, pl.Schema({c: schema[c] for c in ("k", "text")}))
    assert len(list(Path("/proc/self/fd").iterdir())) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_runs_far_apart_in_a_split_are_decoded_by_polars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reading: str) -> None:
    """Kept row groups with pruned ones between them, far enough apart that the bytes between
    are not fetched: each run is decoded apart (a lazy scan shared by the runs would read the
    holes between them, fail, and leave the split to Arrow)."""
    path = tmp_path / "far.parquet"
    n = 100_000
    pq.write_table(pa.table({"k": pa.array(range(n), pa.int64()), "u": pa.array([f"unique value {i * 7919}" for i in range(n)])}), path, row_group_size=10_000, use_dictionary=False)
    keep = (col("k") < 10_000) | ((col("k") >= 40_000) & (col("k") < 50_000)) | (col("k") >= 90_000)
    spec = ScanSpec(str(path), "parquet", ("k", "u"), keep)
    store, splits, schema = _splits(path, spec, Config(), parts=1, reading=reading)
    assert [list(s.row_groups) for s in splits] == [[0, 4, 9]] and len(splits[0].ranges) > 2  # three runs, holes between
    used = _decoders(monkeypatch)
    got = _read_all(store, spec, splits, pl.Schema({c: schema[c] for c in ("k", "u")}))
    truth = pl.read_parquet(path).filter((pl.col("k") < 10_000) | ((pl.col("k") >= 40_000) & (pl.col("k") < 50_000)) | (pl.col("k") >= 90_000))
    assert got.equals(truth) and used == [True]


def test_no_room_to_decode_is_not_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of memory or descriptors for the copy is the machine's state, not the file's fault:
    the error is not an InputError (which is never retried) and says what it could not do."""
    import errno

    from croupier.compute.local import DETERMINISTIC_ERRORS
    from croupier.errors import CroupierError

    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path, row_group_size=1000)
    spec = ScanSpec(str(path), "parquet", ("k",))
    store, splits, schema = _splits(path, spec, Config(), parts=1, reading="fetched")

    def no_room(*args: Any) -> int:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(scan.os, "memfd_create", no_room)
    with pytest.raises(CroupierError, match="cannot make room to decode .*t\\.parquet") as caught:
        read_split(store, spec, splits[0], pl.Schema({"k": schema["k"]}))
    assert not isinstance(caught.value, InputError) and type(caught.value).__name__ not in DETERMINISTIC_ERRORS


def test_a_local_file_is_read_in_place_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local folder's split is decoded from the file itself: no scratch copy is made (making
    one would fail here), no ranged GET is sent, and the column chunks' bytes are counted as read
    in place; an object store's split is fetched by ranged GETs instead."""
    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path, row_group_size=1000)
    columns = ("k", "text")
    spec = ScanSpec(str(path), "parquet", columns)
    schema = pl.Schema({c: pl.from_arrow(pq.read_table(path, columns=list(columns))).schema[c] for c in columns})
    truth = pl.read_parquet(path, columns=list(columns))

    store, splits, _ = _splits(path, spec, Config(), parts=2)
    planned = store.stats.snapshot()  # the driver's footer reads
    monkeypatch.setattr(scan.os, "memfd_create", lambda *a: (_ for _ in ()).throw(AssertionError("copied")))
    assert _read_all(store, spec, splits, schema).equals(truth)
    read = store.stats.minus(planned)
    assert read.requests("GET_RANGE") == read.requests("GET") == 0 and read.requests("OPEN") == len(splits) > 1
    assert read.bytes("READ_LOCAL") == sum(e - s for split in splits for s, e in split.ranges) > 0
    assert read.bytes_read == 0  # not a request the storage model prices
    monkeypatch.undo()

    store, splits, _ = _splits(path, spec, Config(), parts=2, reading="fetched")
    planned = store.stats.snapshot()
    assert _read_all(store, spec, splits, schema).equals(truth)
    read = store.stats.minus(planned)
    assert read.requests("GET_RANGE") >= len(splits) and read.bytes("READ_LOCAL") == 0


def test_a_local_file_replaced_by_one_of_another_size_fails_naming_it(tmp_path: Path) -> None:
    """Read in place, a file whose size is not the planned one was replaced since: refused as
    bad input naming it, not decoded against the plan's row groups."""
    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path, row_group_size=1000)
    spec = ScanSpec(str(path), "parquet", ("k",))
    store, splits, schema = _splits(path, spec, Config(), parts=1)
    pq.write_table(_table().slice(0, 4000), path, row_group_size=1000)  # 4 row groups of the 5 planned
    with pytest.raises(InputError, match=r"t\.parquet: is [\d,]+ bytes, but was [\d,]+ when the query was planned"):
        read_split(store, spec, splits[0], pl.Schema({"k": schema["k"]}))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="splits are read in place only where /proc/self/fd is")
def test_a_task_parses_an_unchanged_files_footer_once_and_a_replaced_ones_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read in place, a split's footer is remembered by the opened file (modification and change
    time, inode, size): reading the file's splits again parses none; a file replaced by another
    (a rename) and one rewritten in place with its modification time put back (``cp -p``) are
    parsed again and read as they now are."""
    from croupier.dag import scan

    monkeypatch.setattr(scan, "_FOOTERS", type(scan._FOOTERS)())
    monkeypatch.setattr(scan, "_footer_bytes", 0)
    parsed: list[str] = []
    read_metadata = scan.pq.read_metadata
    monkeypatch.setattr(scan.pq, "read_metadata", lambda source, *a, **k: parsed.append(str(source)) or read_metadata(source, *a, **k))
    path = tmp_path / "t.parquet"
    plain = {"row_group_size": 1000, "compression": "none", "use_dictionary": False, "write_statistics": False}  # sizes that do not depend on the values

    def write(target: Path, first: int) -> None:  # 4 row groups of 1,000 keys from ``first``, always the same size
        pq.write_table(pa.table({"k": pa.array(range(first, first + 4000), pa.int64())}), target, **plain)

    write(path, 0)
    spec = ScanSpec(str(path), "parquet", ("k",))
    store, splits, schema = _splits(path, spec, Config(), parts=2)
    assert len(splits) > 1
    scan._FOOTERS.clear()  # as in a worker: the driver's footers stay in the driver
    first = len(parsed)
    assert _read_all(store, spec, splits, schema)["k"].to_list() == list(range(4000))
    assert len(parsed) == first + 1, "one parse for all the file's splits"
    assert _read_all(store, spec, splits, schema)["k"].to_list() == list(range(4000))
    assert len(parsed) == first + 1, "none when read again"
    # rewritten in place (same inode, same size), its modification time put back
    stat = path.stat()
    fresh = tmp_path / "fresh.parquet"
    write(fresh, 10_000)
    data = fresh.read_bytes()
    assert len(data) == stat.st_size, "the case this test is about: the same size"
    with open(path, "r+b") as f:  # overwritten where it is, not truncated
        f.write(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_ino == stat.st_ino and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert _read_all(store, spec, splits, schema)["k"].to_list() == list(range(10_000, 14_000))
    assert len(parsed) == first + 2, "the rewritten file's footer parsed again"
    # replaced by a rename: another inode
    other = tmp_path / "other.parquet"
    write(other, 50_000)
    os.replace(other, path)
    assert _read_all(store, spec, splits, schema)["k"].to_list() == list(range(50_000, 54_000))
    assert len(parsed) == first + 3, "the replaced file's footer parsed again"


def test_operators_that_gather_rows_get_one_chunk_per_column_whatever_the_first_column() -> None:
    """Scans hand on a chunk per row group; joins, sorts, windows and exchange buckets make every
    column contiguous first, also when the first column is whole (a literal added after the scan)."""
    from croupier.ops.partition import contiguous

    parts = [pl.DataFrame({"a": [i, i + 1], "b": ["x", "y"]}) for i in range(3)]
    df = pl.concat(parts, rechunk=False).with_columns(pl.lit(1).alias("c")).select("c", "a", "b")
    assert df.n_chunks("all")[0] == 1 and max(df.n_chunks("all")) > 1, "the case this test is about"
    assert contiguous(df).n_chunks("all") == [1, 1, 1] and contiguous(df).equals(df)


def test_split_counts_guess_the_rows_a_predicate_keeps_and_their_decoded_bytes(tmp_path: Path) -> None:
    """From the footers alone: ``rows_kept`` guesses what the predicate keeps (the row groups it
    cannot prune, each by where its constant falls between the group's min and max), and
    ``bytes_decoded`` what the chunks take in memory (8 bytes an int64 value, however well the
    file compressed them)."""
    n = 100_000
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"k": pa.array(range(n), pa.int64()), "c": pa.array([i % 3 for i in range(n)], pa.int64())}), path, row_group_size=10_000)
    spec = ScanSpec(path.as_uri(), "parquet", ("k", "c"), predicate=col("k") < 25_000)
    config = Config()
    base, objects = resolve(path.as_uri(), lambda u: open_store(u, config))
    _, counts = parquet_splits(spec, base, open_store(base, config), objects, 4, 1, 1 << 30)
    assert counts["row_groups"] - counts["row_groups_pruned"] == 3
    assert counts["rows_read"] == 30_000
    assert counts["rows_kept"] == pytest.approx(25_000, rel=0.01)
    assert counts["bytes_decoded"] == 30_000 * 2 * 8
    assert counts["bytes_needed"] < counts["bytes_decoded"] / 2  # "c" (three values) compresses to little


@pytest.mark.parametrize("decoder", ["polars", "arrow"])
def test_a_predicate_of_comparisons_filters_while_decoding_and_a_like_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reading: str, decoder: str) -> None:
    """Comparisons, logic and set membership that keep few rows are evaluated by the read itself
    (Polars' decoder, or after Arrow's), so the plan has no filter operator for them; a string
    function, or a condition most rows pass, stays an operator after the read. Either way the rows kept are the file's rows the predicate accepts,
    with nulls (a NULL comparison keeps no row)."""
    import croupier
    from croupier.dag.operators import Filter as FilterOp

    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path, row_group_size=1000)
    if decoder == "arrow":
        monkeypatch.setattr(scan, "_polars_decode", lambda *args: None)
    truth = pl.from_arrow(pq.read_table(path))
    plain = (col("flag") == "A") & col("i32").is_in([3, 5, 700]) | (col("text") == "comment 1 of row") | (col("k") < 4) & ~col("d").is_null()
    spec = ScanSpec(str(path), "parquet", ("k", "i32", "flag", "text", "d"), plain)
    assert scan.filters_in_read(spec)
    store, splits, schema = _splits(path, spec, Config(), parts=3, reading=reading)
    got = pl.concat([read_split(store, spec, s, pl.Schema(schema), filters=True) for s in splits])
    assert got.equals(truth.select(spec.columns).filter(plain.to_polars())) and 0 < got.height < ROWS
    assert _read_all(store, spec, splits, pl.Schema(schema)).height == ROWS  # not asked to filter
    # what decoding cost depends on: every row of the split's row groups, not the rows kept
    assert sum(scan.read_split_decoded(store, spec, s, pl.Schema(schema), True)[1] for s in splits) == ROWS
    assert not scan.filters_in_read(ScanSpec(str(path), "parquet", ("text",), col("text").str.contains("of")))
    # a cast that can fail is the query's error, reported by the operator, not a file's
    assert not scan.filters_in_read(ScanSpec(str(path), "parquet", ("text",), col("text").cast(pl.Int32) > 1))
    assert scan.filters_in_read(ScanSpec(str(path), "parquet", ("text",), col("text").cast(pl.Int32, strict=False) > 1))
    # where most rows pass, the filter stays an operator of the stage's lazy query
    assert not scan.filters_in_read(spec, kept=0.9) and scan.filters_in_read(spec, kept=0.1)
    for predicate, in_read in ((plain, True), (col("text").str.contains("7 of"), False), (col("k") > 100, False)):
        frame = croupier.scan_parquet(str(path), config=Config()).filter(predicate).select("k", "text")
        assert frame.collect().equals(truth.filter(predicate.to_polars()).select("k", "text"))
        stages = frame.last_run.compiler.stages  # the run's plan: the share kept is guessed from the footers
        ops = [o for s in stages for op in s.ops for o in (getattr(op, "steps", None) or (op,))]
        assert any(isinstance(o, FilterOp) for o in ops) != in_read, predicate.show()


def test_reads_are_priced_per_codec_under_one_kind_for_planner_and_tasks(tmp_path: Path) -> None:
    """Decoding costs depend on the compression (Polars decodes zstd in 1.8x the time of snappy),
    so a scan's phase kind names its files' codec, read with the schema from the first footer:
    the planner prices and the tasks report the same kind (the calibration, written in both
    codecs, prices each apart: tests/test_calibration.py). A sink writes the compression asked
    for; a wrong one fails before anything runs."""
    import croupier
    from croupier.errors import ConfigError

    config = Config(concurrency=2, progress=False, calibration="off", tmp_url=(tmp_path / "tmp").as_uri())
    frame = pl.DataFrame({"k": [i % 5 for i in range(3000)], "v": list(range(3000))})
    for codec in ("snappy", "zstd", "lz4"):
        (tmp_path / codec).mkdir()
        for i in range(2):
            frame.slice(i * 1500, 1500).write_parquet(tmp_path / codec / f"p{i}.parquet", compression=codec)  # type: ignore[arg-type]
        frame.head(0).write_parquet(tmp_path / codec / "a-empty.parquet", compression=codec)  # type: ignore[arg-type]  # first, and no row groups: no codec to read
        scanned = croupier.scan_parquet(str(tmp_path / codec), config=config)
        result = scanned.group_by("k").agg(croupier.col("v").sum()).sort("k")
        assert result.collect().equals(frame.group_by("k").agg(pl.col("v").sum()).sort("k"))
        assert result.last_run is not None
        reported = {k.split("#")[0] for s in result.last_run.report.stages for k in s.phases if k.startswith("read:parquet")}
        assert reported == {f"read:parquet-{codec}"}
    written = croupier.scan_parquet(str(tmp_path / "zstd"), config=config).sink_parquet(str(tmp_path / "out"), compression="snappy")
    assert written and all(scan.parquet_codec(pq.read_metadata(f.removeprefix("file://"))) == "snappy" for f in written)
    with pytest.raises(ConfigError, match="compression 'zip' is not one of"):
        croupier.scan_parquet(str(tmp_path / "zstd"), config=config).sink_parquet(str(tmp_path / "bad"), compression="zip")
    assert not (tmp_path / "bad").exists()
