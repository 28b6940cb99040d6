"""Helpers the benchmark scripts share: the data folder, timing, rounds over a grid, a fresh
fixed profile, SeaweedFS configs."""

from __future__ import annotations

import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Hashable, Iterator, Sequence, TypeVar

from croupier.config import Config, S3Options, Secret
from croupier.jobs.calibrate import calibrate, describe
from croupier.model.cache import Entry
from croupier.testing import SeaweedFS

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


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


def interleaved(points: Sequence[K], measure: Callable[[K], V], rounds: int, between: Callable[[], object] = lambda: None) -> dict[K, list[V]]:
    """``measure`` every point once per round, ``rounds`` times over the whole grid, and return
    each point's measurements: a slow minute on this shared machine then costs one run of each
    point, not every run of the few points measured during it (repeats back to back did that).
    ``between`` runs after every round (``SeaweedFS.vacuum``: reclaim the deleted runs' space)."""
    measured: dict[K, list[V]] = {point: [] for point in points}
    for _ in range(max(1, rounds)):
        for point in points:
            measured[point].append(measure(point))
        between()
    return measured


def fresh_profile(store: str, base: str, config: Config, folder: Path) -> tuple[Config, Entry]:
    """Self-calibrate ``store`` now (the quick workload); return ``config`` fixed to that profile
    (saved under ``folder``; runs then neither recalibrate nor refine it in the background while
    they are measured), and the profile with the calibration's stages, to learn from runs as a
    store's cached profile does (:func:`croupier.model.cache.learn`)."""
    outcome = calibrate(f"{base}/calibrate", config, quick=True, name=store)
    print(describe(outcome.profile), flush=True)
    print(f"  ({store}: calibrated in {outcome.seconds:.1f} s)", flush=True)
    path = folder / f"{store}.json"
    outcome.profile.save(path)
    return config.with_(profile=str(path), calibration="off"), Entry(outcome.profile, list(outcome.observations))


def s3_config(config: Config, server: SeaweedFS) -> Config:
    """``config`` with s3:// URLs pointing at ``server``."""
    s3 = S3Options(endpoint=server.endpoint, access_key_id=Secret("bench"), secret_access_key=Secret("bench"), allow_http=True)
    return config.with_(s3=s3)


@contextmanager
def seaweedfs(config: Config, bucket: str = "bench") -> Iterator[tuple[SeaweedFS, Config]]:
    """A SeaweedFS server on loopback in a temporary folder, with ``bucket`` ready, and ``config``
    pointing s3:// URLs at it; the server stops and its folder goes when the block ends."""
    with tempfile.TemporaryDirectory(prefix="croupier-weed-") as folder, SeaweedFS(Path(folder)) as server:
        server.wait_ready(bucket)
        yield server, s3_config(config, server)
