"""Issue 12, promise 7 (input checked before anything is committed): a stray non-record file in a
gensort folder, Parquet keys of another length or null in a later file, a CSV row with too few
fields — each an error naming the object (and column or byte offset), with no output committed.
On the local folder and on SeaweedFS, through the CLI and the Python API."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import croupier.frame as cf
from croupier.cli import main
from croupier.config import Config
from croupier.errors import CroupierError, InputError
from croupier.jobs.gensort import gensort
from croupier.ops.gensort import generate
from croupier.jobs.sort import sort
from croupier.storage import open_store


def _cli(config: Config, *args: str) -> tuple[int, str]:
    endpoint = ["--s3-endpoint", config.s3.endpoint] if config.s3.endpoint else []
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "guards-secret"}
    result = CliRunner(env=env).invoke(main, ["--concurrency", "2", "--no-progress", "--no-calibrate", *endpoint, *args])
    return result.exit_code, result.output


def _nothing_written(url: str, config: Config) -> None:
    keys = [o.key for o in open_store(url, config).list()] if _exists(url, config) else []
    assert [k for k in keys if "_croupier_tmp/" not in k and "_croupier_lock" not in k] == [], keys


def _exists(url: str, config: Config) -> bool:
    return bool(open_store(url, config).list())


def _parquet(keys: list[bytes | None], key_type: pa.DataType = pa.binary()) -> bytes:
    payload = [bytes(90)] * len(keys)
    sink = io.BytesIO()
    pq.write_table(pa.table({"key": pa.array(keys, key_type), "payload": pa.array(payload, pa.binary(90))}), sink)
    return sink.getvalue()


def _keys(n: int, seed: int, width: int = 10) -> list[bytes | None]:
    rng = np.random.default_rng(seed)
    return [rng.bytes(width) for _ in range(n)]


def test_stray_file_in_a_gensort_folder(store_env: tuple[str, Config]) -> None:
    """A folder of records from another tool (no Croupier manifest) with a README beside them."""
    url, config = store_env
    store = open_store(f"{url}/in", config)
    for i in range(2):
        store.put(f"part-{i}", generate(i * 150, 150, 7).tobytes())
    store.put("README.txt", b"x" * 300)  # 3 "records" by size
    code, text = _cli(config, "sort", f"{url}/in", f"{url}/out")
    assert code == 1 and "README.txt" in text and "not a gensort record file" in text and "Traceback" not in text
    with pytest.raises(InputError, match="README.txt"):
        sort(f"{url}/in", f"{url}/out", 2, config)
    with pytest.raises(InputError, match="README.txt"):
        cf.scan_gensort(f"{url}/in", config=config).collect()
    _nothing_written(f"{url}/out", config)
    store.delete(["README.txt"])
    store.put("part-99", b"y" * 250)  # a stray file with a record-like name: its size gives it away
    code, text = _cli(config, "sort", f"{url}/in", f"{url}/out")
    assert code == 1 and "part-99" in text and "not a multiple" in text
    _nothing_written(f"{url}/out", config)
    store.delete(["part-99"])
    assert sort(f"{url}/in", f"{url}/out", 2, config).summary["records"] == 300


def test_a_croupier_output_is_read_by_its_manifest(store_env: tuple[str, Config]) -> None:
    """A README beside a gensort output is not part of it: the manifest lists the parts."""
    url, config = store_env
    gensort(f"{url}/in", 30_000, 2, config)
    open_store(f"{url}/in", config).put("README.txt", b"x" * 300)
    code, text = _cli(config, "sort", f"{url}/in", f"{url}/out")
    assert code == 0 and "records: 300" in text, text


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (_keys(50, 2, width=12), r"b\.parquet: column 'key' row 0 is 12 bytes long"),
        (_keys(49, 3) + [b"short"], r"b\.parquet: column 'key' row 49 is 5 bytes long"),
        (_keys(20, 4) + [None] + _keys(5, 5), r"b\.parquet: column 'key' is null in row 20"),
    ],
    ids=["longer", "one-short", "null"],
)
def test_bad_keys_in_a_later_parquet_file(store_env: tuple[str, Config], bad: list[bytes | None], says: str) -> None:
    url, config = store_env
    store = open_store(f"{url}/in", config)
    store.put("a.parquet", _parquet(_keys(200, 1)))
    store.put("b.parquet", _parquet(bad))
    code, text = _cli(config, "sort", f"{url}/in", f"{url}/out", "--format", "parquet")
    assert code == 1 and "Traceback" not in text
    assert __import__("re").search(says, text), text
    with pytest.raises(CroupierError, match=says):
        sort(f"{url}/in", f"{url}/out", 2, config, out_format="parquet")
    _nothing_written(f"{url}/out", config)


def test_csv_row_with_too_few_fields(store_env: tuple[str, Config]) -> None:
    url, config = store_env
    good = "a,b,c\n" + "".join(f"{i},{i},x{i}\n" for i in range(3000))
    open_store(f"{url}/t", config).put("short.csv", (good + "7,8\n9,9,z\n").encode())
    says = rf"short.csv: row starting at byte {len(good):,}: 2 fields, expected 3 \(a, b, c\)"
    with pytest.raises(CroupierError, match=says):
        cf.scan_csv(f"{url}/t", config=config).collect()
    code, text = _cli(config, "sql", "select a, count(*) n from t group by a", "--table", f"t={url}/t/short.csv", "--out", f"{url}/out")
    assert code == 1 and __import__("re").search(says, text), text
    _nothing_written(f"{url}/out", config)
    # an empty last field is a value, not a missing one
    open_store(f"{url}/t", config).put("short.csv", (good + "7,8,\n").encode())
    assert len(cf.scan_csv(f"{url}/t", config=config).collect()) == 3001
