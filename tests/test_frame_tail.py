"""``LazyFrame.tail``: the last rows of the input's order, or of a sort's, as Polars gives them,
on several files (one of them empty), so that every plan runs in several tasks."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import croupier.frame as cf
from croupier.config import Config
from croupier.frame import col

from .compare import assert_same


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tail") / "t"
    root.mkdir()
    start = 0
    for i, n in enumerate((400, 0, 250, 90)):
        pl.DataFrame(
            {
                "i": pl.Series(range(start, start + n), dtype=pl.Int64),
                "g": [f"g{j % 3}" for j in range(start, start + n)],
                "k": pl.Series([None if j % 11 == 0 else j % 7 for j in range(start, start + n)], dtype=pl.Int32),
            }
        ).write_parquet(root / f"part-{i}.parquet")
        start += n
    return root


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(concurrency=2, tmp_url=(tmp_path / "tmp").as_uri(), progress=False)


def _polars(table: Path) -> pl.LazyFrame:
    return pl.scan_parquet(sorted(table.glob("*.parquet")))


@pytest.mark.parametrize("n", [0, 1, 7, 95, 5000])
def test_tail_is_the_last_rows_in_input_order(table: Path, config: Config, n: int) -> None:
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    assert_same(lf.tail(n).collect(), pf.tail(n).collect(), ordered=True)
    assert_same(lf.filter(col("k") > 2).tail(n).collect(), pf.filter(pl.col("k") > 2).tail(n).collect(), ordered=True)
    assert_same(lf.with_columns((col("i") * 2).alias("j")).tail(n).select("j", "g").collect(), pf.with_columns((pl.col("i") * 2).alias("j")).tail(n).select("j", "g").collect(), ordered=True)


@pytest.mark.parametrize("gather_limit", [None, 0], ids=["one-task-sort", "range-exchange"])
def test_tail_of_a_sort_is_its_last_rows_ties_in_input_order(table: Path, config: Config, gather_limit: int | None) -> None:
    """A sort's last rows, with ties (k has 7 values and nulls) kept in input order as Polars'
    stable sort keeps them; the default of 5 rows; and a window's rows, which the engine scatters
    and sorts back, then the last of them."""
    if gather_limit is not None:
        config = config.with_(gather_limit=gather_limit)
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    assert_same(lf.sort("k").tail(30).collect(), pf.sort("k", maintain_order=True).tail(30).collect(), ordered=True)
    assert_same(lf.sort("k", descending=True).tail().collect(), pf.sort("k", descending=True, maintain_order=True).tail().collect(), ordered=True)
    assert_same(lf.sort("g", "k").tail(12).collect(), pf.sort("g", "k", maintain_order=True).tail(12).collect(), ordered=True)
    windowed = lf.with_columns(col("i").max().over("g").alias("m")).tail(9).collect()
    assert_same(windowed, pf.with_columns(pl.col("i").max().over("g").alias("m")).tail(9).collect(), ordered=True)


def test_tail_then_head_and_head_then_tail(table: Path, config: Config) -> None:
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    assert_same(lf.tail(50).head(3).collect(), pf.tail(50).head(3).collect(), ordered=True)
    assert_same(lf.head(420).tail(30).collect(), pf.head(420).tail(30).collect(), ordered=True)
    assert "last 50" in lf.tail(50).explain()
