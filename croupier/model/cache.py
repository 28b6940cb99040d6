"""Self-calibrated profiles, cached per machine and store, with the stages they were fitted to.

One JSON file per (machine, store, concurrency) under the cache folder (``Config.profile_cache``)::

    <folder>/<machine>/<store>-c<concurrency>.json
        {"profile": {...}, "calibration": [observation, ...], "history": [observation, ...]}

``calibration`` holds the stages of the calibration workload (kept for good); ``history`` the
stages of the runs since (at most :data:`MAX_HISTORY`, oldest dropped first). Each run refits
the profile to both (:func:`learn`), so the profile follows the machine as it is now while the
calibration keeps every coefficient identified; the revision counts the refits. Files are
replaced atomically (write, then rename), so a reader never sees half a profile; two runs
learning at once lose one of their updates, never the file.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from croupier.errors import ConfigError
from croupier.model.fit import Observation, fit, warm_only
from croupier.model.profile import StorageProfile

#: Stages of past runs a cached profile keeps to refit from.
MAX_HISTORY = 400
#: Bootstrap resamples when refitting after a run: none (a run's end must stay cheap); the
#: coefficients' standard errors are the calibration's until ``croupier calibrate`` refits them.
LEARN_BOOTSTRAP = 0


def machine_id() -> str:
    """This machine, as far as performance goes: host name, cores and memory."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**30
    except (ValueError, OSError, AttributeError):
        memory = 0
    return _safe(f"{socket.gethostname()}-{os.cpu_count()}cpu-{memory}g")


def store_key(url: str, endpoint: str | None) -> str:
    """The store a profile describes: ``local-<mount point>`` for a folder (a RAM disk and a
    disk differ), ``s3-<endpoint host>`` for S3 (the port is left out: test servers move),
    ``s3-aws`` without an endpoint."""
    if url.lower().startswith("s3://"):
        if not endpoint:
            return "s3-aws"
        host = re.sub(r"^[a-z]+://", "", endpoint.lower()).split("/")[0].rsplit(":", 1)[0]
        return _safe(f"s3-{host}")
    path = Path(re.sub(r"^file://", "", url))
    while not path.exists() and path != path.parent:
        path = path.parent
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return _safe("local-" + (str(path).strip("/").replace("/", "-") or "root"))


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "unnamed"


#: The calibration workload and stage model a cached entry was made for. An entry of another is
#: recalibrated: its stages were measured by another workload, and its coefficients mean other
#: things (2: the imbalance is a share of one task's work, the per-wave cost is measured on busy
#: functions, the workload gathers a query's tail; 3: a local folder's Parquet is decoded in place,
#: and scans hand on a chunk per row group, so reads measured before cost a third more; 4: a
#: stage's frame operators run as one lazy Polars query, and report one phase for all of them;
#: 5: a Parquet read evaluates its scan's comparisons while decoding, so a read phase holds a
#: filter's work and the filter phase is gone, and small exchange writes cost less per call;
#: 6: Parquet reads are kinds per codec and the table is written in two, operator calls weigh
#: their expressions, and phases say how much fresh memory they faulted in, so that cold ones
#: are left out: an older calibration's kinds and per-call costs mean something else).
WORKLOAD = 6


@dataclass
class Entry:
    """A cached profile and the observations it was fitted to."""

    profile: StorageProfile
    calibration: list[Observation] = field(default_factory=list)
    history: list[Observation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": WORKLOAD,
            "profile": json.loads(self.profile.to_json()),
            "calibration": [o.to_dict() for o in self.calibration],
            "history": [o.to_dict() for o in self.history],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        if data.get("workload", 1) != WORKLOAD:
            raise ConfigError(f"cached profile of calibration workload {data.get('workload', 1)}, expected {WORKLOAD}: recalibrate")
        return cls(
            StorageProfile.from_dict(data["profile"]),
            [Observation.from_dict(o) for o in data.get("calibration", [])],
            [Observation.from_dict(o) for o in data.get("history", [])],
        )


class ProfileCache:
    """The cache folder (see the module docstring)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).expanduser()

    def path(self, machine: str, store: str, concurrency: int) -> Path:
        return self.folder / machine / f"{store}-c{concurrency}.json"

    def load(self, machine: str, store: str, concurrency: int) -> Entry | None:
        """The cached entry, or None when there is none or it is unreadable or of an older
        profile version (then it is recalibrated)."""
        path = self.path(machine, store, concurrency)
        try:
            stamp = _stamp(path)
            known = _READ.get(path)
            if known is not None and known[0] == stamp:
                return known[1]
            entry = Entry.from_dict(json.loads(path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, ConfigError):
            return None
        _READ[path] = (stamp, entry)
        return entry

    def save(self, entry: Entry, machine: str, store: str, concurrency: int) -> Path:
        """Write ``entry`` atomically; return its path."""
        path = self.path(machine, store, concurrency)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(entry.to_dict()))  # json's C encoder (json.dump streams through the Python one: 6x slower)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _READ[path] = (_stamp(path), entry)
        return path


#: Entries this process read or wrote, by path, with the file's (mtime, size, inode) then: a
#: file unchanged since is not parsed again (an entry holds hundreds of observations; parsing it
#: took 15 ms of every query). Entries are never changed in place (:func:`learn` makes new ones).
_READ: dict[Path, tuple[tuple[int, int, int], Entry]] = {}


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_mtime_ns, st.st_size, st.st_ino


def learn(entry: Entry, observations: list[Observation], bootstrap: int = LEARN_BOOTSTRAP) -> Entry:
    """``entry`` refitted with ``observations`` (a run's stages: those that ran warm,
    :func:`croupier.model.fit.warm_only`) added to its history: the newest :data:`MAX_HISTORY`
    history stages and the calibration stages, one revision later."""
    observations = warm_only(observations)  # a cold first run teaches its memory's cost, not its kinds'
    if not observations:
        return entry
    history = (entry.history + observations)[-MAX_HISTORY:]
    result = fit(entry.calibration + history, entry.profile, bootstrap=bootstrap)
    profile = replace(result.profile, revision=entry.profile.revision + 1)
    return Entry(profile, entry.calibration, history)
