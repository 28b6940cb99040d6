"""Expressions over several columns at once — ``all()``, ``exclude(...)``, ``col("a", "b")``,
``col("*")`` — expand as Polars expands them, in select, with_columns and group_by().agg (where
``all()`` leaves the keys out); on three files, so every plan runs in several tasks."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import croupier.frame as cf
from croupier.config import Config
from croupier.errors import ConfigError

from .compare import assert_same


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("columns") / "t"
    root.mkdir()
    for i in range(3):
        rows = range(i * 50, i * 50 + 50)
        pl.DataFrame({"g": [j % 3 for j in rows], "x": [None if j % 7 == 0 else float(j) for j in rows], "y": list(rows), "s": [f"s{j % 4}" for j in rows]}).write_parquet(root / f"part-{i}.parquet")
    return root


@pytest.fixture
def frames(table: Path, tmp_path: Path) -> tuple[cf.LazyFrame, pl.LazyFrame]:
    config = Config(concurrency=2, tmp_url=(tmp_path / "tmp").as_uri(), progress=False)
    return cf.scan_parquet(table, config=config), pl.scan_parquet(sorted(table.glob("*.parquet")))


def test_all_and_exclude_in_select_and_with_columns(frames: tuple[cf.LazyFrame, pl.LazyFrame]) -> None:
    lf, pf = frames
    assert_same(lf.select(cf.all().max()).collect(), pf.select(pl.all().max()).collect())
    assert_same(lf.select(cf.exclude("s") * 2).collect(), pf.select(pl.exclude("s") * 2).collect(), ordered=True)
    assert_same(lf.select(cf.exclude(["s", "g"]).sum()).collect(), pf.select(pl.exclude(["s", "g"]).sum()).collect())
    assert_same(lf.with_columns(cf.col("x", "y").cast(cf.Float32)).collect(), pf.with_columns(pl.col("x", "y").cast(pl.Float32)).collect(), ordered=True)
    assert_same(lf.select(cf.col("*").exclude("x").first(), cf.col("x").null_count().alias("nx")).collect(), pf.select(pl.col("*").exclude("x").first(), pl.col("x").null_count().alias("nx")).collect())


def test_all_in_an_aggregation_leaves_the_keys_out(frames: tuple[cf.LazyFrame, pl.LazyFrame]) -> None:
    lf, pf = frames
    assert_same(lf.group_by("g").agg(cf.all().max()).collect(), pf.group_by("g").agg(pl.all().max()).collect())
    got = lf.group_by("g", "s").agg(cf.all().exclude("y").sum(), cf.col("y").mean().alias("my")).collect()
    assert_same(got, pf.group_by("g", "s").agg(pl.all().exclude("y").sum(), pl.col("y").mean().alias("my")).collect())


def test_several_columns_as_the_operands_of_a_function_of_many(frames: tuple[cf.LazyFrame, pl.LazyFrame]) -> None:
    """``sum_horizontal(all())`` is one column over them all (named by the first), not one each."""
    lf, pf = frames
    assert_same(lf.select(cf.sum_horizontal(cf.exclude("s"))).collect(), pf.select(pl.sum_horizontal(pl.exclude("s"))).collect(), ordered=True)
    assert_same(lf.select(cf.max_horizontal(cf.col("x", "y")).alias("m"), cf.coalesce(cf.col("x", "y"))).collect(), pf.select(pl.max_horizontal(pl.col("x", "y")).alias("m"), pl.coalesce(pl.col("x", "y"))).collect(), ordered=True)


def test_several_columns_where_they_cannot_expand_fail_clearly(frames: tuple[cf.LazyFrame, pl.LazyFrame]) -> None:
    lf, _ = frames
    with pytest.raises(ConfigError, match="no column 'nope'"):
        lf.select(cf.col("x", "nope"))
    with pytest.raises(ConfigError, match="stands for several columns"):
        lf.filter(cf.all() > 0)
    with pytest.raises(ConfigError, match="one all"):
        lf.select(cf.all() + cf.exclude("s"))
    with pytest.raises(ConfigError, match="unique"):  # named columns are not keys left out: "g" twice, as Polars refuses
        lf.group_by("g").agg(cf.col("g", "x").sum())


def test_a_select_of_constants_is_one_row_whatever_the_input(frames: tuple[cf.LazyFrame, pl.LazyFrame]) -> None:
    """Polars' select of constants alone gives one row (not one per task), on an empty input too;
    beside an aggregation too; with_columns repeats them on every row."""
    lf, pf = frames
    assert_same(lf.select(cf.lit(1), cf.lit("x").alias("t")).collect(), pf.select(pl.lit(1), pl.lit("x").alias("t")).collect())
    assert_same(lf.filter(cf.col("y") < 0).select(cf.lit(2.5).alias("c")).collect(), pf.filter(pl.col("y") < 0).select(pl.lit(2.5).alias("c")).collect())
    assert_same(lf.select(cf.lit(1), cf.col("y").sum()).collect(), pf.select(pl.lit(1), pl.col("y").sum()).collect())
    assert_same(lf.with_columns(cf.lit(7).alias("c")).select("c").collect(), pf.with_columns(pl.lit(7).alias("c")).select("c").collect())
