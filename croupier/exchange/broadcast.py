"""Broadcast plans (for broadcast joins): every consumer ends up with every producer's data.

Direct: each of the M producers writes its data once; every one of the N consumers reads all M
objects (M writes, M*N reads). Multi-level over a topology g_1..g_k of the N consumers (Lambada
§5.6): at level 1 consumer w reads the producers whose virtual worker s*N // M is in its group; at
each later level every worker writes everything it has gathered so far as one object and reads the
objects of its group. After level k it holds all data. Writes: M, then N per later level; reads:
M*g_1, then N*g_i. Objects grow by g_i per level. Levels 2..k run as stages of N tasks; the
consumers read level k.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from croupier.exchange.plan import LevelCount
from croupier.exchange.topology import Topology


@dataclass(frozen=True)
class BroadcastPlan:
    """Broadcast from ``senders`` producers to ``topology.workers`` consumers in ``topology.levels`` levels."""

    topology: Topology
    senders: int | None = None

    @property
    def name(self) -> str:
        return "broadcast" if self.topology.levels == 1 else f"broadcast {self.topology.levels}-level {self.topology}"

    @property
    def family(self) -> str:
        return "broadcast" if self.topology.levels == 1 else f"broadcast {self.topology.levels}-level"

    @property
    def workers(self) -> int:
        return self.topology.workers

    @property
    def producers(self) -> int:
        return self.senders if self.senders is not None else self.workers

    @property
    def levels(self) -> int:
        return self.topology.levels

    def describe(self) -> str:
        return f"{self.name}: M={self.producers} producers -> N={self.workers} consumers"

    def virtual(self, sender: int) -> int:
        return sender * self.workers // self.producers

    def key(self, level: int, sender: int) -> str:
        """The one object ``sender`` writes at ``level`` (level 1 is named like a combined exchange
        object, so a producer's output can be read either way)."""
        return f"l{level}/s{sender:05d}"

    def senders_of(self, level: int, worker: int) -> list[int]:
        """Whose objects ``worker`` reads after ``level``, in sender order."""
        group = self.topology.group(worker, level)
        if level > 0:
            return group
        members = set(group)
        return [s for s in range(self.producers) if self.virtual(s) in members]

    def reads(self, level: int, worker: int) -> list[str]:
        """Objects ``worker`` reads after ``level`` (its group's, in sender order)."""
        return [self.key(level, s) for s in self.senders_of(level, worker)]

    def counts(self, data_bytes: int = 0) -> list[LevelCount]:
        """Requests and bytes per level: a level-1 object holds D/M bytes; after level i a worker
        holds D * g_1*...*g_i / N, which is what it writes at level i+1."""
        n, m = self.workers, self.producers
        out = []
        for level, g in enumerate(self.topology.groups):
            senders = m if level == 0 else n
            size = data_bytes / m if level == 0 else data_bytes * prod(self.topology.groups[:level]) / n
            out.append(LevelCount(level, g, senders, senders * g, 0, senders, int(size * senders), int(size), int(size)))
        return out

    def predicted_requests(self) -> dict[str, int]:
        levels = self.counts()
        return {"PUT": sum(c.puts for c in levels), "GET": sum(c.gets for c in levels), "GET_RANGE": 0}

