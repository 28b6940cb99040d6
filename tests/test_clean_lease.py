"""Promise 5, cleanup that knows what is alive: run leases, ``croupier clean`` beside live runs,
and after a driver killed with SIGKILL, on the local folder and on SeaweedFS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from croupier.config import Config
from croupier.dag.run import Run
from croupier.errors import ConfigError, InputError
from croupier.jobs.clean import clean, find_leftovers
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.storage import open_store, parse_location
from croupier.storage.commit import LOCK, read_parts
from croupier.storage.faults import FaultSpec
from croupier.storage.lease import LEASE, read_lease


def _objects(url: str, config: Config) -> dict[str, bytes]:
    store = open_store(url, config)
    return {o.key: bytes(store.get(o.key)) for o in store.list()}


def test_a_run_holds_a_renewed_lease_and_removes_everything_at_the_end(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    # a 1 s lease renewed every 1/3 s: a renewal may be late by 2/3 s on a loaded machine
    run = Run("test", config.with_(lease=1.0))
    tmp = run.open_tmp(f"{root}/out")
    assert tmp == parse_location(f"{root}/out/_croupier_tmp/{run.run_id}")
    store = open_store(tmp, config)
    first = read_lease(store)
    assert first is not None and first[0].run_id == run.run_id and first[0].pid == os.getpid()
    store.put("map/l0/s00000", b"x")
    later = first
    waited = time.monotonic() + 10
    while later is not None and later[0].expires <= first[0].expires and time.monotonic() < waited:
        time.sleep(0.05)  # until a renewal lands
        later = read_lease(store)
    assert later is not None and later[0].expires > first[0].expires and not later[0].expired()
    run.finish()
    assert open_store(root, config).list() == []
    if not root.startswith("s3://"):
        assert not (Path(parse_location(root).path) / "out" / "_croupier_tmp").exists()  # no empty folders either
    assert any(s.name == "lease" for s in run.report.stages)  # renewals are counted, apart


def test_clean_during_a_live_run_deletes_nothing_of_it(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    # a 1 s lease, renewed every 1/3 s: a renewal may be late by 2/3 s before the lease lapses (with
    # 0.3 s, one scheduling hiccup of 0.2 s on a loaded 2-core machine failed the test)
    run = Run("live", config.with_(lease=1.0))
    tmp = run.open_tmp(f"{root}/out")
    commit = run.begin_output(f"{root}/out", overwrite=False)
    open_store(tmp, config).put("map/l0/s00000", b"exchange data")
    open_store(f"{root}/out", config).put(f"part-00000-{commit.tag}", b"a part, not committed yet")
    mine = _objects(f"{root}/out", config)
    deadline = time.time() + 3.0  # three lease periods: the keeper must keep renewing
    while time.time() < deadline:
        result = clean(f"{root}/out", config)
        assert result.removed == [] and [r.run_id for r in result.skipped] == [run.run_id]
        assert result.skipped[0].reason.startswith("live: lease expires in")
        assert result.writer is not None and not result.writer.removable and not result.writer_removed
        time.sleep(0.2)
    with_leases = _objects(f"{root}/out", config)
    assert set(with_leases) == set(mine)  # nothing deleted (leases renewed in place)
    commit.abort()
    run.finish()
    assert open_store(f"{root}/out", config).list() == []


def test_clean_while_a_real_sort_runs(store_env: tuple[str, Config]) -> None:
    """``croupier clean OUT`` in the middle of a sort into OUT: the sort still succeeds."""
    root, config = store_env
    gensort(f"{root}/in", 2_000_000, parts=4, config=config)
    slow = config.with_(faults=FaultSpec(latency=0.01))
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.update(report=sort(f"{root}/in", f"{root}/out", 4, slow)))
    thread.start()
    cleaned = 0
    while thread.is_alive():
        if open_store(f"{root}/out", config).list("_croupier_tmp/"):
            result = clean(f"{root}/out", config)
            assert result.removed == [] and (result.writer is None or not result.writer_removed)
            cleaned += 1
        time.sleep(0.05)
    thread.join()
    assert "report" in outcome and cleaned > 0
    result, _ = valsort(f"{root}/out", config, input_url=f"{root}/in")
    assert result.ok


def test_clean_refuses_a_path_that_does_not_exist_and_force_without_a_run(store_env: tuple[str, Config]) -> None:
    from click.testing import CliRunner

    from croupier.cli import main

    root, config = store_env
    with pytest.raises(InputError, match="does not exist|nothing exists under"):
        clean(f"{root}/no/such/place", config)
    with pytest.raises(ConfigError, match="needs a run id"):
        clean(root, config, force=True)
    args = ["--s3-endpoint", config.s3.endpoint] if root.startswith("s3://") and config.s3.endpoint else []
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    out = CliRunner().invoke(main, [*args, "clean", f"{root}/no/such/place"], env=env)
    assert out.exit_code != 0 and ("does not exist" in out.output or "nothing exists under" in out.output)
    out = CliRunner().invoke(main, [*args, "clean", root, "--force"], env=env)
    assert out.exit_code != 0 and "--force needs --run-id" in out.output


def test_clean_removes_empty_run_folders_and_partial_files(tmp_path: Path) -> None:
    config = Config()
    root = tmp_path / "out"
    dead = root / "_croupier_tmp" / "20200101T000000Z-deadbeef"
    (dead / "map" / "l0").mkdir(parents=True)
    (dead / "map" / ".croupier-partial-s00001.0123abcd").write_bytes(b"half written")
    (root / "_croupier_tmp" / "20200101T000000Z-0000cafe" / "empty").mkdir(parents=True)
    (root / "keep.txt").write_text("the user's")
    result = clean(str(root), config, dry_run=True)
    assert sorted(r.run_id for r in result.removed) == ["20200101T000000Z-0000cafe", "20200101T000000Z-deadbeef"]
    assert dead.exists()
    clean(str(root), config)
    assert sorted(p.name for p in root.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("store_kind", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_after_a_sigkill_of_every_process_clean_removes_everything_the_run_left(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Kill a sort (driver and workers) mid-run while it overwrites an output; ``croupier clean``
    skips it while its lease lives, then removes all it left, partial files included; the old
    output is whole, byte for byte."""
    if store_kind == "s3":
        config = request.getfixturevalue("s3_config")
        root = f"s3://croupier-test/{tmp_path.name}-kill"
        cli = [sys.executable, "-m", "croupier.cli", "--s3-endpoint", config.s3.endpoint]
    else:
        config = Config(concurrency=2)
        root = str(tmp_path / "store")
        cli = [sys.executable, "-m", "croupier.cli"]
    gensort(f"{root}/in", 30_000_000, 4, config)
    sort(f"{root}/in", f"{root}/out", 2, config)
    old = _objects(f"{root}/out", config)
    # TMPDIR: the killed process's multiprocessing folder (pymp-*) stays in the test's folder, not /tmp
    env = dict(os.environ, CROUPIER_LEASE="1s", AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path))
    proc = subprocess.Popen([*cli, "--concurrency", "2", "sort", f"{root}/in", f"{root}/out", "--overwrite", "-p", "8"], env=env, stderr=subprocess.PIPE, start_new_session=True)
    out = open_store(f"{root}/out", config)
    deadline = time.time() + 90
    while time.time() < deadline and not (out.exists(LOCK) and len(out.list("_croupier_tmp/")) > 4):
        time.sleep(0.02)
    assert proc.poll() is None, "the sort ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    if store_kind == "local":  # what a write killed half-way leaves (never listed)
        folder = Path(parse_location(f"{root}/out").path)
        run_dir = next((folder / "_croupier_tmp").iterdir())
        (run_dir / ".croupier-partial-s00003.0123abcd").write_bytes(b"half")
        tag = run_dir.name.rsplit("-", 1)[1]
        (folder / f".croupier-partial-part-00005-{tag}.0123abcd").write_bytes(b"half a part")
    assert {k: v for k, v in _objects(f"{root}/out", config).items() if k in old} == old  # never touched
    assert {o.key: bytes(out.get(o.key)) for o in read_parts(out)} == {k: v for k, v in old.items() if k.startswith("part-")}
    early = clean(f"{root}/out", config.with_(lease=1))
    assert early.removed == [] or all("expired" in r.reason for r in early.removed)
    time.sleep(2.2)  # the 1 s lease lapses, and is dead a period later
    result = clean(f"{root}/out", config.with_(lease=1))
    # on a loaded machine the lease may already have expired at the first clean: together they remove it all
    assert (early.removed or result.removed) and (early.writer_removed or result.writer_removed)
    assert _objects(f"{root}/out", config) == old
    assert find_leftovers(f"{root}/out", config) == []
    if store_kind == "local":
        left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
        assert left == sorted(old), left  # no partial files, no empty folders
    valid, _ = valsort(f"{root}/out", config, input_url=f"{root}/in")
    assert valid.ok
    if store_kind == "s3":
        open_store(root, config).delete_prefix()


def test_lease_is_a_validated_config_duration() -> None:
    assert Config.from_env({"CROUPIER_LEASE": "2m"}).lease == 120
    for bad in (0, -1, float("nan")):
        with pytest.raises(ConfigError, match="lease"):
            Config(lease=bad)
    with pytest.raises(ValueError, match="duration"):
        Config.from_env({"CROUPIER_LEASE": "soon"})
    assert Config(tmp_url="relative/tmp").tmp_url == str(parse_location("relative/tmp"))  # resolved once
    assert LEASE == "_lease"


def test_a_lapsed_lease_is_dead_only_a_period_later(store_env: tuple[str, Config]) -> None:
    """A run whose keeper is late (its lease lapsed less than a lease period ago) keeps its files
    and its output: clean skips it and says why; a period later it is dead and clean removes it.
    Leases written before the period was recorded are dead when they lapse, as before."""
    import json

    from croupier.storage.lease import Lease

    lease = Lease.new("20260101T000000Z-0000abcd", 10.0, now=1000.0)
    assert lease.expired(1010.0) and not lease.dead(1015.0) and lease.dead(1020.0)
    assert Lease.from_bytes(lease.renewed(10.0, now=1005.0).to_bytes(), "x").period == 10.0
    old = json.loads(lease.to_bytes())
    del old["period"]
    legacy = Lease.from_bytes(json.dumps(old).encode(), "x")
    assert legacy.period == 0.0 and legacy.dead(1010.0)

    root, config = store_env
    run = Run("late", config.with_(lease=2.0))
    tmp = run.open_tmp(f"{root}/out")
    open_store(tmp, config).put("map/l0/s00000", b"exchange data")
    run.keeper.stop()  # the keeper is late from now on
    held = read_lease(open_store(tmp, config), LEASE)
    assert held is not None
    lapse = held[0].expires - time.time()
    time.sleep(max(0.0, lapse) + 0.3)  # lapsed, not yet dead
    result = clean(f"{root}/out", config)
    assert result.removed == [] and "keeper may be late" in result.skipped[0].reason, result.skipped
    time.sleep(max(0.0, held[0].expires + held[0].period - time.time()) + 0.1)
    result = clean(f"{root}/out", config)
    assert [r.run_id for r in result.removed] == [run.run_id]
    assert open_store(f"{root}/out", config).list() == []
