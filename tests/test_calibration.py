"""Self-calibration on a store's first run, the cache, and learning from every run (real runs on
the local folder, with the calibration's sizes shrunk)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import pytest

from croupier.config import Config
from croupier.dag import calibration
from croupier.dag.profiles import wait_learning
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.model.cache import ProfileCache, machine_id, store_key


@pytest.fixture
def tiny_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibration, "QUICK", calibration.TEST)
    monkeypatch.setattr(calibration, "LARGEST", 0.3)


def _calibrating(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "croupier" and "calibrating" in r.getMessage()]


def test_first_run_calibrates_once_caches_and_every_run_refines(tmp_path: Path, tiny_calibration: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="croupier")
    config = Config(concurrency=2, calibration="auto", profile_cache=str(tmp_path / "cache"))
    inp, out = (tmp_path / "in").as_uri(), (tmp_path / "out").as_uri()
    cache = ProfileCache(config.profile_cache)
    key = (machine_id(), store_key(inp, None), 2)

    first = gensort(inp, 200_000, parts=2, config=config)
    assert len(_calibrating(caplog)) == 1, "the first job on the store calibrates it, saying so once"
    assert wait_learning(60), "the run's refit is written off the run's path"
    entry = cache.load(*key)
    assert entry is not None and entry.calibration and entry.profile.machine == key[0]
    assert first.summary["profile"] == f"{key[1]}@r0"  # predicted by the fresh calibration
    assert entry.profile.revision == 1 and len(entry.history) == 1  # ...and refined by the run
    # every operator kind priced (per byte, or per call where its calls all move a few bytes: under
    # load the larger pass may not fit the budget, and a small pass's sorts are of a few KB)
    assert set(entry.profile.compute) | set(entry.profile.call_seconds) >= {"records_sort", "read:parquet", "hash_aggregate", "hash_join", "sort", "evaluate", "project"}
    assert {"records_sort", "read:parquet", "hash_aggregate", "hash_join"} <= set(entry.profile.compute)
    # Parquet reads are priced per codec: the calibration's table is half zstd, half snappy
    assert {"read:parquet-snappy", "read:parquet-zstd"} <= set(entry.profile.compute)
    assert entry.profile.compute_cost("read:parquet-lz4#00000000") == entry.profile.compute["read:parquet"]  # other codecs: all Parquet reads
    # a query's tail (partials gathered by one task) is measured, and its few bytes per call priced per call
    single = next(k for o in entry.calibration for k in o.phases if k.startswith("write:exchange-frames") and k.endswith("-single"))
    assert single in entry.profile.call_seconds and single not in entry.profile.compute
    # the per-wave cost is measured on functions that work, as real stages' are
    busy = [o for o in entry.calibration if o.facts.name.startswith("overheads-")]
    assert len(busy) >= 2 and all(o.phases["read:generate"][0] > 0 for o in busy)
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and "_calibration" in str(p)]
    assert leftovers == [], "the calibration deletes what it wrote"

    # a deliberately wrong coefficient; the second run must not calibrate again, and learns
    truth = entry.profile.compute["records_sort"]
    entry.profile = replace(entry.profile, compute=dict(entry.profile.compute, records_sort=100 * truth))
    cache.save(entry, *key)
    monkeypatch.setattr(calibration, "calibrate_store", _must_not_run)
    caplog.clear()
    report = sort(inp, out, 2, config)
    assert _calibrating(caplog) == []
    assert report.summary["profile"] == f"{key[1]}@r1"
    assert report.stage("reduce").predicted["profile"] == f"{key[1]}@r1"
    assert wait_learning(60)
    after = cache.load(*key)
    assert after is not None and after.profile.revision == 2 and len(after.history) > 1
    assert after.profile.compute["records_sort"] < 10 * truth, "the run's measured sort pulled the wrong cost back"
    assert valsort(out, config, inp)[0].ok


def _must_not_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("calibrated a store that has a cached profile")


def test_calibration_off_neither_calibrates_nor_touches_the_cache(tmp_path: Path, tiny_calibration: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="croupier")
    config = Config(concurrency=2, calibration="off", profile_cache=str(tmp_path / "cache"))
    report = gensort((tmp_path / "in").as_uri(), 10_000, parts=2, config=config)
    assert _calibrating(caplog) == [] and not (tmp_path / "cache").exists()
    assert report.summary["profile"] == "local@r0"  # the shipped profile


def test_calibrate_command_refits_from_stored_reports(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from croupier.cli import main

    runner = CliRunner()
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    args = ["--concurrency", "2", "--no-calibrate"]
    assert runner.invoke(main, args + ["gensort", inp, "--size", "2MB", "--parts", "2"]).exit_code == 0
    result = runner.invoke(main, args + ["sort", inp, out, "--workers", "4", "--report", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, args + ["--profile", "local", "calibrate", "--from-reports", str(tmp_path / "r.json"), "--out", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    assert "refitted from" in result.output and "records_sort" in result.output and "+-" in result.output
    assert "local@r1" in result.output


def test_the_calibration_table_stores_like_real_tables() -> None:
    """Dates, decimals, low-cardinality and free-text strings (TPC-H-like), the same for the same records."""
    import polars as pl

    from croupier.ops.gensort import generate
    from croupier.ops.records import RecordRuns

    records = RecordRuns([generate(0, 5000, 7)], [0])
    table = calibration.SyntheticTable(1250).apply(records, {})
    assert table.equals(calibration.SyntheticTable(1250).apply(records, {}))
    assert table.schema["d"] == pl.Date and table.schema["comment"] == pl.Utf8 and table.null_count().sum_horizontal().item() == 0
    assert table["flag"].n_unique() == 3 and table["mode"].n_unique() == 7 and table["k_few"].n_unique() == 16
    assert table["k_many"].max() < 1250 and 1000 < table["k_many"].n_unique()
    words = table["comment"].str.split(" ").list.len()
    assert words.min() == 3 and words.max() == 8 and table["comment"].n_unique() > 4000
    assert str(table["d"].min()) >= "1992-01-01" and str(table["d"].max()) <= "1998-12-31"


def test_a_query_reports_the_operator_signatures_its_plan_prices_and_its_profile_learns(tmp_path: Path, tiny_calibration: None) -> None:
    """Tasks report each operator's phase under the kind the planner prices it by (signed with what
    it computes), so the profile a run refines prices the same operators next time by their own cost."""
    import polars as pl

    from croupier.dag.binding import stage_kinds
    from croupier.dag.stage import ExchangeSink, SinglePartitioning
    from croupier.frame import col, scan_parquet
    from croupier.plan.compile import Compiler, finish

    config = Config(concurrency=2, calibration="auto", profile_cache=str(tmp_path / "cache"), tmp_url=(tmp_path / "tmp").as_uri())
    folder = tmp_path / "t"
    folder.mkdir()
    for i in range(3):
        pl.DataFrame({"k": [j % 7 for j in range(i, 3000, 3)], "v": list(range(i, 3000, 3))}).write_parquet(folder / f"part-{i}.parquet")
    frame = scan_parquet(str(folder / "*.parquet"), config=config).filter(col("v") > 10).group_by("k").agg(col("v").sum()).sort("k")
    expected = pl.scan_parquet(str(folder / "*.parquet")).filter(pl.col("v") > 10).group_by("k").agg(pl.col("v").sum()).sort("k").collect()
    assert frame.collect().equals(expected)
    assert frame.last_run is not None and wait_learning(60)

    compiler = Compiler(None, config, dry=True)
    finish(compiler, compiler.compile(frame.optimized_plan()), ExchangeSink(SinglePartitioning()))
    planned = {k for stage in compiler.stages for k in stage_kinds(stage, lambda rep: "arrow") if "#" in k}
    reported = {k for stage in frame.last_run.report.stages for k in stage.phases if "#" in k}
    # the filter is fused into the partial aggregate; Polars wrote the files zstd-compressed
    assert {k.split("#")[0] for k in reported} >= {"read:parquet-zstd", "hash_aggregate"}
    assert reported <= planned, "every signed kind a task reports is one the planner prices"
    entry = ProfileCache(config.profile_cache).load(machine_id(), store_key(config.tmp_url, None), 2)
    assert entry is not None and reported <= set(entry.profile.compute) | set(entry.profile.call_seconds)


def test_a_grid_stream_opens_its_connection_with_an_empty_request_and_times_every_sized_one(tmp_path: Path) -> None:
    """The untimed first request of each stream is an empty one (it opens the connection): one of
    the point's size was up to a third of the grid's bytes; every request of the size is timed."""
    from croupier.compute.context import TaskContext
    from croupier.storage import open_store

    config = Config(concurrency=2)
    url = (tmp_path / "grid").as_uri()
    ctx = TaskContext("t", config, backends={})
    wrote = calibration._requests(ctx, url, "p", "PUT", 1000, 2, 2)
    assert [n for n, _ in wrote] == [2, 2] and all(s > 0 for _, s in wrote)
    sizes = {o.key: o.size for o in open_store(url, config).list()}
    assert sizes == {f"p/t{t}-{name}": size for t in (0, 1) for name, size in (("open", 0), ("0000", 1000), ("0001", 1000))}
    assert [n for n, _ in calibration._requests(ctx, url, "p", "GET", 1000, 2, 2)] == [2, 2]
    assert calibration.MIN_REQUESTS == 2


def test_the_large_pass_is_planned_as_if_most_of_the_small_pass_grew_with_the_data() -> None:
    """The large pass's scale: as large as ends within the time left if 40% of the small pass
    stays and the rest grows with the data (a little more than measured), at most LARGEST, and
    none under twice SMALL."""
    small, fixed = calibration.SMALL, calibration.FIXED_SHARE
    assert fixed == 0.4
    assert calibration.large_scale(2.0, 5.0) == pytest.approx(3.5 * small)  # a 2 s small pass, 5 s left: 0.8 s + 1.2 s x 3.5
    assert calibration.large_scale(1.2, 30.0) == calibration.LARGEST  # capped
    assert calibration.large_scale(2.0, 3.19) == 0.0  # twice the small pass's data would not fit: none
    assert calibration.large_scale(2.0, 3.2) == pytest.approx(2 * small)
    assert calibration.large_scale(2.5, -1.0) == 0.0 and calibration.large_scale(0.0, 1.0) == calibration.LARGEST


def test_the_warm_up_runs_its_jobs_together_and_the_measured_passes_one_stage_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up (timings dropped) runs in as few runs as its forced plans allow, its stages at
    once: on S3 each of its 18 runs paid a lease, listings and deletes. A measured pass runs every
    job alone, each with one final stage, so no stage's time is shared with another's; both
    passes run the same stages."""
    from croupier.compute.local import LocalExecutor
    from croupier.dag import runner

    calls: list[list[str]] = []
    real = runner.run_job

    def counting(stages, config, executor=None, tmp_url=None):  # type: ignore[no-untyped-def]
        calls.append([s.name for s in stages])
        return real(stages, config, executor, tmp_url)

    monkeypatch.setattr(runner, "run_job", counting)
    config = Config(concurrency=2)
    sizes = calibration.TEST.scaled(0.1)
    with LocalExecutor(config) as executor:
        warm = calibration.run_workload(executor, config, (tmp_path / "w0").as_uri(), sizes, together=True)
        together = list(calls)
        calls.clear()
        measured = calibration.run_workload(executor, config, (tmp_path / "w1").as_uri(), sizes)
    assert len(together) == 6, together  # the inputs; then every job whose plans are not forced, and one run per forcing
    assert len(calls) == 19 and all(len(names) == 1 for names in calls), calls
    # stages ready at once share executor calls, one observation each call: in a measured pass,
    # only those of one job (a join's two sides)
    assert len(warm) < len(measured)
    assert all(set(o.facts.name.split("+")) == {"q-join-probe", "q-join-build"} for o in measured if "+" in o.facts.name)
    assert {n for o in warm for n in o.facts.name.split("+")} == {n for o in measured for n in o.facts.name.split("+")}
    assert {o.source for o in measured} >= {"calibration:gensort", "calibration:overheads-8", "calibration:join"}


def test_a_jobs_final_stages_are_all_submitted_before_any_is_awaited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_job's independent final stages run at once (the runner merges stages ready together
    into one executor call): it submits all of them before it waits for the first."""
    from croupier.dag import runner

    events: list[tuple[str, str]] = []
    submit, result = runner.DagRunner.submit, runner.DagRunner.result
    monkeypatch.setattr(runner.DagRunner, "submit", lambda self, stage: events.append(("submit", stage.name)) or submit(self, stage))
    monkeypatch.setattr(runner.DagRunner, "result", lambda self, stage: events.append(("result", stage.name)) or result(self, stage))
    stages = [calibration._overheads(f"o{i}", 2, i) for i in range(3)]
    out = runner.run_job(stages, Config(concurrency=2, tmp_url=(tmp_path / "tmp").as_uri()))
    assert [o.stage.name for o in out.outputs] == ["o0", "o1", "o2"]
    assert events[:4] == [("submit", "o0"), ("submit", "o1"), ("submit", "o2"), ("result", "o0")], events


def test_the_fit_is_kept_the_time_its_resamples_take(monkeypatch: pytest.MonkeyPatch) -> None:
    """The final fit's reserve is timed on a few resamples, which cost less than a whole fit (one
    fit counted once per resample kept three times what the final fit took)."""
    asked: list[int] = []

    def fake_fit(observations: object, base: object, bootstrap: int = 0) -> None:
        asked.append(bootstrap)
        time.sleep(0.02 + 0.004 * bootstrap)  # a whole fit 20 ms, each resample 4 ms

    monkeypatch.setattr(calibration, "fit", fake_fit)
    kept = calibration.fit_seconds([], None, 40)  # type: ignore[arg-type]
    assert asked == [calibration.TIMED_RESAMPLES]
    final = 2 * (0.02 + 0.004 * 40)  # twice the stages
    assert final <= kept <= 1.5 * final, kept

