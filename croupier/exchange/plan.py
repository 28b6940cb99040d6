"""Exchange plans: which objects each task writes and reads at each level; pure and countable.

::

    M producers ──level 1──> P workers ──level 2──> ... ──level k──> P consumers
    (senders)    objects                 objects                     (worker id = partition id)

An :class:`ExchangePlan` is a topology of P workers, a choice of write combining, the number M of
producers (senders of level 1; any M, not only P) and the number B >= P of buckets the producers
cut their data into. Partition p owns the contiguous buckets [p*B//P, (p+1)*B//P): with B = P a
bucket is a partition; with B > P the producers could write before P was chosen (late binding),
and each partition is a run of buckets. The plan never touches storage: the exchange executor
(:mod:`croupier.exchange.move`) asks it for keys and routes, tests and the model ask it how many
requests of each kind an exchange costs. Per level, with senders S (= M at level 1, else P):

    plain:           S * g_i PUTs (one object per sender and group member), S * g_i GETs
    write combining: S PUTs (one object per sender), S * g_i ranged GETs (one byte range each)

so the classic direct exchange (M = P, k = 1) is 2P^2 requests, two levels about 4P*sqrt(P),
and write combining k*P writes.

Level 1 with M != P: producer s acts as the virtual worker v(s) = s*P // M (monotone in s), so its
data goes to the group of v(s), and every level-1 receiver reads the producers whose virtual
worker is in its group. Every chunk of data keeps the index of the producer it came from, and a
consumer orders its chunks by (bucket, producer): the rows a consumer sees are in the same order
whatever the topology, P or write combining (so every plan gives byte-identical sorted output).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable

from croupier.exchange.topology import Topology


@dataclass(frozen=True)
class ObjectWrite:
    """One object a task writes at a level, holding data for ``receivers`` (in that order)."""

    key: str
    receivers: tuple[int, ...]


@dataclass(frozen=True)
class ObjectRead:
    """One object (or, with write combining, one byte range of it) a worker reads at a level.

    ``segment`` is the index of the reader's segment in a combined object: at level 1, the first
    bucket of its range (it reads buckets ``segment`` .. ``segment_end``); at later levels, its
    position in the sender's group.
    """

    key: str
    sender: int
    ranged: bool
    segment: int = 0
    segment_end: int = 0


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
    read_bytes: int = 0  # average bytes of one read: D / reads


@dataclass(frozen=True)
class LevelStage:
    """One stage of tasks an exchange implies: ``tasks`` tasks that read level ``reads`` (None: the
    producers, which read their own input) and write level ``writes`` (None: the consumers).
    ``memory``: the level that happens inside these tasks (a memory level), if any."""

    tasks: int
    reads: int | None
    writes: int | None
    memory: int | None = None


@dataclass(frozen=True)
class ExchangePlan:
    """A k-level exchange (k=1: direct) from M producers to ``topology.workers`` consumers.

    ``senders``: M, the producers (None: M = P). ``buckets``: B >= P, the buckets producers cut
    their data into (None: B = P).
    """

    topology: Topology
    combine: bool = False
    senders: int | None = None
    buckets: int | None = None

    def __post_init__(self) -> None:
        if self.senders is not None and self.senders < 1:
            raise ValueError(f"an exchange needs at least one producer, got {self.senders}")
        if self.buckets is not None and self.buckets < self.workers:
            raise ValueError(f"{self.buckets} buckets cannot feed {self.workers} partitions; buckets must be >= P")

    @classmethod
    def direct(cls, workers: int, combine: bool = False, senders: int | None = None, buckets: int | None = None) -> ExchangePlan:
        return cls(Topology.direct(workers), combine, senders, buckets)

    # --- shape ---------------------------------------------------------------------------------
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
        """P: level-2..k workers and consumers."""
        return self.topology.workers

    @property
    def producers(self) -> int:
        """M: the tasks that write level 1."""
        return self.senders if self.senders is not None else self.workers

    @property
    def bucket_count(self) -> int:
        """B: buckets the producers cut their data into."""
        return self.buckets if self.buckets is not None else self.workers

    @property
    def levels(self) -> int:
        return self.topology.levels

    @property
    def stored_levels(self) -> int:
        """Levels whose objects go through storage: every level here (a memory level's do not)."""
        return self.levels

    def describe(self) -> str:
        """One line: the plan with its producers, consumers and buckets."""
        extra = f", B={self.bucket_count} buckets" if self.bucket_count != self.workers else ""
        return f"{self.name}: M={self.producers} producers -> P={self.workers} consumers{extra}"

    # --- buckets and partitions -------------------------------------------------------------------
    def bucket_start(self, partition: int) -> int:
        """First bucket of ``partition`` (partition P gives B, the end)."""
        return partition * self.bucket_count // self.workers

    def partition_of(self, bucket: int) -> int:
        """The partition owning ``bucket``."""
        return ((bucket + 1) * self.workers - 1) // self.bucket_count

    def virtual(self, sender: int) -> int:
        """The worker a level-1 sender stands in for: s*P // M."""
        return sender * self.workers // self.producers

    def level_senders(self, level: int) -> int:
        """How many tasks write objects at ``level``: M at level 0, P after."""
        return self.producers if level == 0 else self.workers

    def combined(self, level: int) -> bool:
        """Whether senders of ``level`` write one combined object (the same at every level here;
        the hybrid plan combines level 1 only)."""
        return self.combine

    def stages(self) -> list[LevelStage]:
        """The stages of tasks the exchange implies, producers first, consumers last: M producers
        writing level 0, the senders of each later level reading the one before, P consumers."""
        k = self.levels
        middle = [LevelStage(self.level_senders(i), i - 1, i) for i in range(1, k)]
        return [LevelStage(self.producers, None, 0), *middle, LevelStage(self.workers, k - 1, None)]

    def route(self, level: int, partition: int) -> int:
        """Index, within the sender's group at ``level``, of the receiver a partition goes to."""
        return self.topology.digit(partition, level)

    # --- objects -------------------------------------------------------------------------------------
    def key(self, level: int, sender: int, receiver: int | None) -> str:
        """Key of the object ``sender`` writes at ``level`` for ``receiver`` (None: combined)."""
        if receiver is None:
            return f"l{level}/s{sender:05d}"
        return f"l{level}/s{sender:05d}/r{receiver:05d}"

    def _sender_group(self, level: int, sender: int) -> list[int]:
        return self.topology.group(self.virtual(sender) if level == 0 else sender, level)

    def writes(self, level: int, sender: int) -> list[ObjectWrite]:
        """Objects ``sender`` writes at ``level`` (0-based); senders are producers at level 0."""
        group = tuple(self._sender_group(level, sender))
        if self.combine:
            return [ObjectWrite(self.key(level, sender, None), group)]
        return [ObjectWrite(self.key(level, sender, r), (r,)) for r in group]

    def senders_of(self, level: int, worker: int) -> list[int]:
        """The tasks ``worker`` reads from after ``level``, in sender order."""
        group = self.topology.group(worker, level)
        if level > 0:
            return group
        members = set(group)
        return [s for s in range(self.producers) if self.virtual(s) in members]

    def reads(self, level: int, worker: int) -> list[ObjectRead]:
        """Objects (or ranges) ``worker`` reads after ``level``, in sender order."""
        senders = self.senders_of(level, worker)
        if not self.combine:
            return [ObjectRead(self.key(level, s, worker), s, False) for s in senders]
        if level == 0:
            block = self.topology.block(worker, 0)
            first, end = self.bucket_start(block.start), self.bucket_start(block.stop)
            return [ObjectRead(self.key(0, s, None), s, True, first, end) for s in senders]
        position = self.topology.digit(worker, level)
        return [ObjectRead(self.key(level, s, None), s, True, position, position + 1) for s in senders]

    def segments(self, level: int) -> int:
        """Segments in one combined object of ``level``: B buckets at level 0, g_i after."""
        return self.bucket_count if level == 0 else self.topology.groups[level]

    # --- counting ------------------------------------------------------------------------------------
    def counts(self, data_bytes: int = 0) -> list[LevelCount]:
        """Requests, objects and bytes per level for ``data_bytes`` shuffled (no storage involved)."""
        out = []
        for level, g in enumerate(self.topology.groups):
            senders = self.level_senders(level)
            objects = senders if self.combine else senders * g
            reads = senders * g
            gets, ranged = (0, reads) if self.combine else (reads, 0)
            out.append(LevelCount(level, g, objects, gets, ranged, objects, data_bytes, data_bytes // objects, data_bytes // reads))
        return out

    def predicted_requests(self) -> dict[str, int]:
        """Total requests by kind over all levels."""
        levels = self.counts()
        return {
            "PUT": sum(c.puts for c in levels),
            "GET": sum(c.gets for c in levels),
            "GET_RANGE": sum(c.ranged_gets for c in levels),
        }


def requests_by_tier(counts: Iterable[LevelCount], tier_of: Callable[[int], str]) -> dict[str, dict[str, int]]:
    """The requests of ``counts`` by kind on each tier ("fast", "slow"), a level's tier given by
    ``tier_of(level)`` (plans whose levels live on different tiers: the hybrid)."""
    out = {t: {"PUT": 0, "GET": 0, "GET_RANGE": 0} for t in ("fast", "slow")}
    for count in counts:
        got = out[tier_of(count.level)]
        got["PUT"] += count.puts
        got["GET"] += count.gets
        got["GET_RANGE"] += count.ranged_gets
    return out


def all_plans(
    workers: int, max_levels: int | None = None, senders: int | None = None, buckets: int | None = None, combine: tuple[bool, ...] = (False, True), memory: bool = True
) -> list[ExchangePlan]:
    """Every candidate topology of ``workers``, each with the write-combining choices ``combine``,
    and (``memory``) each plan of 3 levels or more also with its middle levels in memory
    (:class:`croupier.exchange.levels.LevelsPlan`)."""
    return list(_all_plans(workers, max_levels, senders, buckets, tuple(combine), memory))


@lru_cache(maxsize=1024)
def _all_plans(workers: int, max_levels: int | None, senders: int | None, buckets: int | None, combine: tuple[bool, ...], memory: bool) -> tuple[ExchangePlan, ...]:
    """:func:`all_plans`, remembered: the selector asks the same ones for every exchange of a run
    (plans are immutable, so the same objects serve every caller)."""
    from croupier.exchange.levels import memory_plans
    from croupier.exchange.topology import candidates

    plans = [ExchangePlan(t, c, senders, buckets) for t in candidates(workers, max_levels) for c in combine]
    return tuple(plans + memory_plans(plans, max_levels) if memory else plans)
