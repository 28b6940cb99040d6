"""Exchange plans: which objects each worker writes and reads at each level; pure and countable.

::

    level 1            level 2                  level k
    senders ──objects──> workers ──objects──> ... ──> receivers (worker id = partition id)

An :class:`ExchangePlan` is a topology plus a choice of write combining. It never touches storage:
the executor (:mod:`croupier.jobs.shuffle`) asks it for keys and routes, and tests and the model ask
it how many requests of each kind an exchange costs. Per level i with group size g_i:

    plain:           P * g_i PUTs (one object per sender and receiver), P * g_i GETs
    write combining: P PUTs (one object per sender), P * g_i ranged GETs (one byte range each)

so direct (k=1) is 2P^2 requests, two levels about 4P*sqrt(P), k levels sum_i 2P*g_i, and write
combining k*P writes. Receivers read in sender order; with digit 1 least significant and levels
taken in order, every receiver then sees records in mapper order, whatever the topology.
"""

from __future__ import annotations

from dataclasses import dataclass

from croupier.exchange.topology import Topology


@dataclass(frozen=True)
class ObjectWrite:
    """One object a worker writes at a level, holding data for ``receivers`` (in that order)."""

    key: str
    receivers: tuple[int, ...]


@dataclass(frozen=True)
class ObjectRead:
    """One object (or one receiver's byte range of it, with write combining) a worker reads."""

    key: str
    sender: int
    ranged: bool


@dataclass(frozen=True)
class LevelCount:
    """Requests and objects one level implies."""

    level: int
    group: int
    puts: int
    gets: int
    ranged_gets: int
    objects: int
    bytes_moved: int = 0  # D: every level writes and reads all the data once
    object_bytes: int = 0  # average object size: D / objects


@dataclass(frozen=True)
class ExchangePlan:
    """A k-level exchange (k=1: direct) among ``topology.workers`` workers, optionally write-combined."""

    topology: Topology
    combine: bool = False

    @classmethod
    def direct(cls, workers: int, combine: bool = False) -> ExchangePlan:
        return cls(Topology.direct(workers), combine)

    @property
    def name(self) -> str:
        """Short label: "direct", "2-level 3x4", with "+wc" for write combining."""
        base = "direct" if self.topology.levels == 1 else f"{self.topology.levels}-level {self.topology}"
        return base + ("+wc" if self.combine else "")

    @property
    def family(self) -> str:
        """The algorithm without its topology: "direct", "2-level", ... with "+wc"."""
        base = "direct" if self.topology.levels == 1 else f"{self.topology.levels}-level"
        return base + ("+wc" if self.combine else "")

    @property
    def workers(self) -> int:
        return self.topology.workers

    @property
    def levels(self) -> int:
        return self.topology.levels

    def key(self, level: int, sender: int, receiver: int | None) -> str:
        """Key of the object ``sender`` writes at ``level`` for ``receiver`` (None: combined)."""
        if receiver is None:
            return f"l{level}/s{sender:05d}"
        return f"l{level}/s{sender:05d}/r{receiver:05d}"

    def writes(self, level: int, worker: int) -> list[ObjectWrite]:
        """Objects ``worker`` writes at ``level`` (0-based)."""
        group = tuple(self.topology.group(worker, level))
        if self.combine:
            return [ObjectWrite(self.key(level, worker, None), group)]
        return [ObjectWrite(self.key(level, worker, r), (r,)) for r in group]

    def reads(self, level: int, worker: int) -> list[ObjectRead]:
        """Objects (or ranges) ``worker`` reads after ``level``, in sender order."""
        senders = self.topology.group(worker, level)
        if self.combine:
            return [ObjectRead(self.key(level, s, None), s, True) for s in senders]
        return [ObjectRead(self.key(level, s, worker), s, False) for s in senders]

    def route(self, level: int, partition: int) -> int:
        """Index, within the sender's group at ``level``, of the receiver a partition goes to."""
        return self.topology.digit(partition, level)

    def counts(self, data_bytes: int = 0) -> list[LevelCount]:
        """Requests, objects and bytes per level for ``data_bytes`` shuffled (no storage involved)."""
        p = self.workers
        out = []
        for level, g in enumerate(self.topology.groups):
            objects = p if self.combine else p * g
            gets, ranged = (0, p * g) if self.combine else (p * g, 0)
            out.append(LevelCount(level, g, objects, gets, ranged, objects, data_bytes, data_bytes // objects))
        return out

    def predicted_requests(self) -> dict[str, int]:
        """Total requests by kind over all levels."""
        levels = self.counts()
        return {
            "PUT": sum(c.puts for c in levels),
            "GET": sum(c.gets for c in levels),
            "GET_RANGE": sum(c.ranged_gets for c in levels),
        }


def all_plans(workers: int, max_levels: int | None = None) -> list[ExchangePlan]:
    """Every candidate topology of ``workers``, each with and without write combining."""
    from croupier.exchange.topology import candidates

    return [ExchangePlan(t, combine) for t in candidates(workers, max_levels) for combine in (False, True)]
