"""The output commit protocol: one writer at a time, one PUT switches, only Croupier's objects go.

An output location O holds, besides the data parts, three names Croupier owns:

* ``_SUCCESS`` — the manifest (JSON): the parts of the committed output, and the parts of the
  output it replaced that are still to be deleted (``superseded``). Writing it is the commit.
* ``_croupier_lock`` — the writer lock: the :class:`~croupier.storage.lease.Lease` of the run
  writing O (run id, part tag, host, pid, start, expiry), renewed while the run lives.
* ``_croupier_tmp/`` — runs' temporary prefixes (see :mod:`croupier.storage.lease`).

Parts are written by tasks under final, run-unique names ``part-<task>-<tag>...`` (the tag comes
from the run id) and never renamed: on S3 a rename is a copy plus a delete, which no commit can
make atomic. So a commit is::

    begin:  create _croupier_lock (create-only PUT) ──> busy? OutputBusyError naming the holder
            (an expired lock is taken over with a conditional PUT; its dead run's parts deleted)
            read _SUCCESS, list O ──> refuse objects no manifest lists; without overwrite refuse
            any output at all
    tasks:  PUT part-<task>-<tag>... (invisible to readers: no manifest lists them)
    commit: renew the lock conditionally (proves we still hold it)
            PUT _SUCCESS listing our parts          <── the single commit point
            delete the parts the old manifest listed (its "superseded")
            delete _croupier_lock
    abort:  delete our parts (by tag), release the lock

A failure (or a kill) after any step leaves the old output whole or the new one whole: before the
manifest PUT readers see the old manifest's parts, which nothing has touched; after it they see
ours, all written. Every step can be repeated. Readers go through :func:`read_parts`, which
follows the manifest.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Iterable, Sequence

from croupier.errors import (
    ConfigError,
    InputError,
    ObjectExists,
    ObjectNotFound,
    OutputBusyError,
    OutputExistsError,
    VersionMismatch,
)
from croupier.storage.backend import ObjectInfo
from croupier.storage.lease import TMP_FOLDER, Lease, read_lease
from croupier.storage.location import Location
from croupier.storage.store import Store

MANIFEST = "_SUCCESS"
LOCK = "_croupier_lock"
#: How often ``begin`` looks again when the lock changes under it (released, taken over).
ACQUIRE_TRIES = 5


def is_own(key: str) -> bool:
    """Whether ``key`` (relative to an output) is one of Croupier's own names there."""
    return key in (MANIFEST, LOCK) or key.startswith(TMP_FOLDER + "/")


def is_hidden(key: str) -> bool:
    """Objects whose name or folder starts with '_' or '.' are metadata, not data (Hadoop rule)."""
    return any(part.startswith(("_", ".")) for part in key.split("/"))


def run_tag(run_id: str) -> str:
    """The part-name tag of run ``run_id`` (its random suffix)."""
    return run_id.rsplit("-", 1)[-1]


def part_pattern(tag: str) -> re.Pattern[str]:
    """Names of the parts a run with ``tag`` writes: ``part-<task>-<tag>[-<n>][.<ext>]``."""
    return re.compile(rf"part-\d+-{re.escape(tag)}(-\d+)?(\.[A-Za-z0-9]+)?")


@dataclass(frozen=True)
class Part:
    """One committed part: its key, size and record (or row) count."""

    key: str
    bytes: int
    count: int


def read_manifest(store: Store) -> dict[str, Any] | None:
    """The Croupier manifest ``_SUCCESS`` of the output under ``store``; None if there is none or
    it is not Croupier's (e.g. the empty ``_SUCCESS`` Hadoop and Spark write)."""
    return _manifest(store)[1]


def _manifest(store: Store) -> tuple[bool, dict[str, Any] | None]:
    """(whether ``_SUCCESS`` exists, the Croupier manifest it holds or None)."""
    try:
        data = bytes(store.get(MANIFEST))
    except ObjectNotFound:
        return False, None
    try:
        body = json.loads(data)
    except ValueError:
        return True, None
    if not isinstance(body, dict) or "croupier_manifest" not in body:
        return True, None
    entries = [*(body.get("parts") or []), *(body.get("superseded") or [])] if isinstance(body.get("parts"), list) else None
    if body["croupier_manifest"] != 1 or entries is None or not all(isinstance(p.get("key") if isinstance(p, dict) else p, str) for p in entries):
        raise InputError(f"{store.url}/{MANIFEST} is a damaged or newer Croupier manifest; write the output again (or delete it)")
    return True, body


def _keys(manifest: dict[str, Any], field: str = "parts") -> list[str]:
    items = manifest.get(field) or []
    return [p["key"] if isinstance(p, dict) else str(p) for p in items]


def read_parts(store: Store) -> list[ObjectInfo]:
    """The data objects of the output under ``store``, in order.

    A Croupier output: exactly the parts its manifest lists (a part that is missing: the manifest
    is read once more, in case a new output was committed meanwhile, then :class:`InputError`).
    No manifest but a writer lock: :class:`InputError` (being written, nothing committed yet).
    Anything else: every object whose name does not mark it as metadata, in name order.
    """
    for attempt in range(2):
        _, manifest = _manifest(store)
        if manifest is None:
            break
        keys = _keys(manifest)
        listed = {o.key: o for o in store.list(_common_prefix(keys))}
        missing = [k for k in keys if k not in listed]
        if not missing:
            return [listed[k] for k in keys]
        if attempt == 1:
            raise InputError(
                f"{store.url}: the manifest {MANIFEST} lists {missing[0]} ({len(missing)} part(s) missing): "
                "the output is damaged; write it again"
            )
    held = read_lease(store, LOCK)
    if held is not None:
        raise InputError(f"{store.url} is being written by {held[0].describe()}; nothing is committed there yet: wait for it to finish")
    return [o for o in store.list() if not is_hidden(o.key)]


def _common_prefix(keys: Sequence[str]) -> str:
    """The longest common prefix of ``keys`` (so one listing finds them all), cut so that a
    listing accepts it (it must not end in a '.' or '..' segment)."""
    if not keys:
        return MANIFEST  # lists nothing but the manifest: there are no parts to find
    folder, slash, partial = os.path.commonprefix(list(keys)).rpartition("/")
    if partial in (".", ".."):
        partial = ""
    return folder + slash + partial


def check_disjoint(output: Location, inputs: Iterable[Location]) -> None:
    """Refuse (before any work) an output that contains, or lies inside, one of the job's inputs:
    writing or replacing it could delete the input."""
    for source in inputs:
        if output.contains(source):
            raise ConfigError(f"output {output} contains the input {source}: writing there could replace or delete the input; choose an output outside it")
        if source.contains(output):
            raise ConfigError(f"output {output} is inside the input {source}: it would become part of the input; choose an output outside it")


class OutputCommit:
    """The commit of one run's output under ``store`` (see the module docstring).

    State:
        store:      the output location's store (the run's, so requests are counted)
        run_id:     the writing run; ``tag`` (from it) marks its parts
        overwrite:  whether a previous Croupier output may be replaced
        lease:      seconds the writer lock lasts unless renewed
        version:    the lock's version while we hold it (None otherwise)
        superseded: the previous output's objects, deleted after the switch
    """

    def __init__(self, store: Store, run_id: str, overwrite: bool, lease: float) -> None:
        self.store = store
        self.run_id = run_id
        self.tag = run_tag(run_id)
        self.overwrite = overwrite
        self.lease = lease
        self.version: str | None = None
        self.superseded: list[str] = []
        self._held: Lease | None = None
        self._begun = False
        self._lost: str | None = None
        self._mutex = threading.Lock()

    @property
    def location(self) -> Location:
        return self.store.location

    # --- begin ------------------------------------------------------------------------------
    def begin(self) -> None:
        """Take the writer lock and check the output may be written; on a refusal nothing is
        changed (the lock is released again)."""
        try:
            self._acquire()
            self._survey()
        except BaseException:
            self._release(check=True)  # also a lock whose create happened but whose answer was lost
            raise
        self._begun = True

    def _acquire(self) -> None:
        for _ in range(ACQUIRE_TRIES):
            mine = Lease.new(self.run_id, self.lease, self.tag)
            try:
                self.version = self.store.put_create(LOCK, mine.to_bytes())
                self._held = mine
                return
            except ObjectExists:
                pass
            if self._take_over(mine):
                return
        raise OutputBusyError(f"{self.location}: its writer lock keeps changing hands; another run is writing there, try again later")

    def _take_over(self, mine: Lease) -> bool:
        """Take the lock from a run whose lease expired; False if it vanished or moved meanwhile."""
        try:
            held = read_lease(self.store, LOCK)
        except InputError as exc:
            raise OutputExistsError(f"{self.location} holds a {LOCK} Croupier cannot read: {exc}") from exc
        if held is None:
            return False
        other, version = held
        if not other.dead():
            raise OutputBusyError(
                f"output {self.location} is being written by {other.describe()}; "
                "wait for it to finish, or choose another output"
            )
        mine = replace(mine, inherited=other.tags)  # if we die too, our successor deletes them
        try:
            self.version = self.store.put_replace(LOCK, mine.to_bytes(), version)
        except VersionMismatch:
            return False
        self._held = mine
        remove_dead_writer(self.store, other)
        with self._mutex:
            self._held = replace(mine, inherited=())  # done: the next renewal drops them
        return True

    def _survey(self) -> None:
        """Read the old manifest and list the output: everything there must be Croupier's."""
        exists, manifest = _manifest(self.store)
        data = [o.key for o in self.store.list() if not is_own(o.key)]
        if exists and manifest is None:
            data.append(MANIFEST)  # a _SUCCESS Croupier did not write (e.g. Hadoop's)
        if not self.overwrite and (manifest is not None or data):
            shown = data[0] if data else MANIFEST
            raise OutputExistsError(
                f"output {self.location} already holds an output ({len(data)} object(s), e.g. {shown}); "
                "choose another output or pass --overwrite (overwrite=True)"
            )
        listed = listed_keys(manifest)
        foreign = [k for k in data if k not in listed]
        if foreign:
            raise OutputExistsError(
                f"output {self.location} holds objects Croupier did not write, e.g. {foreign[0]} "
                f"({len(foreign)} in all); Croupier replaces only outputs it wrote: choose an empty location"
            )
        ours = part_pattern(self.tag)
        if any(ours.fullmatch(k) for k in data):
            raise OutputBusyError(f"output {self.location} already holds parts tagged {self.tag} (run id clash); run the job again")
        self.superseded = data

    # --- while the job runs -------------------------------------------------------------------
    def renew(self, store: Store | None = None) -> None:
        """Extend the writer lock (a conditional PUT on its version): proves we still hold it.
        Raises :class:`OutputBusyError` if another run took it over."""
        with self._mutex:
            if self.version is None or self._held is None:
                return
            renewed = self._held.renewed(self.lease)
            try:
                self.version = (store or self.store).put_replace(LOCK, renewed.to_bytes(), self.version)
            except VersionMismatch as exc:
                self.version = self._held = None
                self._lost = (
                    f"run {self.run_id} lost the writer lock of {self.location} to another run (its lease had expired: "
                    "was this process stopped for longer than the lease?); nothing was committed"
                )
                raise OutputBusyError(self._lost) from exc
            self._held = renewed

    # --- end ----------------------------------------------------------------------------------
    def commit(self, parts: Sequence[Part], unit: str, fmt: str, fields: dict[str, Any]) -> list[str]:
        """Switch readers to ``parts`` (one manifest PUT), then delete what they replaced and the
        lock. ``unit`` is "records" or "rows"; ``fields`` go into the manifest (job, run id...)."""
        self.renew()
        if self.version is None:
            raise OutputBusyError(self._lost or f"run {self.run_id} does not hold the writer lock of {self.location}; nothing was committed")
        names = [p.key for p in parts]
        manifest = {
            "croupier_manifest": 1,
            **fields,
            "run_id": self.run_id,
            "tag": self.tag,
            "committed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "format": fmt,
            unit: sum(p.count for p in parts),
            "parts": [{"key": p.key, unit: p.count, "bytes": p.bytes} for p in parts],
            "superseded": sorted(set(self.superseded) - set(names) - {MANIFEST}),
        }
        self.store.put(MANIFEST, json.dumps(manifest, indent=1).encode())
        self.store.delete(manifest["superseded"])
        self.superseded = []
        self._release()
        return names

    def abort(self) -> None:
        """Delete this run's parts (the old output is untouched) and release the lock. The parts
        are deleted even if the lock was lost: they carry this run's tag, no one else's."""
        if self._begun:
            committed = set(_keys(read_manifest(self.store) or {}))
            ours = part_pattern(self.tag)
            self.store.delete([o.key for o in self.store.list("part-") if ours.fullmatch(o.key) and o.key not in committed])
            self.store.backend.purge_partial(self.store.prefix, contains=f"-{self.tag}")
        self._release(check=True)

    def _release(self, check: bool = False) -> None:
        """Delete the lock if it is ours: if we hold it, or (``check``) if it names this run
        although we do not know we took it (a create whose answer was lost)."""
        with self._mutex:
            if self.version is None and not check:
                return
            try:
                held = read_lease(self.store, LOCK)
            except InputError:
                held = None  # not a lock Croupier wrote: not ours to delete
            if held is not None and held[0].run_id == self.run_id:
                self.store.delete([LOCK])
            self.version = self._held = None


def listed_keys(manifest: dict[str, Any] | None) -> set[str]:
    """Every key a manifest names: its parts and the superseded parts still to delete."""
    return set(_keys(manifest) + _keys(manifest, "superseded")) if manifest is not None else set()


def dead_parts(store: Store, dead: Lease) -> list[str]:
    """The parts the writer ``dead`` (and the dead writers it inherited) left under ``store``
    that no manifest lists."""
    if not dead.tags:
        return []
    listed = listed_keys(read_manifest(store))
    patterns = [part_pattern(t) for t in dead.tags]
    return [o.key for o in store.list("part-") if any(p.fullmatch(o.key) for p in patterns) and o.key not in listed]


def remove_dead_writer(store: Store, dead: Lease) -> list[str]:
    """Delete what the writer ``dead`` (whose lock expired) left under ``store``: its tagged parts
    that no manifest lists, and partial files of its killed writes. Return the deleted keys."""
    keys = dead_parts(store, dead)
    store.delete(keys)
    for name in [f"-{t}" for t in dead.tags] + [f"{MANIFEST}.", f"{LOCK}."]:
        store.backend.purge_partial(store.prefix, contains=name)
    return keys
