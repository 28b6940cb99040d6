"""Leases: how a run shows it is alive, so that cleanup never touches what a live run uses.

Every run keeps its temporary objects under one run-scoped prefix ``<tmp base>/_croupier_tmp/<run
id>/`` (the run id starts with the run's UTC start time). Before it writes anything else there it
writes ``<prefix>/_lease``, and while it runs a :class:`LeaseKeeper` thread renews the lease every
third of its duration (and the output lock of :mod:`croupier.storage.commit`, which carries the
same record). When the run ends, on success and on failure, it deletes the prefix, the lease last.
``croupier clean`` removes a run's prefix only once its lease has expired::

    run starts ──> PUT _lease (expires = now + lease) ──> temporaries ... ──> delete all, _lease last
                        ^ renewed every lease/3 by the LeaseKeeper thread

A killed driver stops renewing; ``lease`` seconds later its leftovers are fair game for ``clean``.
Expiry is judged by the clock of whoever reads the lease, so clocks must agree to within a small
part of the lease (120 s by default; ``Config.lease``).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable

from croupier.errors import CroupierError, InputError, ObjectNotFound
from croupier.storage.store import Store

#: Folder (under a tmp base or an output) that holds runs' temporary prefixes.
TMP_FOLDER = "_croupier_tmp"
#: The lease object inside a run's temporary prefix.
LEASE = "_lease"


@dataclass(frozen=True)
class Lease:
    """Who holds something and until when: a run's temporaries, or an output's writer lock.

    State:
        run_id:  the holding run
        host:    machine of its driver
        pid:     process id of its driver
        started: when the run took it (Unix seconds)
        expires: when it lapses unless renewed (Unix seconds)
        tag:     the run's part-name tag (output locks only)
        inherited: tags of dead writers whose lock this one took over and whose parts are not
                 all deleted yet (output locks only): whoever takes this lock over deletes them too
        period:  seconds each renewal extends it by (0 in leases written before it was recorded)

    A lease that lapsed may belong to a run whose keeper is merely late (a frozen machine, a
    process descheduled); it is *dead* only one more period later (:meth:`dead`), and only a dead
    lease lets another run take its output or ``croupier clean`` delete what it holds.
    """

    run_id: str
    host: str
    pid: int
    started: float
    expires: float
    tag: str = ""
    inherited: tuple[str, ...] = ()
    period: float = 0.0

    @classmethod
    def new(cls, run_id: str, seconds: float, tag: str = "", now: float | None = None, inherited: tuple[str, ...] = ()) -> Lease:
        """A lease for this process, valid ``seconds`` from ``now``."""
        now = time.time() if now is None else now
        return cls(run_id, socket.gethostname(), os.getpid(), now, now + seconds, tag, inherited, seconds)

    @property
    def tags(self) -> tuple[str, ...]:
        """Part tags of this lease's writer and of the dead writers it inherited."""
        return tuple(t for t in (self.tag, *self.inherited) if t)

    def renewed(self, seconds: float, now: float | None = None) -> Lease:
        """The same lease, valid ``seconds`` from ``now``."""
        return replace(self, expires=(time.time() if now is None else now) + seconds, period=seconds)

    def expired(self, now: float | None = None) -> bool:
        """Whether it lapsed (its keeper did not renew it in time; it may only be late)."""
        return (time.time() if now is None else now) >= self.expires

    def dead(self, now: float | None = None) -> bool:
        """Whether it lapsed a whole period ago: its run is gone, not late (see the class docstring)."""
        return (time.time() if now is None else now) >= self.expires + self.period

    def status(self, now: float | None = None) -> str:
        """"lease expires in S s", "lease lapsed S s ago, but its keeper may be late: dead in D s"
        or "lease expired S s ago" (dead), for messages."""
        now = time.time() if now is None else now
        left = self.expires - now
        if left > 0:
            return f"lease expires in {left:.0f} s"
        if not self.dead(now):
            return f"lease lapsed {-left:.0f} s ago, but its keeper may be late: dead in {self.expires + self.period - now:.0f} s"
        return f"lease expired {-left:.0f} s ago"

    def describe(self, now: float | None = None) -> str:
        """"run R (host H, pid P, started T; lease expires in S s)" for messages."""
        return f"run {self.run_id} (host {self.host}, pid {self.pid}, started {_iso(self.started)}; {self.status(now)})"

    def to_bytes(self) -> bytes:
        body = asdict(self)
        body["started_utc"], body["expires_utc"] = _iso(self.started), _iso(self.expires)
        return json.dumps(body, indent=1).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Lease:
        """Parse a stored lease; :class:`InputError` naming ``where`` if it is not one."""
        try:
            body = json.loads(data)
            inherited = tuple(str(t) for t in body.get("inherited", ()))
            return cls(str(body["run_id"]), str(body["host"]), int(body["pid"]), float(body["started"]), float(body["expires"]), str(body.get("tag", "")), inherited, float(body.get("period", 0.0)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"{where} is not a lease Croupier wrote ({exc}); if no Croupier run uses it, delete it yourself") from exc


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def read_lease(store: Store, key: str = LEASE) -> tuple[Lease, str] | None:
    """The lease stored at ``key`` and its version (HEAD before GET, so the version is never
    newer than the content), or None if there is none."""
    try:
        version = store.head(key).version or ""
        data = bytes(store.get(key))
    except ObjectNotFound:
        return None
    return Lease.from_bytes(data, f"{store.url}/{key}"), version


class RunTemp:
    """One run's temporary prefix and its lease (see the module docstring).

    State:
        store:   a store rooted at the prefix (its requests count as the driver's)
        lease:   the current lease record
        seconds: lease duration
    """

    def __init__(self, store: Store, run_id: str, seconds: float) -> None:
        self.store = store
        self.seconds = seconds
        self.lease = Lease.new(run_id, seconds)

    def open(self) -> None:
        """Write the lease: the first object of the prefix."""
        self.store.put(LEASE, self.lease.to_bytes())

    def renew(self, store: Store | None = None) -> None:
        """Extend the lease by its duration from now (through ``store``, for separate counting)."""
        self.lease = self.lease.renewed(self.seconds)
        (store or self.store).put(LEASE, self.lease.to_bytes())

    def remove(self) -> int:
        """Delete every temporary object, then the lease; return how many objects there were."""
        keys = [o.key for o in self.store.list() if o.key != LEASE]
        self.store.delete(keys)
        self.store.backend.purge_partial(self.store.prefix)
        self.store.delete([LEASE])
        return len(keys)


class LeaseKeeper:
    """Renews leases from one daemon thread every ``period`` seconds while a run is alive.

    A renewal that fails is recorded in ``failures`` (and tried again next period): a run whose
    lease cannot be renewed goes on, and its commit checks its output lock before it switches.
    """

    def __init__(self, period: float) -> None:
        self.period = period
        self.failures: list[str] = []
        self._renewals: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def add(self, renew: Callable[[], None]) -> None:
        """Call ``renew`` every period from now on (the thread starts with the first one)."""
        with self._lock:
            self._renewals.append(renew)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="croupier-lease", daemon=True)
                self._thread.start()

    def remove(self, renew: Callable[[], None]) -> None:
        with self._lock:
            if renew in self._renewals:
                self._renewals.remove(renew)

    def stop(self) -> None:
        """Stop renewing (waits for a renewal in progress)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            with self._lock:
                renewals = list(self._renewals)
            for renew in renewals:
                try:
                    renew()
                except CroupierError as exc:  # recorded; the next period tries again
                    self.failures.append(str(exc))
