"""Memory levels (MinFlow): a multi-level exchange whose levels alternate between the fast tier and
the slow one; pure and countable like every plan.

::

    producers ──level 1 (slow)──> P workers ──level 2 (FAST)──> P workers ──level 3 (slow)──> ...

MinFlow runs alternate levels of a multi-level exchange in a function's own memory (its scheduler
puts the functions of one complete bipartite subgraph on one worker). Here the "memory" of a level
is the fast tier: a :class:`LevelsPlan` is an :class:`~croupier.exchange.plan.ExchangePlan` whose
levels in ``fast_levels`` (0-based) write their objects to the fast tier, the others to the slow
one. Levels alternate, so the fast tier holds one level at a time: the driver deletes a fast
level's objects once the next level has read them. Objects, keys and request counts are the base
plan's (:meth:`requests_by_tier` splits them by tier). The slow levels stay until the run ends, so a
memory level the fast tier loses can be written again from the level before it (the DAG runner's
exchanges do so, re-running only that level's tasks).
"""

from __future__ import annotations

from dataclasses import dataclass

from croupier.exchange.plan import ExchangePlan, requests_by_tier


@dataclass(frozen=True)
class LevelsPlan(ExchangePlan):
    """A k-level plan with the levels ``fast_levels`` (0-based) on the fast tier."""

    fast_levels: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(not 0 <= level < self.levels for level in self.fast_levels):
            raise ValueError(f"fast levels {self.fast_levels} are not levels of a {self.levels}-level plan")
        if any(level + 1 in self.fast_levels for level in self.fast_levels):
            raise ValueError(f"fast levels {self.fast_levels} must alternate with slow ones (the fast tier holds one level at a time)")

    @classmethod
    def alternate(cls, plan: ExchangePlan) -> LevelsPlan:
        """``plan`` with its odd levels (the 2nd, 4th, ...) on the fast tier; its producers (level 1)
        write to the slow tier, as they did before P was bound."""
        return cls(plan.topology, plan.combine, plan.senders, plan.buckets, tuple(range(1, plan.levels, 2)))

    @property
    def name(self) -> str:
        """"2-level 4x2+wc, level 2 in memory" (levels 1-based, as users count them)."""
        fast = ",".join(str(level + 1) for level in self.fast_levels)
        return f"{super().name}, level {fast} in memory" if fast else super().name

    def tier(self, level: int) -> str:
        """"fast" or "slow": where the objects written at ``level`` (0-based) live."""
        return "fast" if level in self.fast_levels else "slow"

    def requests_by_tier(self) -> dict[str, dict[str, int]]:
        """The plan's requests, by the tier of the level they belong to."""
        return requests_by_tier(self.counts(), self.tier)
