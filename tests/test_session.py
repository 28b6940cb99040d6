"""Sessions keep worker pools across runs; the default session lives until the interpreter exits."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

import croupier
from croupier.compute import LocalExecutor, Task, current_session
from croupier.compute.session import pool_key
from croupier.compute.worker import PRELOAD
from croupier.config import Config

from ._probe import loaded


def _frame(tmp_path: Path, config: Config) -> croupier.LazyFrame:
    path = tmp_path / "t.parquet"
    if not path.exists():
        pl.DataFrame({"k": [1, 2, 1, 3], "v": [1.0, 2.0, 3.0, 4.0]}).write_parquet(path)
    return croupier.scan_parquet(str(path), config=config).group_by("k").agg(croupier.col("v").sum()).sort("k")


def test_runs_in_a_session_reuse_its_workers(tmp_path: Path) -> None:
    config = Config(concurrency=2, progress=False, tmp_url=(tmp_path / "tmp").as_uri())
    with croupier.Session(config) as session:
        assert current_session() is session
        executor = session.executor(config)
        assert isinstance(executor, LocalExecutor)
        started = sorted(executor.worker_pids())
        assert len(started) == 2  # started when the session opened, before any run
        first = _frame(tmp_path, config).collect()
        second = _frame(tmp_path, config).collect()
        assert sorted(executor.worker_pids()) == started
        assert session.executor(config) is executor
    assert first.equals(second) and first["v"].to_list() == [4.0, 2.0, 4.0]
    assert executor.worker_pids() == []
    assert current_session() is not session
    with pytest.raises(RuntimeError, match="closed"):
        session.executor(config)


def test_other_pool_shapes_get_their_own_executor(tmp_path: Path) -> None:
    config = Config(concurrency=1, progress=False)
    with croupier.Session(config, start=False) as session:
        one = session.executor(config)
        two = session.executor(config.with_(concurrency=2))
        same = session.executor(config.with_(progress=True))  # not a pool property
    assert one is not two and one is same
    assert pool_key(config) != pool_key(config.with_(concurrency=2))


def test_workers_preload_what_tasks_need_before_the_first_task() -> None:
    config = Config(concurrency=1, progress=False)
    with croupier.Session(config) as session:
        [result] = session.executor(config).map([Task("probe-0", loaded, (PRELOAD,))])
    _, imported = result.value
    assert set(imported) == set(PRELOAD)


def test_the_default_session_is_shut_down_at_exit(tmp_path: Path) -> None:
    script = tmp_path / "query.py"
    data = tmp_path / "t.parquet"
    pl.DataFrame({"k": [1, 2, 1]}).write_parquet(data)
    script.write_text(textwrap.dedent(f"""
        import croupier
        from croupier.compute import current_session
        config = croupier.Config(concurrency=2, progress=False)
        frame = croupier.scan_parquet({str(data)!r}, config=config).group_by("k").len().sort("k")
        print(frame.collect()["len"].to_list(), frame.collect()["len"].to_list())
        pids = current_session().executor(config).worker_pids()
        print(" ".join(map(str, pids)))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[2, 1] [2, 1]"
    assert "Traceback" not in done.stderr and "leaked" not in done.stderr
    for pid in map(int, lines[1].split()):
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_a_run_in_fresh_workers_says_its_phases_ran_cold_and_a_warm_rerun_does_not(tmp_path: Path) -> None:
    """Each phase reports the fresh memory its function faulted in. Fresh workers' first run of a
    query touches about as much as its data (its phases are cold, and the model's fit leaves them
    out); the same query again in the same workers reuses that memory."""
    from croupier.model.fit import cold, observations_from_report
    from croupier.report import cold_phase

    folder = tmp_path / "t"
    folder.mkdir()
    for i in range(3):
        n = 400_000
        pl.DataFrame({"k": pl.int_range(n, eager=True) % 1000 + i, "v": pl.int_range(n, eager=True).cast(pl.Float64)}).write_parquet(folder / f"p{i}.parquet")
    config = Config(concurrency=2, progress=False, tmp_url=(tmp_path / "tmp").as_uri())
    query = lambda: croupier.scan_parquet(str(folder), config=config).group_by("k").agg(croupier.col("v").sum(), croupier.col("v").max().alias("m")).sort("k")  # noqa: E731
    with croupier.Session(config) as session:
        executor = session.executor(config)
        runs = []
        for _ in range(2):
            frame = query()
            frame.collect(executor=executor)
            assert frame.last_run is not None
            runs.append(frame.last_run.report)

    def fresh(report: object) -> float:
        return sum(v[4] for stage in report.stages for v in stage.phases.values())  # type: ignore[attr-defined]

    first = observations_from_report(runs[0], 2)
    assert all(len(v) == 5 for o in first for v in o.phases.values())
    scan = next(o for o in first if any(k.startswith("read:parquet") for k in o.phases))
    read = next(v for k, v in scan.phases.items() if k.startswith("read:parquet"))
    assert cold_phase(read) and cold(scan)
    assert fresh(runs[1]) < fresh(runs[0]) / 4
