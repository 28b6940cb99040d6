"""TPC-H 1, 3, 5, 6, 10, 12, 18 and TPC-DS 1 in the lazy API return exactly DuckDB's answers.

Tables from DuckDB's own generators at a small scale, on the local folder and on SeaweedFS; once
more with broadcast joins and one-task sorts turned off, so the shuffle-join and range-sort paths
are checked against the same reference.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import croupier.frame as cf
from croupier.config import Config
from croupier.examples.tpc import TPCDS, TPCH, compare, generate, reference
from croupier.storage import open_store

from .conftest import leftover_tmp

SCALE = 0.01


@pytest.fixture(scope="session")
def tpc_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    root = tmp_path_factory.mktemp("tpc")
    return {"tpch": generate("tpch", SCALE, root / "tpch"), "tpcds": generate("tpcds", SCALE, root / "tpcds")}


@pytest.fixture(scope="session")
def answers(tpc_data: dict[str, dict[str, Path]]) -> dict[tuple[str, int], object]:
    """DuckDB's results, computed once."""
    out = {("tpch", n): reference("tpch", n, tpc_data["tpch"]) for n in TPCH}
    out[("tpcds", 1)] = reference("tpcds", 1, tpc_data["tpcds"])
    return out


def _tables(kind: str, paths: dict[str, Path], root: str, config: Config) -> dict[str, cf.LazyFrame]:
    """Scan frames for ``paths``, uploaded under ``root`` (the store under test)."""
    store = open_store(root, config)
    frames = {}
    for name, path in paths.items():
        key = f"{kind}/{name}/part-0.parquet"
        store.put(key, path.read_bytes())
        frames[name] = cf.scan_parquet(f"{root}/{kind}/{name}/", config=config)
    return frames


def _check_all(root: str, config: Config, tpc_data: dict[str, dict[str, Path]], answers: dict) -> None:
    tables = {kind: _tables(kind, tpc_data[kind], root, config) for kind in ("tpch", "tpcds")}
    failures = {}
    for kind, queries in (("tpch", TPCH), ("tpcds", TPCDS)):
        for number, query in queries.items():
            result = query(tables[kind]).collect()
            problems = compare(result, answers[(kind, number)])
            if problems:
                failures[f"{kind} q{number}"] = problems[:3]
    assert not failures, failures
    assert leftover_tmp(root, config) == []


def test_tpc_queries_match_duckdb(store_env: tuple[str, Config], tpc_data: dict, answers: dict) -> None:
    root, config = store_env
    _check_all(root, config.with_(tmp_url=root), tpc_data, answers)


def test_tpc_queries_match_duckdb_with_shuffle_joins_and_range_sorts(tmp_path: Path, tpc_data: dict, answers: dict) -> None:
    config = Config(concurrency=2, broadcast_limit=0, gather_limit=0, exchange_buckets=16)
    root = (tmp_path / "store").as_uri()
    _check_all(root, config.with_(tmp_url=root), tpc_data, answers)


def test_explain_after_a_run_shows_stages_p_and_decisions(tmp_path: Path, tpc_data: dict) -> None:
    config = Config(concurrency=2, tmp_url=(tmp_path / "tmp").as_uri())
    tables = {n: cf.scan_parquet(p, config=config) for n, p in tpc_data["tpch"].items()}
    text = TPCH[5](tables).explain(analyze=True)
    assert "physical stages as run" in text
    assert "selector:" in text and "-> broadcast join" in text
    assert "row groups read" in text
