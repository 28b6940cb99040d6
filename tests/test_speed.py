"""Fixed costs of a small run kept off its path: profile refits on the learner thread; small final
results returned inline, without a storage round trip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import croupier
from croupier.config import Config
from tests.conftest import BUCKET
from croupier.dag.profiles import Learner
from croupier.model.cache import Entry, ProfileCache
from croupier.model.fit import observations_from_report, warm_only
from croupier.model.profile import profile_for


def _frame(tmp_path: Path, config: Config) -> croupier.LazyFrame:
    path = tmp_path / "t.parquet"
    if not path.exists():
        pl.DataFrame({"k": [1, 2, 1, 3] * 50, "v": [1.0, 2.0, 3.0, 4.0] * 50}).write_parquet(path)
    return croupier.scan_parquet(str(path), config=config).group_by("k").agg(croupier.col("v").sum()).sort("k")


def test_learner_refits_every_queued_run_once_each_from_the_cached_file(tmp_path: Path) -> None:
    config = Config(concurrency=2, progress=False, tmp_url=(tmp_path / "tmp").as_uri())
    frame = _frame(tmp_path, config)
    frame.collect()
    assert frame.last_run is not None
    observations = warm_only(observations_from_report(frame.last_run.report, 2, "r"))  # what a learner keeps of them
    assert observations
    folder, key = str(tmp_path / "cache"), ("m", "local-test", 2)
    base = Entry(profile_for(config, config.tmp_url or ""))
    cached = Entry(base.profile, history=observations[:1])
    ProfileCache(folder).save(cached, *key)  # the file is newer than the runs' entry
    learner = Learner()
    for _ in range(3):
        learner.add(folder, key, base, observations)
    assert learner.wait(60)
    after = ProfileCache(folder).load(*key)
    assert after is not None
    assert len(after.history) == 1 + 3 * len(observations), "the file's history kept, every queued run's stages added"
    assert 1 <= after.profile.revision <= 3
    assert learner.wait(0)  # idle: nothing to wait for


def test_waiting_for_the_learner_writes_at_once_and_exit_writes_what_is_queued(tmp_path: Path) -> None:
    config = Config(concurrency=1, progress=False, tmp_url=(tmp_path / "tmp").as_uri())
    frame = _frame(tmp_path, config)
    frame.collect()
    assert frame.last_run is not None
    # (the stages a learner keeps: a fresh worker's first stage may have run cold, model.fit.warm_only)
    observations = warm_only(observations_from_report(frame.last_run.report, 1, "r"))
    folder, key = str(tmp_path / "cache"), ("m", "local-test", 1)
    learner = Learner(interval=3600.0)  # a second refit would wait an hour unless hurried
    base = Entry(profile_for(config, config.tmp_url or ""))
    learner.add(folder, key, base, observations)
    assert learner.wait(60)
    learner.add(folder, key, base, observations)
    assert learner.wait(60), "wait() does not wait out the interval"
    after = ProfileCache(folder).load(*key)
    assert after is not None and len(after.history) == 2 * len(observations) and after.profile.revision == 2

    script = f"""
from croupier.dag import profiles
from croupier.model.cache import ProfileCache
profiles.LEARNER.interval = 3600.0
entry = ProfileCache({folder!r}).load(*{key!r})
profiles.LEARNER.add({folder!r}, {key!r}, entry, entry.history[:1])  # refitted at once
assert profiles.LEARNER.wait(60)
profiles.LEARNER.add({folder!r}, {key!r}, entry, entry.history[:1])  # queued for an hour: written at exit
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    last = ProfileCache(folder).load(*key)
    assert last is not None and last.profile.revision == 4 and len(last.history) == 2 * len(observations) + 2


def test_the_learner_refits_between_runs_not_beside_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued refit waits while a run of the process is under way (its CPU would slow the
    run's scheduling), and in the moment between two runs (the next query's planning), and is
    written once none has been for a while; a waiter hurries it as before."""
    import gc
    import time

    from croupier.dag import profiles, run

    config = Config(concurrency=1, progress=False, tmp_url=(tmp_path / "tmp").as_uri())
    frame = _frame(tmp_path, config)
    gc.collect()  # runs other tests left unclosed count until collected: not during this test
    before = run.active_runs()
    frame.collect()
    assert frame.last_run is not None and run.active_runs() == before, "a finished run is not counted"
    if not before:
        assert 0 < run.idle_seconds() < 5, "idle since that run ended"
    observations = observations_from_report(frame.last_run.report, 1, "r")
    folder, key = str(tmp_path / "cache"), ("m", "local-test", 1)
    base = Entry(profile_for(config, config.tmp_url or ""))
    idle = [0.0]
    monkeypatch.setattr(profiles, "idle_seconds", lambda: idle[0])
    learner = Learner(interval=0.0)
    learner.add(folder, key, base, observations)
    time.sleep(1.0)  # ten looks: a run is under way, so nothing is written
    assert ProfileCache(folder).load(*key) is None
    idle[0] = profiles.IDLE_QUIET / 2  # a run has just ended: the next may be planned
    time.sleep(0.5)
    assert ProfileCache(folder).load(*key) is None
    idle[0] = profiles.IDLE_QUIET * 2
    deadline = time.monotonic() + 30
    while ProfileCache(folder).load(*key) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ProfileCache(folder).load(*key) is not None, "written once no run was under way for a while"
    idle[0] = 0.0
    learner.add(folder, key, base, observations)
    assert learner.wait(60), "a waiter does not wait for the runs to end"
    after = ProfileCache(folder).load(*key)
    assert after is not None and after.profile.revision == 2


def _requests(io: object, kind: str) -> int:
    stats = getattr(io, "kinds").get(kind)
    return stats.requests if stats is not None else 0


def _two_files(tmp_path: Path) -> tuple[str, pl.DataFrame]:
    """A small file and a larger one: a filter over them runs one final task per file."""
    folder = tmp_path / "two"
    folder.mkdir(exist_ok=True)
    small = pl.DataFrame({"k": list(range(10)), "s": ["x" * 20] * 10})
    large = pl.DataFrame({"k": list(range(10, 20_010)), "s": ["y" * 20] * 20_000})
    small.write_parquet(folder / "a.parquet")
    large.write_parquet(folder / "b.parquet")
    return str(folder / "*.parquet"), pl.concat([small, large]).filter(pl.col("k") % 3 != 1)


def _reads(io: object) -> int:
    return _requests(io, "GET") + _requests(io, "GET_RANGE")


def test_a_small_collected_result_comes_back_inline_without_touching_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from croupier.dag import runner

    config = Config(concurrency=2, progress=False, tmp_url=(tmp_path / "tmp").as_uri())
    frame = _frame(tmp_path, config)
    expected = pl.read_parquet(tmp_path / "t.parquet").group_by("k").agg(pl.col("v").sum()).sort("k")
    seen = {}
    for limit in (0, runner.INLINE_RESULT_BYTES):  # through storage as before; inline
        monkeypatch.setattr(runner, "INLINE_RESULT_BYTES", limit)
        assert frame.collect().equals(expected)
        report = frame.last_run.report  # type: ignore[union-attr]
        final = [s for s in report.stages if s.name != "driver"][-1]
        assert final.name.endswith("final") and final.tasks == 1
        seen[limit] = (_requests(final.io, "PUT"), _reads(report.stage("driver").io), bool(final.phases.get("write:result")))
    assert seen[0][0] == 1 and not seen[0][2], "without inline results the final task writes its object"
    inline = seen[runner.INLINE_RESULT_BYTES]
    assert inline[0] == 0 and inline[2], "the final task wrote nothing: it returned its rows"
    assert inline[1] == seen[0][1] - 1, "the driver read nothing back"


def test_results_over_the_inline_limit_go_through_storage_in_task_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from croupier.dag import runner

    config = Config(concurrency=2, progress=False, tmp_url=(tmp_path / "tmp").as_uri())
    url, expected = _two_files(tmp_path)
    query = croupier.scan_parquet(url, config=config).filter(croupier.col("k") % 3 != 1)
    query.collect()  # the footers are read now, once: the runs below read only what was written
    reads = {}
    for limit, inline in ((0, 0), (2 * 4096, 1), (runner.INLINE_RESULT_BYTES, 2)):  # none inline; the small task's; both
        monkeypatch.setattr(runner, "INLINE_RESULT_BYTES", limit)
        got = query.collect()
        assert got.equals(expected), f"limit {limit}: the same rows in the same order, inline or not"
        report = query.last_run.report  # type: ignore[union-attr]
        final = [s for s in report.stages if s.name != "driver"][-1]
        assert final.tasks == 2
        assert int(final.phases.get("write:result", [0, 0, 0, 0])[3]) == inline, f"limit {limit}"
        assert _requests(final.io, "PUT") == 2 - inline
        reads[inline] = _reads(report.stage("driver").io)
    assert reads[0] - reads[2] == 2 and reads[0] - reads[1] == 1, "the driver reads back exactly the objects written"


def test_a_table_scanned_twice_in_a_run_is_listed_once_and_its_footers_read_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run lists its tables (once each, however often it scans them); a footer is read once
    while its file is unchanged (the process remembers it by the file's listed version), and again
    when the file is replaced — also by one of the same size."""
    from croupier.dag import scan

    monkeypatch.setattr(scan, "_FOOTERS", type(scan._FOOTERS)())
    footers: list[str] = []
    read_metadata = scan.pq.read_metadata
    monkeypatch.setattr(scan.pq, "read_metadata", lambda source, *a, **k: footers.append(source._key) or read_metadata(source, *a, **k))
    config = Config(concurrency=2, progress=False, tmp_url=(tmp_path / "tmp").as_uri())
    folder = tmp_path / "tbl"
    folder.mkdir()

    def write(i: int, base: int) -> None:
        pl.DataFrame({"k": list(range(base, base + 10)), "a": [float(i)] * 10, "b": ["x"] * 10}).write_parquet(folder / f"p{i}.parquet")

    for i in range(3):
        write(i, i * 10)
    url = str(folder / "*.parquet")
    once = croupier.scan_parquet(url, config=config).select("k", "a")
    expected = pl.read_parquet(url).select("k", "a", "b").sort("k")
    assert once.collect().sort("k").equals(expected.select("k", "a"))
    assert sorted(footers) == ["p0.parquet", "p1.parquet", "p2.parquet"], "planning and the run read each footer once"
    twice = once.join(croupier.scan_parquet(url, config=config).select("k", "b"), on="k").sort("k")
    assert twice.collect().equals(expected)
    assert len(footers) == 3, "the second query read no footer"
    reports = [f.last_run.report.stage("driver").io for f in (once, twice)]  # type: ignore[union-attr]
    assert _requests(reports[0], "LIST") >= 1, "the driver lists the table"
    assert [_requests(io, "LIST") for io in reports] == [_requests(reports[0], "LIST")] * 2, "listed once per run"
    size = (folder / "p1.parquet").stat().st_size
    write(1, 100)  # new keys, the same size
    assert (folder / "p1.parquet").stat().st_size == size
    assert twice.collect().equals(pl.read_parquet(url).select("k", "a", "b").sort("k")), "the replaced file's rows"
    assert footers[3:] == ["p1.parquet"], "only the replaced file's footer read again"


@pytest.mark.s3
def test_a_run_lists_all_its_tables_on_object_storage_at_once(s3_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A query over three tables on S3 lists them side by side when its run starts (one round
    trip of listing, not one per table), and answers as before; a table that cannot be listed
    still fails with its own error."""
    import io
    import threading
    import time
    import uuid

    from croupier.dag import splits
    from croupier.errors import InputError
    from croupier.storage import open_store

    running, most, lock = [0], [0], threading.Lock()
    resolve = splits.resolve

    def slow_resolve(url, open_store):  # type: ignore[no-untyped-def]
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return resolve(url, open_store)

    monkeypatch.setattr(splits, "resolve", slow_resolve)
    root = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
    config = s3_config.with_(progress=False, tmp_url=f"{root}/tmp")
    store = open_store(root, config)
    frames = {}
    for name in ("a", "b", "c"):
        df = pl.DataFrame({"k": list(range(20)), name: [f"{name}{i}" for i in range(20)]})
        buf = io.BytesIO()
        df.write_parquet(buf)
        store.put(f"{name}/p0.parquet", buf.getvalue())
        frames[name] = df
    try:
        scan = {n: croupier.scan_parquet(f"{root}/{n}/*.parquet", config=config) for n in frames}
        query = scan["a"].join(scan["b"], on="k").join(scan["c"], on="k").sort("k")
        expected = frames["a"].join(frames["b"], on="k").join(frames["c"], on="k").sort("k")
        most[0] = 0
        assert query.collect().equals(expected)
        assert most[0] == 3, "the three tables were listed at the same time"
        store.delete(["c/p0.parquet"])
        with pytest.raises(InputError, match="no input objects match"):
            query.collect()
    finally:
        store.delete_prefix()
