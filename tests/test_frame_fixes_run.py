"""Issue 14's wrong answers, run on the real engine (``collect``) with the plain frame API.

Each of these returned a wrong answer before the fix (several rows for a whole-table aggregate,
0 for a row count reading no column, NaN for the mean of an all-null group, Int64 counts); they
use only API that existed then, so the same file shows the failures on the old code.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import croupier.frame as cf
from croupier.config import Config
from croupier.frame import col, count

from .compare import assert_same


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three files (one empty): several tasks, so per-task answers show."""
    root = tmp_path_factory.mktemp("fixes") / "t"
    root.mkdir()
    for i, n in enumerate((300, 0, 500)):
        pl.DataFrame(
            {
                "g": [f"g{j % 4}" for j in range(n)],
                "x": pl.Series([None if j % 5 == 0 else float(j) for j in range(n)], dtype=pl.Float64),
                "none": pl.Series([None] * n, dtype=pl.Float64),
            }
        ).write_parquet(root / f"part-{i}.parquet")
    return root


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(concurrency=2, tmp_url=(tmp_path / "tmp").as_uri(), progress=False)


def _polars(table: Path) -> pl.LazyFrame:
    return pl.scan_parquet(sorted(table.glob("*.parquet")))


def test_select_of_aggregations_is_one_row(table: Path, config: Config) -> None:
    got = cf.scan_parquet(table, config=config).select(col("x").sum(), col("x").max().alias("top"), count()).collect()
    assert_same(got, _polars(table).select(pl.col("x").sum(), pl.col("x").max().alias("top"), pl.len()).collect())


def test_counting_rows_that_read_no_column(table: Path, config: Config) -> None:
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    assert_same(lf.select(count()).collect(), pf.select(pl.len()).collect())
    assert_same(lf.group_by().agg(count()).collect(), pf.select(pl.len()).collect())
    assert_same(lf.group_by("g").len().collect(), pf.group_by("g").len().collect())


def test_mean_of_all_null_group_is_null(table: Path, config: Config) -> None:
    got = cf.scan_parquet(table, config=config).group_by("g").agg(col("none").mean().alias("m"), col("x").mean().alias("mx")).collect()
    assert_same(got, _polars(table).group_by("g").agg(pl.col("none").mean().alias("m"), pl.col("x").mean().alias("mx")).collect())
    assert got["m"].null_count() == got.height


@pytest.mark.parametrize("gather_limit", [None, 0], ids=["one-task-sort", "range-exchange"])
def test_windows_keep_the_input_row_order(table: Path, config: Config, gather_limit: int | None) -> None:
    """Polars keeps the input order through ``over``; the engine's hash exchange scatters rows,
    so they are tagged and sorted back (in one task, or through a range exchange)."""
    if gather_limit is not None:
        config = config.with_(gather_limit=gather_limit)
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    got = lf.with_columns(col("x").sum().over("g").alias("s"), col("x").rank("min").over("g").alias("r")).filter(col("x").is_not_null()).head(400).collect()
    expected = pf.with_columns(pl.col("x").sum().over("g").alias("s"), pl.col("x").rank("min").over("g").alias("r")).filter(pl.col("x").is_not_null()).head(400).collect()
    assert_same(got, expected, ordered=True)
    twice = lf.with_columns(col("x").max().over("g").alias("m")).with_columns(col("m").cum_sum().over("g").alias("c")).collect()
    assert_same(twice, pf.with_columns(pl.col("x").max().over("g").alias("m")).with_columns(pl.col("m").cum_sum().over("g").alias("c")).collect(), ordered=True)


def test_a_window_s_order_survives_a_whole_table_aggregate_beside_it(table: Path, config: Config) -> None:
    """``x - x.mean()`` after a window: the window's result is read twice (by the mean and by the
    cross join that pairs every row with it), and the cross join keeps its left input's order,
    so the window's rows must be sorted back there too (a random pipeline found them in hash order)."""
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    got = lf.with_columns(col("x").sum().over("g").alias("s")).with_columns((col("x") - col("x").mean()).alias("d")).collect()
    expected = pf.with_columns(pl.col("x").sum().over("g").alias("s")).with_columns((pl.col("x") - pl.col("x").mean()).alias("d")).collect()
    assert_same(got, expected, ordered=True)


def test_queries_show_per_stage_progress(table: Path, config: Config, capsys: pytest.CaptureFixture[str]) -> None:
    cf.scan_parquet(table, config=config.with_(progress=True)).group_by("g").agg(col("x").sum()).collect()
    err = capsys.readouterr().err
    assert "query: s01-partial-agg" in err and "task" in err, err


@pytest.fixture(scope="module")
def clashing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Columns named like the helper columns the planner adds (an aggregation's pre-projected
    operands ``__a0``, partials ``__p0``, results ``__r0``, a window's row tag), in three files."""
    root = tmp_path_factory.mktemp("clash") / "t"
    root.mkdir()
    for i in range(3):
        n = 200 + 50 * i
        pl.DataFrame(
            {
                "__a0": [j % 3 for j in range(n)],
                "__p0": pl.Series([None if j % 7 == 0 else float(j) for j in range(n)], dtype=pl.Float64),
                "__r0": [j % 5 for j in range(n)],
                "__croupier_row": [n - j for j in range(n)],
                "__x": [j % 2 for j in range(n)],
            }
        ).write_parquet(root / f"part-{i}.parquet")
    return root


def test_columns_named_like_helper_columns(clashing: Path, config: Config) -> None:
    """A user's column may carry any name: the helper columns an aggregation or a window adds
    are named so that they never clash with one (a key named ``__a0`` failed with Polars'
    DuplicateError, as the operand of the first aggregation was projected under that name)."""
    lf, pf = cf.scan_parquet(clashing, config=config), _polars(clashing)
    got = lf.group_by("__a0").agg(col("__p0").sum(), col("__r0").mean(), col("__p0").max().alias("__r1"), col("__a0").count().alias("__p0c")).collect()
    expected = pf.group_by("__a0").agg(pl.col("__p0").sum(), pl.col("__r0").mean(), pl.col("__p0").max().alias("__r1"), pl.col("__a0").count().alias("__p0c")).collect()
    assert_same(got, expected)
    got = lf.group_by("__r0", "__x").agg((col("__p0").sum() / col("__a0").sum()).alias("__r0_ratio")).collect()
    assert_same(got, pf.group_by("__r0", "__x").agg((pl.col("__p0").sum() / pl.col("__a0").sum()).alias("__r0_ratio")).collect())
    got = lf.with_columns(col("__p0").sum().over("__a0").alias("s")).collect()
    assert_same(got, pf.with_columns(pl.col("__p0").sum().over("__a0").alias("s")).collect(), ordered=True)


def test_a_column_outside_an_aggregation_is_refused_whatever_its_name(clashing: Path, config: Config) -> None:
    with pytest.raises(Exception, match="inside an aggregation"):
        cf.scan_parquet(clashing, config=config).group_by("__a0").agg(col("__x") + col("__p0").sum()).collect()


def test_rename_drop_nulls_clip_and_quantile_on_the_engine(table: Path, config: Config) -> None:
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    got = lf.rename({"x": "v"}).drop("none").drop_nulls().with_columns(col("v").clip(100, 400).alias("c")).group_by("g").agg(col("c").quantile(0.3).alias("q"), col("v").sum()).collect()
    expected = pf.rename({"x": "v"}).drop("none").drop_nulls().with_columns(pl.col("v").clip(100, 400).alias("c")).group_by("g").agg(pl.col("c").quantile(0.3).alias("q"), pl.col("v").sum()).collect()
    assert_same(got, expected)
