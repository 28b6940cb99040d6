"""Memory levels (MinFlow): a multi-level exchange in which some levels happen inside a function's
own memory, alternating with levels through storage; pure and countable like every plan.

::

    3-level 4x2x2, level 2 in memory:

    producers ──level 1 (storage)──> 8 groups of 2 ──level 2 (in memory)──> ──level 3 (storage)──> 16 consumers
                                     (one task per group: it reads what its 2 workers would read,
                                      re-routes by digit 2 in memory, writes what they would write)

MinFlow's function scheduler puts the functions of one complete bipartite subgraph of adjacent
levels on one worker, so that level's traffic stays in local memory. Here that worker is one task:
at a memory level L, the g_L workers that exchange with each other at L (they differ only in digit
L) are one task. It fetches what each of them would fetch after level L - 1, moves every chunk to
the member whose digit L is the chunk's partition's (in memory, no request), and writes what each
member would write at level L + 1. Level L's objects never exist; the other levels' objects, keys
and reads are the base plan's, so the output is byte-identical to it.

A memory level is a middle level (1 <= L <= k - 2): level 1's senders are the producer stage's
tasks, and the last level's receivers are the consumer stage's. Memory levels alternate with
storage levels (as in MinFlow), so a task holds one group's data: g_L * D / P bytes.

Requests: the base plan's, less level L's (S * g_L PUTs and GETs plain, S PUTs and S * g_L ranged
GETs combined); tasks: P / g_L at level L instead of P at L and P at L + 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from croupier.exchange.plan import ExchangePlan, LevelCount, LevelStage, ObjectRead, ObjectWrite
from croupier.exchange.topology import Topology


@dataclass(frozen=True)
class LevelsPlan(ExchangePlan):
    """A k-level plan whose levels ``memory`` (0-based, each in 1..k-2) happen in tasks' memory."""

    memory: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.memory:
            raise ValueError("a memory-level plan needs at least one memory level")
        if any(not 1 <= level <= self.levels - 2 for level in self.memory):
            raise ValueError(f"memory levels {self.memory} must be middle levels (1..{self.levels - 2}, 0-based) of a {self.levels}-level plan: the first level's senders and the last level's receivers are other stages' tasks")
        if any(level + 1 in self.memory for level in self.memory):
            raise ValueError(f"memory levels {self.memory} must alternate with storage levels")

    @classmethod
    def alternate(cls, plan: ExchangePlan) -> LevelsPlan | None:
        """``plan`` with its 2nd, 4th, ... level (the middle ones) in memory; None when it has no
        middle level (fewer than 3 levels)."""
        memory = tuple(range(1, plan.levels - 1, 2))
        return cls(plan.topology, plan.combine, plan.senders, plan.buckets, memory) if memory else None

    @property
    def name(self) -> str:
        """"3-level 4x2x2+wc, level 2 in memory" (levels 1-based, as users count them)."""
        levels = ",".join(str(level + 1) for level in self.memory)
        return f"{super().name}, level {levels} in memory"

    @property
    def family(self) -> str:
        """"3-level+mem", "3-level+wc+mem"."""
        return f"{super().family}+mem"

    @property
    def stored_levels(self) -> int:
        """Levels whose objects go through storage: all but the memory levels."""
        return self.levels - len(self.memory)

    def base(self) -> ExchangePlan:
        """The same exchange with every level through storage."""
        return ExchangePlan(self.topology, self.combine, self.senders, self.buckets)

    # --- groups --------------------------------------------------------------------------------------
    def group_count(self, level: int) -> int:
        """Tasks of memory level ``level``: P / g_level."""
        return self.workers // self.topology.groups[level]

    def members(self, level: int, task: int) -> list[int]:
        """The workers task ``task`` of memory level ``level`` stands in for: one group of level
        ``level`` (they differ only in digit ``level``), in digit order. Task t is the group of
        the t-th worker (by id) whose digit ``level`` is 0."""
        if level not in self.memory:
            raise ValueError(f"level {level} is not a memory level of {self.name}")
        if not 0 <= task < self.group_count(level):
            raise ValueError(f"task {task} is not one of level {level}'s {self.group_count(level)} group tasks")
        stride = self.topology.stride(level)
        high, low = divmod(task, stride)
        return self.topology.group(high * stride * self.topology.groups[level] + low, level)

    # --- objects: a memory level has none -------------------------------------------------------------------
    def writes(self, level: int, sender: int) -> list[ObjectWrite]:
        return [] if level in self.memory else super().writes(level, sender)

    def reads(self, level: int, worker: int) -> list[ObjectRead]:
        return [] if level in self.memory else super().reads(level, worker)

    def stages(self) -> list[LevelStage]:
        """The base plan's stages, with level L's stage and level L + 1's merged into one of P / g_L
        tasks for each memory level L (it reads level L - 1 and writes level L + 1)."""
        out = []
        for stage in super().stages():
            if stage.writes is not None and stage.writes in self.memory:
                out.append(LevelStage(self.group_count(stage.writes), stage.reads, stage.writes + 1, stage.writes))
            elif stage.reads is None or stage.reads not in self.memory:
                out.append(stage)
        return out

    # --- counting -------------------------------------------------------------------------------------------
    def counts(self, data_bytes: int = 0) -> list[LevelCount]:
        """The base plan's counts, with no requests and no objects at the memory levels."""
        return [LevelCount(c.level, c.group, 0, 0, 0, 0, c.bytes_moved, 0, 0) if c.level in self.memory else c for c in super().counts(data_bytes)]

    def group_bytes(self, data_bytes: float) -> float:
        """The most data one memory-level task holds: g_L * D / P for the largest memory group."""
        return max(self.topology.groups[level] for level in self.memory) * data_bytes / self.workers


#: Group sizes a memory level is offered with beyond the fewest-edges topologies': its traffic
#: costs no requests, so its edges are free, but a task holds g * D / P bytes and a level of P / g
#: tasks has 1/g of the parallelism; small groups keep both in check.
MEMORY_GROUPS = (2, 3, 4)


def memory_topologies(workers: int) -> list[Topology]:
    """3-level topologies g1 x g x g3 of ``workers`` for a memory level 2 of each size g of
    :data:`MEMORY_GROUPS`: g1 x g3 the fewest-edges split of P / g (the storage levels' edges)."""
    from croupier.exchange.topology import candidates

    out: list[Topology] = []
    for g in MEMORY_GROUPS:
        if workers % g or workers // g < 4:
            continue
        two = [t for t in candidates(workers // g, 2) if t.levels == 2]
        if two:
            first, last = two[0].groups
            out.append(Topology((first, g, last)))
    return out


def memory_plans(plans: list[ExchangePlan], max_levels: int | None = None) -> list[ExchangePlan]:
    """Memory-level candidates beside ``plans`` (plain plans of one P and M): the variant
    (:meth:`LevelsPlan.alternate`) of every plan of 3 levels or more, and per write-combining
    choice the 3-level :func:`memory_topologies`, each once; none when ``max_levels`` < 3."""
    if max_levels is not None and max_levels < 3:
        return []
    out: dict[tuple[tuple[int, ...], bool], LevelsPlan] = {}
    for plan in plans:
        if type(plan) is not ExchangePlan:
            continue
        variant = LevelsPlan.alternate(plan)
        if variant is not None:
            out.setdefault((variant.topology.groups, variant.combine), variant)
    for plan in [p for p in plans if type(p) is ExchangePlan and p.levels == 1]:  # (one per P and write-combining choice)
        for topology in memory_topologies(plan.workers):
            out.setdefault((topology.groups, plan.combine), LevelsPlan(topology, plan.combine, plan.senders, plan.buckets, (1,)))
    return list(out.values())
