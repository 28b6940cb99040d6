"""The profile a run predicts with: found (or calibrated) when the run starts, refined when it ends.

::

    run starts ──> config.profile given? ── yes ──> that profile, as it is (planning elsewhere: aws-s3)
                        │ no
                        ├─ calibration "off" ──> the shipped profile of the store kind
                        ├─ cached for (machine, store, concurrency) ──> the cached profile
                        └─ none cached ──> calibrate here, now (local executor; about 10 s, once), cache it
    run ends ──> a cached profile refits to the run's measured stages (revision + 1)

Self-calibration runs the standard workload of :mod:`croupier.dag.calibration` on the run's own
executor, under the run's temporary prefix (deleted right after), and says so in one line on the
``croupier`` logger (a warning, so it shows without logging configured). Lithops runs never
calibrate on their own: that would spend the user's money; they use a cached or shipped profile.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from croupier.dag.run import Run
from croupier.errors import CroupierError
from croupier.model.cache import Entry, ProfileCache, learn, machine_id, store_key
from croupier.model.fit import observations_from_report
from croupier.model.profile import StorageProfile, profile_for
from croupier.storage.location import parse_location

LOG = logging.getLogger("croupier")


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
        from croupier.dag.calibration import QUICK, calibrate_store

        assert self.key is not None
        machine, store, concurrency = self.key
        path = cache.path(*self.key)
        LOG.warning(
            "croupier: no profile of %s for this machine yet: calibrating it now (once, about 10 s, at most %s of "
            "temporary data, deleted after; cached in %s; calibration='off' or --no-calibrate skips this)", store, QUICK.label, path.parent,
        )  # fmt: skip
        outcome = calibrate_store(run.executor, self._config, str(parse_location(tmp_url).child("_calibration")), store, QUICK, bootstrap=60)
        self.calibrated = outcome.seconds
        profile = replace(outcome.profile, machine=machine, store=store, source=outcome.profile.source + " (self-calibrated on a first run)")
        entry = Entry(profile, outcome.observations)
        cache.save(entry, *self.key)
        return entry

    def learn(self, report: Any) -> None:
        """Refine the cached profile with the run's measured stages (nothing for explicit, shipped
        or calibration-off profiles). A cache that cannot be written is skipped with a warning:
        the run itself has succeeded."""
        if self.entry is None or self.key is None:
            return
        observations = observations_from_report(report, self._config.concurrency, getattr(report, "run_id", ""))
        if not observations:
            return
        try:
            self.entry = learn(self.entry, observations)
            ProfileCache(self._config.profile_cache).save(self.entry, *self.key)
        except (OSError, CroupierError) as exc:
            LOG.warning("croupier: could not refine the cached profile %s: %s", self.entry.profile.label, exc)

