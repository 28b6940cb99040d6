"""SQL through the engine: all 22 TPC-H queries and a TPC-DS subset, from the official texts DuckDB
ships, run by ``collect()`` on worker processes (several tasks per stage: every table is cut into
several files) on the local folder and on SeaweedFS, and answer exactly what DuckDB answers.

The TPC-DS subset covers what TPC-H does not: a subplan used twice (q1), windows (q12, q47, q98),
ROLLUP with rank (q36), a full outer join of two aggregates (q97), EXISTS / NOT EXISTS (q10, q35),
INTERSECT (q38), UNION ALL of channels (q5, q77). The whole TPC-DS suite on the engine is
``bench/tpc_sql.py --engine croupier``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

import croupier
from croupier.compute.base import Executor
from croupier.config import Config
from croupier.dag.run import make_executor
from croupier.examples.tpc import reference_sql

from .compare import differences
from .conftest import leftover_tmp
from .tpc_sql_common import duckdb_answer, is_ordered, upload_parts

PARTS = 3
TPCDS_SUBSET = (1, 5, 10, 12, 35, 36, 38, 47, 77, 97, 98)


@pytest.fixture
def engine(store_env: tuple[str, Config]) -> Iterator[tuple[str, Config, Executor]]:
    """(root, config, one executor shared by every query of the test)."""
    root, config = store_env
    config = config.with_(tmp_url=root)
    with make_executor(config) as executor:
        yield root, config, executor


def _failures(kind: str, numbers: tuple[int, ...], data: dict[str, Path], engine: tuple[str, Config, Executor]) -> dict[str, list[str]]:
    root, config, executor = engine
    tables = upload_parts(kind, data, root, config, PARTS)
    failures: dict[str, list[str]] = {}
    for number in numbers:
        query = reference_sql(kind, number)
        got = croupier.sql(query, tables, config=config).collect(executor=executor)
        problems = differences(got, duckdb_answer(query, data), ordered=is_ordered(query))
        if problems:
            failures[f"{kind} q{number}"] = problems[:3]
    return failures


def test_all_tpch_queries_on_the_engine(engine: tuple[str, Config, Executor], tpc_sql_data: dict[str, dict[str, Path]]) -> None:
    assert _failures("tpch", tuple(range(1, 23)), tpc_sql_data["tpch"], engine) == {}
    assert leftover_tmp(engine[0], engine[1]) == []


def test_tpcds_subset_on_the_engine(engine: tuple[str, Config, Executor], tpc_sql_data: dict[str, dict[str, Path]]) -> None:
    assert _failures("tpcds", TPCDS_SUBSET, tpc_sql_data["tpcds"], engine) == {}
    assert leftover_tmp(engine[0], engine[1]) == []


@pytest.mark.parametrize("broadcast_limit", [None, 0])
def test_joins_of_a_whole_larger_table_build_on_the_left(engine: tuple[str, Config, Executor], tpc_sql_data: dict[str, dict[str, Path]], broadcast_limit: int | None) -> None:
    """q5 and q9 join a smaller intermediate result to all of lineitem, q3 to half of it, q7
    supplier to filtered lineitem: the left side is built first and broadcast to lineitem's scan
    tasks (columns put back in the join's order), or, with broadcasts off, shuffled with lineitem
    as usual; either way the answer is DuckDB's. q12's lineitem keeps a few rows in a thousand (its
    row groups' statistics and conditions say so): it stays on the right, built first."""
    root, config, executor = engine
    data = tpc_sql_data["tpch"]
    tables = upload_parts("tpch", data, root, config, PARTS)
    if broadcast_limit is not None:
        config = config.with_(broadcast_limit=broadcast_limit)
    for number in (3, 5, 7, 9, 12):
        query = reference_sql("tpch", number)
        frame = croupier.sql(query, tables, config=config)
        got = frame.collect(executor=executor)
        assert differences(got, duckdb_answer(query, data), ordered=is_ordered(query)) == []
        notes = frame.explain(analyze=True)
        assert ("is built first" in notes) == (number != 12), number
        assert ("-> shuffle hash join" in notes) == (broadcast_limit == 0), number
