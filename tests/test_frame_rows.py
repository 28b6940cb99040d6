"""Which rows a frame keeps, as Polars keeps them: ``tail`` (the last rows of the input's order,
or of a sort's), ``unique`` (on a subset, keeping the first, last or none of each group, in
input order or not), each group's first and last values, groups in the order of their first
rows (``maintain_order``), joins whose null keys match (``nulls_equal``), and the rows an
``is_in`` filter keeps, in its input's order; on several files (one of them empty), so that
every plan runs in several tasks."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import croupier.frame as cf
from croupier.config import Config
from croupier.errors import ConfigError
from croupier.expr import Expr
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


@pytest.mark.parametrize("keep", ["first", "last", "none"])
@pytest.mark.parametrize("subset", ["g", ["g", "k"], "k", None])
def test_unique_on_a_subset_keeps_the_rows_polars_keeps(table: Path, config: Config, keep: str, subset: str | list[str] | None) -> None:
    """k has nulls (equal to each other, as in Polars); the rows of a group are spread over the
    files, so the first and last of a group are in different tasks."""
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    got = lf.unique(subset, keep=keep, maintain_order=True).collect()
    assert_same(got, pf.unique(subset, keep=keep, maintain_order=True).collect(), ordered=True)
    narrow = lf.select("g", "k").unique(subset, keep=keep, maintain_order=True).collect()  # whole rows repeat here
    assert_same(narrow, pf.select("g", "k").unique(subset, keep=keep, maintain_order=True).collect(), ordered=True)


@pytest.mark.parametrize("keep", ["first", "last", "none"])
def test_unique_without_maintain_order_keeps_the_same_rows(table: Path, config: Config, keep: str) -> None:
    """Polars' order is then arbitrary: compared as sets."""
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    assert_same(lf.unique(["k", "g"], keep=keep).collect(), pf.unique(["k", "g"], keep=keep).collect())


def test_unique_any_keeps_one_row_per_group_and_whole_rows_stay_a_distinct(table: Path, config: Config) -> None:
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    anyone = lf.unique(["g", "k"]).collect()  # Polars may keep any row of a group: compare the groups
    assert_same(anyone.select("g", "k"), pf.unique(["g", "k"]).select("g", "k").collect())
    assert_same(anyone, lf.unique(["g", "k"], keep="first").collect())
    assert_same(lf.select("g", "k").unique().collect(), pf.select("g", "k").unique().collect())
    assert "distinct" in lf.select("g").unique().explain().lower()


def test_unique_refuses_an_unknown_column_or_keep(table: Path, config: Config) -> None:
    lf = cf.scan_parquet(table, config=config)
    with pytest.raises(ConfigError, match="no column 'nope' in subset"):
        lf.unique(["g", "nope"])
    with pytest.raises(ConfigError, match="keep must be"):
        lf.unique("g", keep="middle")


@pytest.mark.parametrize("broadcast_limit", [64 << 20, 0], ids=["broadcast", "shuffle"])
@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "semi", "anti"])
def test_a_join_whose_null_keys_are_equal(table: Path, config: Config, tmp_path: Path, how: str, broadcast_limit: int) -> None:
    """``nulls_equal=True``: rows whose k is null (one in 11 of the table's) match the side's
    rows with a null k (two of them), on one key and on two; without it they match nothing."""
    side = tmp_path / "side.parquet"
    pl.DataFrame({"k": pl.Series([None, 1, 3, None, 9], dtype=pl.Int32), "g": ["g0", "g1", "g1", "g2", "g0"], "v": [10, 11, 13, 20, 19]}).write_parquet(side)
    config = config.with_(broadcast_limit=broadcast_limit)
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    rf, rp = cf.scan_parquet(side, config=config), pl.scan_parquet(side)
    for on in ("k", ["k", "g"]):
        got = lf.join(rf, on=on, how=how, nulls_equal=True).collect()
        expected = pf.join(rp, on=on, how=how, nulls_equal=True).collect()
        assert_same(got, expected)
        without = pf.join(rp, on=on, how=how).collect()
        assert not expected.sort(expected.columns, nulls_last=True).equals(without.sort(without.columns, nulls_last=True))  # the test can tell


@pytest.mark.parametrize("gather_limit", [None, 0], ids=["one-task-sort", "range-exchange"])
def test_group_by_maintain_order_gives_groups_in_the_order_of_their_first_rows(table: Path, config: Config, gather_limit: int | None) -> None:
    """Groups whose first rows are in different files (k has nulls, g three values); keys as
    names and as an expression; after a filter and after a window (whose rows the engine
    scatters and sorts back); a user column named like the helper; the groups sorted in one
    task or through a range exchange."""
    if gather_limit is not None:
        config = config.with_(gather_limit=gather_limit)
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    got = lf.group_by("k", "g", maintain_order=True).agg(col("i").sum(), col("i").min().alias("lo"), col("i").count().alias("n")).collect()
    assert_same(got, pf.group_by("k", "g", maintain_order=True).agg(pl.col("i").sum(), pl.col("i").min().alias("lo"), pl.col("i").count().alias("n")).collect(), ordered=True)
    shifted = lf.filter(col("i") > 300).group_by((col("i") % 17).alias("r"), maintain_order=True).agg(col("k").max()).collect()
    assert_same(shifted, pf.filter(pl.col("i") > 300).group_by((pl.col("i") % 17).alias("r"), maintain_order=True).agg(pl.col("k").max()).collect(), ordered=True)
    windowed = lf.with_columns(col("i").rank("min").over("g").alias("__first")).group_by("k", maintain_order=True).len().collect()
    assert_same(windowed, pf.with_columns(pl.col("i").rank("min").over("g").alias("__first")).group_by("k", maintain_order=True).len().collect(), ordered=True)
    assert "tag rows in input order" in lf.group_by("g", maintain_order=True).len().explain()


@pytest.mark.parametrize("algorithm, workers", [(None, None), ("direct", 4), ("2-level+wc", 4), ("3-level", 8)])
def test_first_and_last_are_the_first_and_last_values_in_input_order(table: Path, config: Config, algorithm: str | None, workers: int | None) -> None:
    """Every group has rows in every file, so its first and last values are in different tasks:
    an exchange hands a consumer its rows in producer order, whatever the algorithm (these
    aggregations do not split: each group's rows all reach its consumer). Nulls count (first of
    a group whose first k is null is null), as in Polars."""
    config = config.with_(algorithm=algorithm, workers=workers)
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    got = lf.group_by("g").agg(col("k").first(), col("i").last().alias("li"), col("k").last().alias("lk"), col("i").sum()).collect()
    assert_same(got, pf.group_by("g").agg(pl.col("k").first(), pl.col("i").last().alias("li"), pl.col("k").last().alias("lk"), pl.col("i").sum()).collect())
    whole = lf.filter(col("i") > 10).select(col("i").first(), col("k").last()).collect()
    assert_same(whole, pf.filter(pl.col("i") > 10).select(pl.col("i").first(), pl.col("k").last()).collect())


def test_rows_picked_by_their_order_after_a_window_that_scattered_them(table: Path, config: Config) -> None:
    """A window's hash exchange hands on rows in its partitions' order; first/last, tail,
    unique(keep=...) and a running window above it pick rows by the input order, so the window
    sorts its rows back first (as it does when the result's order shows)."""
    lf, pf = cf.scan_parquet(table, config=config), _polars(table)
    lw, pw = lf.with_columns(col("i").sum().over("g").alias("s")), pf.with_columns(pl.col("i").sum().over("g").alias("s"))
    assert_same(lw.group_by("k").agg(col("i").first(), col("s").last()).collect(), pw.group_by("k").agg(pl.col("i").first(), pl.col("s").last()).collect())
    assert_same(lw.tail(40).select(col("i").sum()).collect(), pw.tail(40).select(pl.col("i").sum()).collect())
    assert_same(lw.unique("k", keep="last").group_by("k").agg(col("i").sum()).collect(), pw.unique("k", keep="last").group_by("k").agg(pl.col("i").sum()).collect())
    assert_same(lw.with_columns(col("i").cum_sum().over("k").alias("c")).group_by("k").agg(col("c").max()).collect(), pw.with_columns(pl.col("i").cum_sum().over("k").alias("c")).group_by("k").agg(pl.col("c").max()).collect())


@pytest.fixture(scope="module")
def wanted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The keys an ``is_in`` subquery reads: some repeated, one null (which matches nothing)."""
    path = tmp_path_factory.mktemp("wanted") / "wanted.parquet"
    pl.DataFrame({"k": pl.Series([1, 3, None, 4, 3], dtype=pl.Int32)}).write_parquet(path)
    return path


def _shuffled_is_in(table: Path, wanted: Path, config: Config) -> tuple[cf.LazyFrame, pl.LazyFrame, Expr, pl.Expr]:
    """The table, by the engine with its joins shuffled (no broadcast, 4 partitions) and by
    Polars, and ``k.is_in(wanted keys)`` for each."""
    config = config.with_(broadcast_limit=0, workers=4)
    hit, phit = col("k").is_in(cf.scan_parquet(wanted, config=config).select("k")), pl.col("k").is_in(pl.read_parquet(wanted)["k"].implode())
    return cf.scan_parquet(table, config=config), _polars(table), hit, phit


def _is_in(table: Path, wanted: Path, config: Config, negated: bool) -> tuple[cf.LazyFrame, pl.LazyFrame]:
    """The table filtered on k being (or, ``negated``, not being) among the wanted keys: by the
    engine, whose semi (anti) join is shuffled, and by Polars."""
    lf, pf, hit, phit = _shuffled_is_in(table, wanted, config)
    if negated:
        hit, phit = ~hit, ~phit
    return lf.filter(hit), pf.filter(phit)


@pytest.mark.parametrize("negated", [False, True], ids=["is_in", "not_is_in"])
def test_head_and_tail_after_an_is_in_filter_are_its_first_and_last_rows(table: Path, wanted: Path, config: Config, negated: bool) -> None:
    """A filter on ``is_in(frame)`` is a semi join (an anti join negated), which hands on its rows
    in partition order when shuffled: a head or tail above it has them tagged before the exchange
    and sorted back after it, as Polars' filter keeps its input's order; so has the plain query's
    result, and an aggregation over it is not."""
    lf, pf = _is_in(table, wanted, config, negated)
    assert_same(lf.head(25).collect(), pf.head(25).collect(), ordered=True)
    assert_same(lf.tail(25).collect(), pf.tail(25).collect(), ordered=True)
    assert_same(lf.collect(), pf.collect(), ordered=True)
    assert "tag rows with their input position" in lf.head(25).explain()
    assert "tag rows with their input position" in lf.explain()
    assert "tag rows with their input position" not in lf.group_by("g").agg(col("i").sum()).explain()


@pytest.mark.parametrize("negated", [False, True], ids=["is_in", "not_is_in"])
def test_first_and_last_after_an_is_in_filter_are_in_its_input_order(table: Path, wanted: Path, config: Config, negated: bool) -> None:
    """Each group's first and last values after a shuffled semi (anti) join from ``is_in``: the
    values of the group's first and last rows in the filter's input (nulls counted)."""
    lf, pf = _is_in(table, wanted, config, negated)
    got = lf.group_by("g").agg(col("i").first(), col("k").last(), col("i").last().alias("li")).collect()
    assert_same(got, pf.group_by("g").agg(pl.col("i").first(), pl.col("k").last(), pl.col("i").last().alias("li")).collect())


@pytest.mark.parametrize("negated", [False, True], ids=["is_in", "not_is_in"])
def test_maintain_order_after_an_is_in_filter_follows_its_input_order(table: Path, wanted: Path, config: Config, negated: bool) -> None:
    """group_by(maintain_order=True) (groups in the order of their first rows) and
    unique(maintain_order=True) after a shuffled semi (anti) join from ``is_in``."""
    lf, pf = _is_in(table, wanted, config, negated)
    got = lf.group_by("k", maintain_order=True).agg(col("i").sum(), col("g").first()).collect()
    assert_same(got, pf.group_by("k", maintain_order=True).agg(pl.col("i").sum(), pl.col("g").first()).collect(), ordered=True)
    assert_same(lf.unique("g", keep="first", maintain_order=True).collect(), pf.unique("g", keep="first", maintain_order=True).collect(), ordered=True)


def test_an_is_in_value_keeps_the_input_order(table: Path, wanted: Path, config: Config) -> None:
    """``is_in(frame)`` as a value (a column, or a filter's operand under ``|``) is a left join
    with the frame's distinct values, which, shuffled, keeps its left rows' order for a head or
    tail above it as with_columns and filter keep theirs in Polars."""
    lf, pf, hit, phit = _shuffled_is_in(table, wanted, config)
    assert_same(lf.with_columns(hit.alias("hit")).head(25).collect(), pf.with_columns(phit.alias("hit")).head(25).collect(), ordered=True)
    assert_same(lf.select("i", hit.alias("hit")).tail(25).collect(), pf.select("i", phit.alias("hit")).tail(25).collect(), ordered=True)
    assert_same(lf.filter(hit | (col("i") < 5)).head(25).collect(), pf.filter(phit | (pl.col("i") < 5)).head(25).collect(), ordered=True)
