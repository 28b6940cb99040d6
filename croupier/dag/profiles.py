"""The profile a run predicts with: found (or calibrated) when the run starts, refined when it ends.

::

    run starts ──> config.profile given? ── yes ──> that profile, as it is (planning elsewhere: aws-s3)
                        │ no
                        ├─ calibration "off" ──> the shipped profile of the store kind
                        ├─ cached for (machine, store, concurrency) ──> the cached profile
                        └─ none cached ──> calibrate here, now (local executor; 10-15 s, once), cache it
    run ends ──> a cached profile refits to the run's measured stages (revision + 1), off the
                 run's critical path: on the process's learner thread (see :class:`Learner`)

Self-calibration runs the standard workload of :mod:`croupier.dag.calibration` on the run's own
executor, under the run's temporary prefix (deleted right after), and says so in one line on the
``croupier`` logger (a warning, so it shows without logging configured). Lithops runs never
calibrate on their own: that would spend the user's money; they use a cached or shipped profile.
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from croupier.dag.run import Run, idle_seconds
from croupier.errors import CroupierError
from croupier.model.cache import Entry, ProfileCache, learn, machine_id, store_key
from croupier.model.fit import Observation, observations_from_report
from croupier.model.profile import StorageProfile, profile_for
from croupier.storage.location import parse_location

LOG = logging.getLogger("croupier")
#: Seconds between two refits of the cached profiles (runs finishing in between are refitted together).
LEARN_INTERVAL = 5.0
#: Longest a queued refit waits for the process to be idle (back-to-back runs get it anyway), how
#: long idle counts (no run for that long: not the next query's planning, which runs no run yet),
#: and how often it looks.
IDLE_WAIT = 60.0
IDLE_QUIET = 0.5
IDLE_POLL = 0.1


class RunProfile:
    """The profile of one run (see the module docstring).

    State:
        profile: what this run's selector and reports use
        entry:   the cache entry it came from (None: explicit, shipped, or calibration off)
        key:     (machine, store, concurrency) of that entry
        calibrated: seconds the run spent calibrating (0 when it found a profile)
    """

    def __init__(self, run: Run, tmp_url: str) -> None:
        config = run.config
        self._config = config
        self.entry: Entry | None = None
        self.key: tuple[str, str, int] | None = None
        self.calibrated = 0.0
        self.profile = self._resolve(run, tmp_url)
        run.report.summary["profile"] = self.profile.label

    def _resolve(self, run: Run, tmp_url: str) -> StorageProfile:
        config = self._config
        if config.profile or config.calibration == "off":
            return profile_for(config, tmp_url)
        self.key = (machine_id(), store_key(tmp_url, config.s3.endpoint), config.concurrency)
        cache = ProfileCache(config.profile_cache)
        self.entry = cache.load(*self.key)
        if self.entry is None and config.executor == "local":
            try:
                self.entry = self._calibrate(run, tmp_url, cache)
            except (CroupierError, OSError) as exc:  # the run goes on with the shipped profile
                LOG.warning("croupier: calibration failed (%s); using the shipped profile", exc)
        if self.entry is None:
            return profile_for(config, tmp_url)
        return replace(self.entry.profile, function_memory=config.function_memory)

    def _calibrate(self, run: Run, tmp_url: str, cache: ProfileCache) -> Entry:
        from croupier.dag.calibration import QUICK, QUICK_BOOTSTRAP, calibrate_store

        assert self.key is not None
        machine, store, concurrency = self.key
        path = cache.path(*self.key)
        LOG.warning(
            "croupier: no profile of %s for this machine yet: calibrating it now (once, 10-15 s, at most %s of "
            "temporary data, deleted after; cached in %s; calibration='off' or --no-calibrate skips this)", store, QUICK.label, path.parent,
        )  # fmt: skip
        outcome = calibrate_store(run.executor, self._config, str(parse_location(tmp_url).child("_calibration")), store, QUICK, bootstrap=QUICK_BOOTSTRAP)
        self.calibrated = outcome.seconds
        profile = replace(outcome.profile, machine=machine, store=store, source=outcome.profile.source + " (self-calibrated on a first run)")
        entry = Entry(profile, outcome.observations)
        cache.save(entry, *self.key)
        return entry

    def learn(self, report: Any, learner: Learner | None = None) -> None:
        """Refine the cached profile with the run's measured stages (nothing for explicit, shipped
        or calibration-off profiles). The refit (a fraction of a second: slow next to a small
        query) runs on ``learner`` (default: the process's :data:`LEARNER`), so the run returns
        without waiting for it; :func:`wait_learning` waits for it."""
        if self.entry is None or self.key is None:
            return
        observations = observations_from_report(report, self._config.concurrency, getattr(report, "run_id", ""))
        if observations:
            (learner or LEARNER).add(self._config.profile_cache, self.key, self.entry, observations)


@dataclass
class _Pending:
    entry: Entry  # the entry the first waiting run started from (used when the cache has none)
    observations: list[Observation] = field(default_factory=list)


class Learner:
    """Refits cached profiles to finished runs' stages, one at a time, on a thread of its own.

    A refit costs a fraction of a second of the driver's CPU — as much as a small query — so it
    runs at most once per ``interval`` seconds: runs that finish in between queue their
    observations per cache file, and the next refit takes them all (one fit and one file write
    for many small queries). It also waits (up to ``IDLE_WAIT``) until no run of the process has
    been under way for ``IDLE_QUIET``: a refit of 0.3-0.6 s beside a run took the driver's CPU
    (and a core the run's functions use) from its scheduling, and one started in the moment
    between two runs took it from the next query's planning (a tenth of the driver's time in a
    loop of small TPC-H queries); as a person looks at a result, it is free.
    Each refit starts from the entry in the cache file as it is then
    (no queued run's stages are lost; a newer calibration is kept), or from the run's entry when
    the file is gone. :meth:`wait` writes what is queued without waiting out the interval; the
    process's learner does so at interpreter exit. A cache that cannot be written is skipped
    with a warning: the runs themselves succeeded.
    """

    def __init__(self, interval: float = LEARN_INTERVAL) -> None:
        self.interval = interval
        self._lock = threading.Condition()
        self._pending: dict[tuple[str, tuple[str, str, int]], _Pending] = {}
        self._busy = False
        self._hurry = 0  # callers of wait(): refit now
        self._last = -math.inf  # time.monotonic() at the end of the last refit
        self._queued = -math.inf  # time.monotonic() when the queue last became non-empty

    def add(self, folder: str, key: tuple[str, str, int], entry: Entry, observations: list[Observation]) -> None:
        """Queue ``observations`` for the profile cached under ``folder`` at ``key``."""
        with self._lock:
            if not self._pending:
                self._queued = time.monotonic()
            self._pending.setdefault((folder, key), _Pending(entry)).observations.extend(observations)
            if not self._busy:
                self._busy = True
                threading.Thread(target=self._loop, name="croupier-learn", daemon=True).start()

    def wait(self, timeout: float | None = None) -> bool:
        """Write every queued refit now; False if ``timeout`` seconds passed first."""
        with self._lock:
            self._hurry += 1
            self._lock.notify_all()
            try:
                return self._lock.wait_for(lambda: not self._busy, timeout)
            finally:
                self._hurry -= 1

    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._pending:  # idle again, under the lock: the next add starts a thread
                        self._busy = False
                        self._lock.notify_all()
                        return
                    now = time.monotonic()
                    delay = self._last + self.interval - now
                    if delay > 0 and not self._hurry:
                        self._lock.wait(delay)
                        continue
                    waited = now - self._queued
                    if idle_seconds() < IDLE_QUIET and waited < IDLE_WAIT and not self._hurry:
                        self._lock.wait(min(IDLE_POLL, IDLE_WAIT - waited))
                        continue
                    (folder, key), pending = self._pending.popitem()
                try:
                    _refit(folder, key, pending)
                except (OSError, CroupierError, ValueError, ArithmeticError) as exc:
                    LOG.warning("croupier: could not refine the cached profile %s: %s", pending.entry.profile.label, exc)
                self._last = time.monotonic()
        except BaseException:  # noqa: BLE001 - re-raised; waiters must not wait forever
            with self._lock:
                self._busy = False
                self._lock.notify_all()
            raise


def _refit(folder: str, key: tuple[str, str, int], pending: _Pending) -> None:
    cache = ProfileCache(folder)
    current = cache.load(*key) or pending.entry
    cache.save(learn(current, pending.observations), *key)


#: The process's learner: every run's refit goes through it (see Learner); what it has queued is
#: written at interpreter exit.
LEARNER = Learner()
atexit.register(LEARNER.wait, 60.0)


def wait_learning(timeout: float | None = None) -> bool:
    """Wait until the profile refits of finished runs are written to the cache (tests, and
    tools that read the cache right after a run); False if ``timeout`` seconds passed first."""
    return LEARNER.wait(timeout)
