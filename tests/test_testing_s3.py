"""``python -m croupier.testing s3``: a local S3 server a newcomer can try Croupier against."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from croupier.config import Config, S3Options, Secret
from croupier.storage import open_store
from croupier.testing import SeaweedFS

from .conftest import sigint_default


def _one_liner(*args: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """Start ``python -m croupier.testing *args``; return it and the environment with the
    variables its ``export NAME=value`` lines set (read until it says how to stop it, within 60 s)."""
    server = subprocess.Popen([sys.executable, "-m", "croupier.testing", *args], stdout=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    env = dict(os.environ)
    deadline = time.time() + 60
    line = ""
    while time.time() < deadline and "Ctrl-C" not in line:
        line = server.stdout.readline()  # type: ignore[union-attr]
        if line.startswith("export ") and "=" in line and " " not in line.strip().split("=", 1)[1]:
            name, value = line.strip().removeprefix("export ").split("=", 1)
            env[name] = value
        if not line and server.poll() is not None:
            break
    return server, env


def _stop(server: subprocess.Popen[str]) -> None:
    """Ctrl-C, as a user stops it; it must exit within 20 s."""
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        raise


def test_the_one_liner_starts_s3_that_the_cli_can_use(tmp_path: Path) -> None:
    server, env = _one_liner("s3", "--bucket", "demo", "--dir", str(tmp_path / "s3"))
    try:
        assert env.get("AWS_ENDPOINT_URL", "").startswith("http://127.0.0.1:"), env.get("AWS_ENDPOINT_URL")
        env.update(AWS_ACCESS_KEY_ID="any", AWS_SECRET_ACCESS_KEY="any", CROUPIER_CALIBRATION="off")
        cli = [sys.executable, "-m", "croupier.cli", "--no-progress", "--concurrency", "2"]
        gen = subprocess.run([*cli, "gensort", "s3://demo/in", "--size", "2MB", "--parts", "2"], env=env, capture_output=True, text=True, timeout=120)
        assert gen.returncode == 0, gen.stderr
        volumes = [p for p in (tmp_path / "s3").rglob("*.dat") if p.stat().st_size]
        assert volumes, "the server kept no data"  # (its folder holds its logs too: volumes, not any file)
        again = subprocess.run([*cli, "gensort", "s3://demo/in", "--size", "2MB", "--parts", "2"], env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode != 0 and "already holds an output" in again.stderr  # the CLI sees what it wrote
    finally:
        _stop(server)
    assert server.returncode == 0


def _volume_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.dat"))


def test_vacuum_reclaims_deleted_objects_and_a_bad_bucket_name_fails_fast(tmp_path: Path) -> None:
    """Benchmarks that overwrite hundreds of MB per run call ``vacuum`` between rounds (SeaweedFS
    otherwise keeps deleted data until 30% of a volume is garbage, and fills the disk's volumes);
    and a bucket name S3 refuses is an error at once, not a minute of waiting for readiness."""
    server = SeaweedFS(tmp_path / "s3")
    try:
        server.wait_ready("croupier-vacuum")
        assert sum(p.is_socket() for p in server._sockets) >= 3  # the test can tell: its sockets are where stop() looks
        config = Config(s3=S3Options(endpoint=server.endpoint, access_key_id=Secret("t"), secret_access_key=Secret("t"), allow_http=True))
        store = open_store("s3://croupier-vacuum/v", config)
        store.put("blob", os.urandom(8 << 20))
        store.delete_prefix()
        assert _volume_bytes(tmp_path / "s3") >= 8 << 20  # deleted, not yet reclaimed
        deadline = time.time() + 30  # the filer deletes a removed object's chunks a moment later
        while _volume_bytes(tmp_path / "s3") >= 1 << 20 and time.time() < deadline:
            time.sleep(0.5)
            server.vacuum()
        assert _volume_bytes(tmp_path / "s3") < 1 << 20
        with pytest.raises(ValueError, match="refuses the bucket name 'b'"):  # not the timeout's RuntimeError
            server.wait_ready("b", timeout=30)
    finally:
        server.stop()
    # nothing left in /tmp: its logs went to its folder, its sockets were deleted
    pid = server.process.pid
    assert list((tmp_path / "s3").glob(f"weed.*.{pid}")) and not glob.glob(f"/tmp/weed.*.{pid}")
    assert not any(p.exists() for p in server._sockets)


@pytest.mark.redis
def test_the_one_liner_starts_a_redis_fast_tier_that_the_cli_uses(tmp_path: Path) -> None:
    """``python -m croupier.testing redis`` prints the variable to export; a CLI sort with it and
    ``--tier fast`` puts its exchange there, and Ctrl-C stops the server."""
    import json

    server, env = _one_liner("redis", "--maxmemory", "64MiB", "--dir", str(tmp_path / "redis"))
    try:
        assert env.get("CROUPIER_FAST_TIER", "").startswith("redis://127.0.0.1:"), env.get("CROUPIER_FAST_TIER")
        env.update(CROUPIER_CALIBRATION="off")
        cli = [sys.executable, "-m", "croupier.cli", "--no-progress", "--concurrency", "2"]
        gen = subprocess.run([*cli, "gensort", str(tmp_path / "in"), "--size", "2MB", "--parts", "2"], env=env, capture_output=True, text=True, timeout=120)
        assert gen.returncode == 0, gen.stderr
        run = subprocess.run([*cli, "--tier", "fast", "sort", str(tmp_path / "in"), str(tmp_path / "out"), "--report", str(tmp_path / "r.json")], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        report = json.loads((tmp_path / "r.json").read_text())
        (entry,) = report["exchanges"]
        assert entry["tier"] == "fast" and entry["tier_why"] == "tier forced: fast", entry
    finally:
        _stop(server)
    assert server.returncode == 0
