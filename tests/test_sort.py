"""TeraSort end to end: gensort -> sort -> valsort, on the local folder and on SeaweedFS.

Every sort is checked by valsort (global order, record count, checksum equal to the input's), and
every run must leave no intermediate object behind, on success and on failure.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pytest

from croupier.compute import LocalExecutor, Task
from croupier.config import Config
from croupier.errors import ConfigError, InputError, OutputExistsError, TaskError
from croupier.exchange.plan import ExchangePlan
from croupier.jobs.common import read_manifest
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.ops.records import KEY_SIZE
from croupier.storage import open_store
from tests import data, helpers
from tests.conftest import leftover_tmp


@pytest.fixture(scope="module")
def executor() -> Iterator[LocalExecutor]:
    with LocalExecutor(Config(concurrency=2)) as ex:
        yield ex


def sort_and_validate(in_url: str, out_url: str, config: Config, executor: LocalExecutor, workers: int, fmt: str = "gensort") -> int:
    """Sort, then valsort against the input; assert it is valid and clean; return the record count."""
    report = sort(in_url, out_url, workers, config, fmt, executor=executor)
    result, _ = valsort(out_url, config, in_url, executor=executor)
    assert result.ok, result.problems
    assert result.records == result.input_records == report.summary["records"]
    assert result.checksum == result.input_checksum
    assert leftover_tmp(out_url, config) == []
    manifest = read_manifest(open_store(out_url, config))
    assert manifest is not None and len(manifest["parts"]) == workers
    return result.records


def test_gensort_sort_valsort_uniform(store_env: tuple[str, Config], executor: LocalExecutor) -> None:
    root, config = store_env
    gensort(f"{root}/in", 2_000_000, parts=3, config=config, seed=5, executor=executor)
    assert sort_and_validate(f"{root}/in", f"{root}/out", config, executor, workers=4) == 20_000


def test_ascii_records_and_parquet_output(store_env: tuple[str, Config], executor: LocalExecutor) -> None:
    root, config = store_env
    gensort(f"{root}/in", 1_500_000, parts=2, config=config, ascii_keys=True, executor=executor)
    assert sort_and_validate(f"{root}/in", f"{root}/out", config, executor, workers=3, fmt="parquet") == 15_000
    keys = [o.key for o in open_store(f"{root}/out", config).list()]
    parts = helpers.output_parts(f"{root}/out", config)
    assert keys == ["_SUCCESS", *parts] and len(parts) == 3
    assert all(p.startswith(f"part-{i:05d}-") and p.endswith(".parquet") for i, p in enumerate(parts))


@pytest.mark.parametrize("records, workers", [(data.skewed(30_000), 5), (data.all_equal(12_000), 4)], ids=["skewed", "all-equal"])
def test_skewed_and_duplicate_keys_are_balanced(tmp_path, executor: LocalExecutor, records: np.ndarray, workers: int) -> None:  # type: ignore[no-untyped-def]
    config = Config(concurrency=2)
    data.write_parts((tmp_path / "in").as_uri(), config, records, parts=3)
    out = (tmp_path / "out").as_uri()
    sort_and_validate((tmp_path / "in").as_uri(), out, config, executor, workers)
    sizes = [p["records"] for p in read_manifest(open_store(out, config))["parts"]]  # type: ignore[index]
    assert max(sizes) < 1.5 * len(records) / workers, sizes


def test_parquet_input_is_sorted(tmp_path, executor: LocalExecutor) -> None:  # type: ignore[no-untyped-def]
    config = Config(concurrency=2)
    records = data.skewed(9_000)
    data.write_parts((tmp_path / "in").as_uri(), config, records, parts=4, fmt="parquet")
    assert sort_and_validate((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), config, executor, workers=3) == 9_000


@pytest.mark.parametrize("n, workers", [(1, 4), (3, 5), (0, 3), (7, 1)], ids=["one-record", "fewer-records-than-workers", "empty", "single-worker"])
def test_tiny_and_empty_inputs(tmp_path, executor: LocalExecutor, n: int, workers: int) -> None:  # type: ignore[no-untyped-def]
    config = Config(concurrency=2)
    data.write_parts((tmp_path / "in").as_uri(), config, data.uniform(n), parts=2)
    assert sort_and_validate((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), config, executor, workers) == n


def test_same_p_gives_byte_identical_output_for_every_encoding(store_env: tuple[str, Config], executor: LocalExecutor) -> None:
    root, config = store_env
    inp = f"{root}/in"
    data.write_parts(inp, config, data.all_equal(5_000), parts=2)
    outputs = []
    for name, fmt in (("a", "raw"), ("b", "arrow-lz4"), ("c", "arrow-zstd")):
        out = f"{root}/{name}"
        sort(inp, out, 3, config.with_(intermediate_format=fmt), executor=executor)
        store = open_store(out, config)
        outputs.append([bytes(store.get(k)) for k in helpers.output_parts(out, config)])
    assert outputs[0] == outputs[1] == outputs[2]


def test_request_counts_follow_the_direct_plan(tmp_path, executor: LocalExecutor) -> None:  # type: ignore[no-untyped-def]
    config = Config(concurrency=2)
    gensort((tmp_path / "in").as_uri(), 500_000, parts=2, config=config, executor=executor)
    p = 4
    report = sort((tmp_path / "in").as_uri(), (tmp_path / "out").as_uri(), p, config, executor=executor, plan=ExchangePlan.direct(p))
    assert report.stage("map").exchange.requests("PUT") == p * p
    assert report.stage("reduce").exchange.requests("GET") == p * p
    assert report.stage("reduce").io.requests("PUT") == p
    header = 8 + 24  # every segment: magic, count, one (bucket, producer, rows, bytes) entry
    assert report.stage("map").exchange.bytes_written == report.stage("reduce").exchange.bytes_read
    assert 500_000 + p * p * 8 <= report.stage("map").exchange.bytes_written <= 500_000 + p * p * header
    renewals = sum(s.io.requests("PUT") for s in report.stages if s.name == "lease")  # only on a very slow run
    # + the _SUCCESS manifest, the run's lease, the output lock taken and renewed at the commit
    assert report.to_dict()["totals"]["requests"]["PUT"] == p * p + p + 1 + 3 + renewals


class FailingExecutor(LocalExecutor):
    """The real local executor, except that one named task raises (fault injection)."""

    def __init__(self, config: Config, fail_task: str) -> None:
        super().__init__(config, task_attempts=1)
        self.fail_task = fail_task

    def map(self, tasks: Sequence[Task], config: Config | None = None, on_done=None):  # type: ignore[no-untyped-def,override]
        tasks = [Task(t.id, helpers.fail_with, (f"injected failure in {t.id}",)) if t.id == self.fail_task else t for t in tasks]
        return super().map(tasks, config, on_done)


@pytest.mark.parametrize("fail_task", ["map-1", "reduce-2"])
def test_failure_leaves_no_intermediate_or_partial_output(store_env: tuple[str, Config], fail_task: str) -> None:
    root, config = store_env
    with FailingExecutor(Config(concurrency=2), fail_task) as ex:
        gensort(f"{root}/in", 1_000_000, parts=2, config=config, executor=ex)
        with pytest.raises(TaskError, match=f"injected failure in {fail_task}"):
            sort(f"{root}/in", f"{root}/out", 4, config, executor=ex)
    assert open_store(f"{root}/out", config).list() == []


def test_failed_overwrite_leaves_the_old_output_untouched(store_env: tuple[str, Config]) -> None:
    """Outputs become visible only at commit: a sort that fails keeps the previous output whole."""
    root, config = store_env
    gensort(f"{root}/in", 1_000_000, parts=2, config=config)
    sort(f"{root}/in", f"{root}/out", 3, config)
    before = {o.key: bytes(open_store(f"{root}/out", config).get(o.key)) for o in open_store(f"{root}/out", config).list()}
    assert "_SUCCESS" in before and len(before) == 4
    with FailingExecutor(Config(concurrency=2), "reduce-1") as ex:
        with pytest.raises(TaskError):
            sort(f"{root}/in", f"{root}/out", 5, config, overwrite=True, executor=ex)
    after = {o.key: bytes(open_store(f"{root}/out", config).get(o.key)) for o in open_store(f"{root}/out", config).list()}
    assert after == before
    sort(f"{root}/in", f"{root}/out", 5, config, overwrite=True)
    keys = sorted(o.key for o in open_store(f"{root}/out", config).list())
    parts = helpers.output_parts(f"{root}/out", config)
    assert keys == ["_SUCCESS", *parts] and len(parts) == 5  # the 3 old parts replaced
    result, _ = valsort(f"{root}/out", config, input_url=f"{root}/in")
    assert result.ok


def test_truncated_gensort_input_is_named_and_nothing_is_written(tmp_path, executor: LocalExecutor) -> None:  # type: ignore[no-untyped-def]
    config = Config(concurrency=2)
    inp = (tmp_path / "in").as_uri()
    data.write_parts(inp, config, data.uniform(100), parts=2)
    open_store(inp, config).put("part-00002.dat", b"x" * 150)
    with pytest.raises(InputError, match=r"part-00002.dat: size 150 bytes is not a multiple of the 100-byte record size"):
        sort(inp, (tmp_path / "out").as_uri(), 2, config, executor=executor)
    assert open_store((tmp_path / "out").as_uri(), config).list() == []


def test_corrupt_parquet_input_is_named(tmp_path, executor: LocalExecutor) -> None:  # type: ignore[no-untyped-def]
    config = Config(concurrency=2)
    inp = (tmp_path / "in").as_uri()
    data.write_parts(inp, config, data.uniform(100), parts=2, fmt="parquet")
    store = open_store(inp, config)
    good = bytes(store.get("part-00001.parquet"))
    store.put("part-00001.parquet", good[: len(good) // 2])
    with pytest.raises(TaskError, match=r"part-00001.parquet.*Parquet"):
        sort(inp, (tmp_path / "out").as_uri(), 2, config, executor=executor)
    assert open_store((tmp_path / "out").as_uri(), config).list() == []


def test_missing_input_and_existing_output_are_refused(tmp_path, executor: LocalExecutor) -> None:  # type: ignore[no-untyped-def]
    config = Config(concurrency=2)
    with pytest.raises(InputError, match="no input objects under"):
        sort((tmp_path / "nothing").as_uri(), (tmp_path / "out").as_uri(), 2, config, executor=executor)
    inp, out = (tmp_path / "in").as_uri(), (tmp_path / "out2").as_uri()
    data.write_parts(inp, config, data.uniform(10), parts=1)
    open_store(out, config).put("precious.txt", b"keep me")
    with pytest.raises(OutputExistsError, match="--overwrite"):
        sort(inp, out, 2, config, executor=executor)
    assert bytes(open_store(out, config).get("precious.txt")) == b"keep me"
    with pytest.raises(ConfigError, match="workers must be >= 1"):
        sort(inp, out, 0, config, executor=executor)


def test_valsort_catches_disorder_loss_and_corruption(tmp_path, executor: LocalExecutor) -> None:  # type: ignore[no-untyped-def]
    config = Config(concurrency=2)
    inp, out = (tmp_path / "in").as_uri(), (tmp_path / "out").as_uri()
    data.write_parts(inp, config, data.uniform(3000), parts=2)
    sort(inp, out, 3, config, executor=executor)
    store = open_store(out, config)
    names = helpers.output_parts(out, config)
    originals = {k: bytes(store.get(k)) for k in names}

    def check(problem: str) -> None:
        result, _ = valsort(out, config, inp, executor=executor)
        assert not result.ok and any(problem in p for p in result.problems), result.problems
        for key, blob in originals.items():
            store.put(key, blob)

    p0, p1, p2 = names
    part = bytearray(originals[p1])
    part[0:100], part[100:200] = part[100:200], part[0:100]
    store.put(p1, bytes(part))
    check("out of order")
    store.put(p2, originals[p0][:100] + originals[p2][100:])
    check("below the last key")
    store.put(p1, originals[p1][:-100])
    check("record count")
    part = bytearray(originals[p0])
    part[KEY_SIZE + 5] ^= 0xFF
    store.put(p0, bytes(part))
    check("checksum")
    assert valsort(out, config, inp, executor=executor)[0].ok


def test_samples_carry_the_true_row_positions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Each sampled B holds (key bytes 8-9, row number within the object) of the record it came from."""
    from croupier.ops.partition import ROWPOS_BITS
    from croupier.ops.terasort import Piece, sample_pieces
    from croupier.ops.records import key_columns

    config = Config(concurrency=2)
    records = data.uniform(5000)
    url = (tmp_path / "in").as_uri()
    data.write_parts(url, config, records, parts=1)
    piece = Piece("part-00000.dat", "gensort", 1000, 4000, 1000)
    [(n, a_bytes, b_bytes)] = sample_pieces(open_store(url, config), [piece], 300, seed=3)
    a, b = np.frombuffer(a_bytes, np.uint64), np.frombuffer(b_bytes, np.uint64)
    rows = (b & np.uint64((1 << ROWPOS_BITS) - 1)).astype(np.int64)
    assert n == 3000 and len(rows) >= 100 and (rows >= 1000).all() and (rows < 4000).all()
    hi, lo = key_columns(records[rows])
    assert (a == hi).all() and ((b >> np.uint64(ROWPOS_BITS)) == lo).all()
