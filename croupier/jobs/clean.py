"""``croupier clean``: remove what dead runs left under a location, never what a live run uses.

Every run keeps its temporary objects under ``_croupier_tmp/<run id>/`` with a lease it renews
while it lives (:mod:`croupier.storage.lease`), and deletes them itself on success, failure and
Ctrl-C. A driver killed outright leaves them behind; so does a writer killed while it held an
output's ``_croupier_lock`` (its tagged parts, which no manifest lists). This removes:

* a run's prefix whose lease has expired, or that has no lease and started (by its run id) longer
  ago than the lease period, or — with ``force`` — the one run named by ``run_id``, even if live;
* an expired ``_croupier_lock`` at the location, with its dead writer's parts that no manifest
  lists (taken over first with a conditional write, so a writer that comes back cannot commit);
* partial files of killed writers in what it removes, and empty run folders.

A live run is skipped and reported with its lease's expiry. ``older_than`` further restricts
removal to runs started longer ago than that; ``dry_run`` deletes nothing.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass, field

from croupier.config import Config
from croupier.errors import ConfigError, InputError, VersionMismatch
from croupier.storage import Store, open_store, parse_location
from croupier.storage.commit import LOCK, dead_parts, remove_dead_writer
from croupier.storage.lease import LEASE, TMP_FOLDER, Lease, read_lease

TMP = TMP_FOLDER + "/"


@dataclass
class Leftovers:
    """What one run left under ``_croupier_tmp/<run id>/``, and what clean made of it.

    State:
        run_id: the run
        keys:   its objects (keys relative to the cleaned location)
        bytes:  their total size
        lease:  its lease, if it has a readable one
        reason: why it is (or would be) removed, or why it is skipped
    """

    run_id: str
    keys: list[str] = field(default_factory=list)
    bytes: int = 0
    lease: Lease | None = None
    reason: str = ""

    @property
    def started(self) -> dt.datetime | None:
        """Start time from the run id (``20261122T101500Z-ab12cd34``); None if it has another form."""
        return _run_start(self.run_id)


@dataclass
class DeadWriter:
    """An output's writer lock and what its run left: parts no manifest lists."""

    lease: Lease
    parts: list[str] = field(default_factory=list)
    removable: bool = False
    reason: str = ""


@dataclass
class CleanResult:
    """What ``clean`` removed (or, with ``dry_run``, would remove) and what it left alone."""

    url: str
    removed: list[Leftovers] = field(default_factory=list)
    skipped: list[Leftovers] = field(default_factory=list)
    writer: DeadWriter | None = None
    writer_removed: bool = False


def _run_start(run_id: str) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(run_id.split("-")[0], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def find_leftovers(url: str, config: Config) -> list[Leftovers]:
    """Runs with temporary objects (or folders) under ``url``, oldest first, with their leases."""
    store = open_store(url, config)
    try:
        return _leftovers(store)
    finally:
        store.close()


def _leftovers(store: Store) -> list[Leftovers]:
    runs: dict[str, Leftovers] = {name: Leftovers(name) for name in store.backend.subfolders(store.prefix + TMP)}
    for obj in store.list(TMP):
        run_id = obj.key[len(TMP) :].split("/", 1)[0]
        entry = runs.setdefault(run_id, Leftovers(run_id))
        entry.keys.append(obj.key)
        entry.bytes += obj.size
    for entry in runs.values():
        if f"{TMP}{entry.run_id}/{LEASE}" in entry.keys:
            try:
                held = read_lease(store.sub(f"{TMP}{entry.run_id}"))
            except InputError as exc:
                entry.reason = str(exc)
                continue
            entry.lease = held[0] if held is not None else None
    return sorted(runs.values(), key=lambda r: r.run_id)


def clean(
    url: str, config: Config, run_id: str | None = None, older_than: float | None = None, dry_run: bool = False, force: bool = False, now: float | None = None
) -> CleanResult:
    """Remove the leftovers of dead runs under ``url`` (see the module docstring)."""
    if force and run_id is None:
        raise ConfigError("force needs a run id (--run-id): name the one run to remove even if it looks alive")
    now = time.time() if now is None else now
    store = open_store(url, config)
    try:
        result = CleanResult(str(parse_location(url)))
        runs = _leftovers(store)
        _check_exists(store, runs)
        for run in runs:
            if run_id is not None and run.run_id != run_id:
                continue
            removable = _verdict(run, config.lease, now, older_than, force)
            (result.removed if removable else result.skipped).append(run)
        result.writer = _dead_writer(store, run_id, force, now, older_than)
        if not dry_run:
            for run in result.removed:
                _remove_run(store, run)
            if result.writer is not None and result.writer.removable:
                result.writer_removed = _remove_writer(store, result.writer.lease, config.lease)
        return result
    finally:
        store.close()


def _check_exists(store: Store, runs: list[Leftovers]) -> None:
    """Refuse a location that does not exist (a local folder that is missing; an S3 prefix with
    no objects at all): the path is probably mistyped."""
    location = store.location
    if location.is_local:
        if not os.path.isdir(location.path):
            raise InputError(f"{location} does not exist; check the path")
        return
    if not runs and not store.list():
        raise InputError(f"nothing exists under {location}; check the path (and the endpoint)")


def _verdict(run: Leftovers, lease: float, now: float, older_than: float | None, force: bool) -> bool:
    """Whether ``run`` may be removed; sets ``run.reason`` either way."""
    started = run.started
    age = now - started.timestamp() if started is not None else None
    if force:
        run.reason = "forced"
        return True
    if older_than is not None and (age is None or age < older_than):
        run.reason = "started less than --older-than ago" if age is not None else "its start is unknown (not a Croupier run id)"
        return False
    if run.lease is not None:
        if not run.lease.expired(now):
            run.reason = f"live: {run.lease.status(now)} (host {run.lease.host}, pid {run.lease.pid})"
            return False
        run.reason = run.lease.status(now)
        return run.lease.dead(now)
    if run.reason:  # an unreadable lease
        return False
    if age is None:
        run.reason = "no lease and not a Croupier run id; remove it with --run-id ID --force"
        return False
    if age < lease:
        run.reason = f"no lease, started {age:.0f} s ago (less than the {lease:.0f} s lease period): may be starting"
        return False
    run.reason = f"no lease, started {age / 3600:.1f} h ago"
    return True


def _remove_run(store: Store, run: Leftovers) -> None:
    """Delete a run's temporary objects, its lease last, then partial files and empty folders."""
    lease_key = f"{TMP}{run.run_id}/{LEASE}"
    store.delete([k for k in run.keys if k != lease_key])
    store.backend.purge_partial(f"{store.prefix}{TMP}{run.run_id}/")
    store.delete([lease_key])


def _dead_writer(store: Store, run_id: str | None, force: bool, now: float, older_than: float | None) -> DeadWriter | None:
    """The output writer lock at the location, if it is one clean may remove (else its reason)."""
    try:
        held = read_lease(store, LOCK)
    except InputError:
        return None  # not Croupier's: left alone
    if held is None:
        return None
    lease = held[0]
    if run_id is not None and lease.run_id != run_id:
        return None
    writer = DeadWriter(lease, dead_parts(store, lease), removable=True)
    if force:
        writer.reason = "forced"
    elif not lease.expired(now):
        writer.removable, writer.reason = False, f"live: writing this output, {lease.status(now)}"
    elif not lease.dead(now):
        writer.removable, writer.reason = False, f"writing this output; {lease.status(now)}"
    elif older_than is not None and now - lease.started < older_than:
        writer.removable, writer.reason = False, "started less than --older-than ago"
    else:
        writer.reason = lease.status(now)
    return writer


def _remove_writer(store: Store, dead: Lease, seconds: float) -> bool:
    """Take the dead writer's lock over (so it cannot commit if it comes back), delete what it
    left, then the lock. False if the lock changed meanwhile (someone else is at it)."""
    held = read_lease(store, LOCK)
    if held is None or held[0] != dead:
        return False
    cleaner = Lease.new(f"clean-{dead.run_id}", seconds, inherited=dead.tags)  # if clean dies, the next taker deletes them
    try:
        store.put_replace(LOCK, cleaner.to_bytes(), held[1])
    except VersionMismatch:
        return False
    remove_dead_writer(store, dead)
    store.delete([LOCK])
    return True

