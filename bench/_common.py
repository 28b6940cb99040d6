"""Helpers the benchmark scripts share: the data folder, timing, SeaweedFS configs."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

from croupier.config import Config, S3Options, Secret
from croupier.testing import SeaweedFS


def default_dir(size: int, name: str) -> Path:
    """A memory-backed folder (/dev/shm) when it has room, else ./bench-data/<name>.

    This VM's disk throttles sustained writes, which makes timings noisy; both Croupier and the
    peers use the same folder, so the comparison stays fair either way.
    """
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 5 * size:
        return shm / name
    return Path("bench-data").resolve() / name


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def s3_config(config: Config, server: SeaweedFS) -> Config:
    """``config`` with s3:// URLs pointing at ``server``."""
    s3 = S3Options(endpoint=server.endpoint, access_key_id=Secret("bench"), secret_access_key=Secret("bench"), allow_http=True)
    return config.with_(s3=s3)
