"""Fixed costs of a small run kept off its path: profile refits on the learner thread; small final
results returned inline, without a storage round trip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl

import croupier
from croupier.config import Config
from croupier.dag.profiles import Learner
from croupier.model.cache import Entry, ProfileCache
from croupier.model.fit import observations_from_report
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
    observations = observations_from_report(frame.last_run.report, 2, "r")
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
    observations = observations_from_report(frame.last_run.report, 1, "r")
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
