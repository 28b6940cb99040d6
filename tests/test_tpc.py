"""TPC-H 1, 3, 5, 6, 10, 12, 18 and TPC-DS 1 in the lazy API return exactly DuckDB's answers.

Tables from DuckDB's own generators at a small scale, each cut into several files (so every plan
runs in several tasks), on the local folder and on SeaweedFS; then once per exchange algorithm
family forced on every exchange (direct, direct+wc, 2-level, 2-level+wc, 3-level where P allows)
with broadcast joins and one-task sorts turned off, so every algorithm serves group-by, join and
sort — and every exchange's measured requests equal its plan's formula.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import croupier.frame as cf
from croupier.report import served_requests
from croupier.config import Config
from croupier.examples.tpc import TPCDS, TPCDS_TABLES, TPCH, TPCH_TABLES, compare, reference

from .conftest import leftover_tmp
from .tpc_sql_common import upload_parts


@pytest.fixture(scope="session")
def tpc_data(tpc_sql_data: dict[str, dict[str, Path]]) -> dict[str, dict[str, Path]]:
    """The tables the frame-API queries read (``generate``'s default ones), at scale 0.01: those of
    the session's ``tpc_sql_data`` (the same generator, scale and row groups), not generated twice."""
    return {kind: {t: tpc_sql_data[kind][t] for t in tables} for kind, tables in (("tpch", TPCH_TABLES), ("tpcds", TPCDS_TABLES))}


@pytest.fixture(scope="session")
def answers(tpc_data: dict[str, dict[str, Path]]) -> dict[tuple[str, int], object]:
    """DuckDB's results, computed once."""
    out = {("tpch", n): reference("tpch", n, tpc_data["tpch"]) for n in TPCH}
    out[("tpcds", 1)] = reference("tpcds", 1, tpc_data["tpcds"])
    return out


PARTS = 3


def _tables(kind: str, paths: dict[str, Path], root: str, config: Config) -> dict[str, cf.LazyFrame]:
    """Scan frames for ``paths``, uploaded under ``root`` (the store under test) in PARTS files of
    two row groups each."""
    urls = upload_parts(kind, paths, root, config, PARTS, row_groups=2)
    return {name: cf.scan_parquet(url, config=config) for name, url in urls.items()}


def _exchanges_follow_their_plans(frame: cf.LazyFrame) -> list[str]:
    """Every exchange of the last run whose measured requests differ from its plan's formula."""
    assert frame.last_run is not None and frame.last_run.report is not None
    bad = []
    for entry in frame.last_run.report.exchanges:
        if served_requests(entry) != entry["predicted_requests"]:
            bad.append(f"{entry['producer']}->{entry['consumer']} {entry['plan']}: measured {entry['measured_requests']} (+ cached {entry.get('cached_requests', {})}), plan {entry['predicted_requests']}")
    return bad


def _check_all(root: str, config: Config, tpc_data: dict[str, dict[str, Path]], answers: dict) -> list[str]:
    """Run every query; assert DuckDB's answers; return the run's exchange plans (names)."""
    tables = {kind: _tables(kind, tpc_data[kind], root, config) for kind in ("tpch", "tpcds")}
    failures: dict[str, object] = {}
    plans: list[str] = []
    for kind, queries in (("tpch", TPCH), ("tpcds", TPCDS)):
        for number, query in queries.items():
            frame = query(tables[kind])
            result = frame.collect()
            problems = compare(result, answers[(kind, number)]) + _exchanges_follow_their_plans(frame)
            plans += [e["plan"] for e in frame.last_run.report.exchanges]  # type: ignore[union-attr]
            if problems:
                failures[f"{kind} q{number}"] = problems[:3]
    assert not failures, failures
    assert leftover_tmp(root, config) == []
    return plans


def test_tpc_queries_match_duckdb(store_env: tuple[str, Config], tpc_data: dict, answers: dict) -> None:
    root, config = store_env
    _check_all(root, config.with_(tmp_url=root), tpc_data, answers)


@pytest.mark.parametrize("algorithm", ["direct", "direct+wc", "2-level", "2-level+wc", "3-level+wc"])
def test_every_algorithm_serves_every_query(tmp_path: Path, tpc_data: dict, answers: dict, algorithm: str) -> None:
    config = Config(concurrency=2, broadcast_limit=0, gather_limit=0, algorithm=algorithm)
    root = (tmp_path / "store").as_uri()
    plans = _check_all(root, config.with_(tmp_url=root), tpc_data, answers)
    partitioned = [p for p in plans if not p.startswith("broadcast")]
    assert partitioned and all(p.startswith(algorithm.split("+")[0]) and p.endswith("+wc") == algorithm.endswith("+wc") for p in partitioned), plans


def test_explain_after_a_run_shows_stages_p_and_decisions(tmp_path: Path, tpc_data: dict) -> None:
    config = Config(concurrency=2, tmp_url=(tmp_path / "tmp").as_uri())
    tables = {n: cf.scan_parquet(p, config=config) for n, p in tpc_data["tpch"].items()}
    text = TPCH[5](tables).explain(analyze=True)
    assert "physical stages as run" in text
    assert "measured -> direct" in text and "candidates)" in text and "-> broadcast join" in text
    assert "row groups read" in text


def test_a_forced_plain_algorithm_with_broadcast_joins_allowed_shuffles_early_bound_build_sides(tmp_path: Path, tpc_data: dict, answers: dict) -> None:
    """A plain algorithm binds each build side before it writes; such a side cannot be broadcast
    (its objects are laid out for the plan's consumers), so the join shuffles with that plan —
    this once hung waiting for broadcast objects that were never written."""
    config = Config(concurrency=2, workers=2, algorithm="direct", request_timeout=20)
    root = (tmp_path / "store").as_uri()
    tables = _tables("tpch", tpc_data["tpch"], root, config.with_(tmp_url=root))
    frame = TPCH[3](tables)
    assert compare(frame.collect(), answers[("tpch", 3)]) == []
    assert frame.last_run is not None  # the notes of the run just compared, not of a second run
    assert any("bound early" in n for n in frame.last_run.describe().splitlines())
