"""Find and delete what crashed drivers left: run prefixes under ``<url>/_croupier_tmp/``.

Every run keeps its intermediate objects under ``_croupier_tmp/<run id>/`` and deletes them itself,
on success, failure and Ctrl-C. Only a driver that was killed outright leaves some behind; this
removes them by run id or by age (the run id starts with its UTC start time).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from croupier.config import Config
from croupier.storage import open_store

TMP = "_croupier_tmp/"


@dataclass
class Leftovers:
    """The objects one run left behind."""

    run_id: str
    keys: list[str] = field(default_factory=list)
    bytes: int = 0

    @property
    def started(self) -> dt.datetime | None:
        """Start time from the run id (``20261122T101500Z-ab12cd34``); None if it has another form."""
        try:
            return dt.datetime.strptime(self.run_id.split("-")[0], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
        except ValueError:
            return None


def find_leftovers(url: str, config: Config) -> list[Leftovers]:
    """Runs with intermediate objects under ``url``, oldest first."""
    store = open_store(url, config)
    try:
        runs: dict[str, Leftovers] = {}
        for obj in store.list(TMP):
            run_id = obj.key[len(TMP) :].split("/", 1)[0]
            entry = runs.setdefault(run_id, Leftovers(run_id))
            entry.keys.append(obj.key)
            entry.bytes += obj.size
        return sorted(runs.values(), key=lambda r: r.run_id)
    finally:
        store.close()


def clean(url: str, config: Config, run_id: str | None = None, older_than: float | None = None, dry_run: bool = False) -> list[Leftovers]:
    """Delete the leftovers of run ``run_id``, or of runs started more than ``older_than`` seconds ago
    (all runs when neither is given); return what was (or, with ``dry_run``, would be) deleted."""
    now = dt.datetime.now(dt.timezone.utc)
    chosen = []
    for run in find_leftovers(url, config):
        if run_id is not None and run.run_id != run_id:
            continue
        if older_than is not None and (run.started is None or (now - run.started).total_seconds() < older_than):
            continue
        chosen.append(run)
    if not dry_run and chosen:
        store = open_store(url, config)
        try:
            store.delete([k for run in chosen for k in run.keys])
        finally:
            store.close()
    return chosen
