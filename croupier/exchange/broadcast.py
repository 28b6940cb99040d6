"""Broadcast plans (for broadcast joins): every worker ends up with every worker's data.

Direct: each worker writes its data once; every worker reads all P objects (P writes, P^2 reads).
Multi-level over a topology g_1..g_k (Lambada §5.6): at level i each worker writes everything it
has gathered so far as one object and reads the objects of its group at level i; after level k it
holds all data. Writes: P per level; reads: P * g_i at level i. Objects grow by g_i per level.
"""

from __future__ import annotations

from dataclasses import dataclass

from croupier.exchange.plan import LevelCount
from croupier.exchange.topology import Topology


@dataclass(frozen=True)
class BroadcastPlan:
    """Broadcast among ``topology.workers`` workers through ``topology.levels`` levels."""

    topology: Topology

    @property
    def name(self) -> str:
        return "broadcast direct" if self.topology.levels == 1 else f"broadcast {self.topology.levels}-level {self.topology}"

    def key(self, level: int, sender: int) -> str:
        """The one object ``sender`` writes at ``level``."""
        return f"b{level}/s{sender:05d}"

    def reads(self, level: int, worker: int) -> list[str]:
        """Objects ``worker`` reads after ``level`` (its group's, in sender order)."""
        return [self.key(level, s) for s in self.topology.group(worker, level)]

    def counts(self, data_bytes: int = 0) -> list[LevelCount]:
        """Requests and bytes per level: before level i a worker holds D/P * g_1*...*g_(i-1) bytes."""
        p = self.topology.workers
        out = []
        held = data_bytes / p  # bytes one worker holds before level 1
        for level, g in enumerate(self.topology.groups):
            out.append(LevelCount(level, g, p, p * g, 0, p, int(held * p), int(held)))
            held *= g
        return out

    def predicted_requests(self) -> dict[str, int]:
        levels = self.counts()
        return {"PUT": sum(c.puts for c in levels), "GET": sum(c.gets for c in levels), "GET_RANGE": 0}
