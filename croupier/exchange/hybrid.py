"""The hybrid multi-round exchange (Locus §3.4): rounds of r bytes through a small fast tier,
combined runs on the slow tier, one final read of the slow tier; pure and countable.

::

    round j (producers m*j .. m*(j+1)-1)            after every round
    producers ──level 1 (FAST)──> P combiners ──level 2 (SLOW)──> ... ──> P consumers
    (one combined object,          (combiner (j, c) reads partition     (consumer c reads the run
     B bucket segments each)        c of its round's producers, writes   of partition c of every
                                    one run for consumer c)              round: R objects)

A :class:`HybridPlan` is an :class:`~croupier.exchange.plan.ExchangePlan` of two levels with a
tier per level. Its M producers are cut into R = ceil(M / m) rounds of m producers (r bytes: the
fast capacity the round may use). Round j's producers write one write-combined object each to the
fast tier (B bucket segments, as a late-bound direct+wc exchange); the P combiners of round j
(level-2 senders ``j * P + c``) each read their partition's byte range of every producer of the
round, and write one plain object, the round's run of partition c, to the slow tier; the driver
then deletes the round's fast objects, so the fast tier never holds more than one round. Finally
consumer c reads its R runs from the slow tier. Every chunk keeps its producer index, so the
consumer sees its rows in the same (bucket, producer) order as with any other plan: the output is
byte-identical to the slow and fast tiers'.

Requests (``counts``; the tier of each level in ``tier``):

    fast (level 1): M PUTs, M * P ranged GETs, and one DELETE batch per round (driver)
    slow (level 2): R * P PUTs, R * P GETs

against the slow tier's 2 * M * P (plain direct, M = P) or M + M * P (write combining) requests:
the hybrid trades M * P slow reads for R * P, at the price of writing and reading the data twice.

**Pipelined** (Locus §3.4, "pipelining across stages"; ``combine=False``): each producer writes P
plain objects to the fast tier (one per combiner of its round) instead of one combined object, so
that a combiner knows every object's name before it is written and needs no producer's metadata.
A round's combiners then run beside its producers (in the same executor call, started once a
share of the producers finished, each polling for objects still being written), overlapping the
two phases and filling the producers' tail, where the unpipelined round waits for its last
producer before any combiner starts. Locus appends to one key per partition and deletes what it
read, which gives up task-level fault tolerance; here every object stays until the round's
combiners all wrote their runs (the driver then deletes the round), so any task can run again.
The price: M * P fast PUTs and GETs instead of M PUTs and M * P ranged GETs (which a Redis tier,
priced by memory, hardly notices, and a request-priced one such as S3 Express does)::

    fast (level 1, pipelined): M * P PUTs, M * P GETs, and per round its m * P keys' DELETE
                               batches (driver); a combiner that polls for an object not written
                               yet also reads it in vain (``missed_requests`` in the run report)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from croupier.exchange.plan import ExchangePlan, LevelCount, ObjectRead, ObjectWrite, requests_by_tier
from croupier.exchange.topology import Topology
from croupier.units import format_bytes

#: The tier of each level of a hybrid plan: level 1 on the fast tier, level 2 on the slow one.
TIERS = ("fast", "slow")


@dataclass(frozen=True)
class HybridPlan(ExchangePlan):
    """M producers in rounds of ``per_round`` through the fast tier, P consumers (see the module
    docstring). ``round_bytes``: r, the fast-tier bytes one round was sized for (for the name and
    the report; 0 if not known)."""

    per_round: int = 1
    round_bytes: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.topology.levels != 1:
            raise ValueError(f"a hybrid exchange has a direct topology of P consumers, got {self.topology}")
        if self.per_round < 1:
            raise ValueError(f"a round needs at least one producer, got {self.per_round}")

    @classmethod
    def build(cls, workers: int, senders: int, per_round: int, buckets: int | None = None, round_bytes: int = 0, pipelined: bool = False) -> HybridPlan:
        """The hybrid plan of ``senders`` producers in rounds of ``per_round`` to ``workers``
        consumers; ``pipelined``: plain fast objects, combiners beside the producers."""
        return cls(Topology.direct(workers), not pipelined, senders, buckets, min(per_round, senders), round_bytes)

    # --- shape ---------------------------------------------------------------------------------------
    @property
    def pipelined(self) -> bool:
        """Whether a round's combiners run beside its producers (plain fast objects, see the module docstring)."""
        return not self.combine

    @property
    def name(self) -> str:
        """"hybrid r=256MiB" (or "hybrid m=3" when r is not known), "... pipelined" when it is."""
        return hybrid_name(self.round_bytes, self.per_round, self.pipelined)

    @property
    def family(self) -> str:
        return "hybrid"

    @property
    def levels(self) -> int:
        return 2

    @property
    def rounds(self) -> int:
        """R = ceil(M / m)."""
        return math.ceil(self.producers / self.per_round)

    def describe(self) -> str:
        return f"{self.name}: M={self.producers} producers in {self.rounds} round(s) of {self.per_round} -> P={self.workers} consumers, B={self.bucket_count} buckets"

    def tier(self, level: int) -> str:
        """Where the objects written at ``level`` live: "fast" (level 1) or "slow" (level 2)."""
        return TIERS[level]

    def round_producers(self, round_: int) -> range:
        """The producers of round ``round_`` (0-based)."""
        if not 0 <= round_ < self.rounds:
            raise ValueError(f"round {round_} is not one of the plan's {self.rounds} rounds")
        return range(round_ * self.per_round, min(self.producers, (round_ + 1) * self.per_round))

    def round_of(self, producer: int) -> int:
        return producer // self.per_round

    def combiner(self, round_: int, partition: int) -> int:
        """The level-2 sender id of round ``round_``'s combiner of ``partition``: j * P + c."""
        return round_ * self.workers + partition

    def round_combiners(self, round_: int) -> range:
        return range(self.combiner(round_, 0), self.combiner(round_ + 1, 0))

    def level_senders(self, level: int) -> int:
        """M producers at level 0, R * P combiners at level 1."""
        return self.producers if level == 0 else self.rounds * self.workers

    def route(self, level: int, receiver: int) -> int:
        """Level 1: the partition of a bucket's data, or of a combiner (j * P + c: partition c);
        level 2: every partition's data goes to the combiner's only receiver (slot 0)."""
        return self.topology.digit(receiver % self.workers, 0) if level == 0 else 0

    def combined(self, level: int) -> bool:
        """Level 1 writes combined objects (one per producer) unless pipelined; level 2 plain runs."""
        return level == 0 and self.combine

    def segments(self, level: int) -> int:
        return self.bucket_count if self.combined(level) else 1

    # --- objects ---------------------------------------------------------------------------------------
    def writes(self, level: int, sender: int) -> list[ObjectWrite]:
        """Level 0: producer ``sender``'s combined object for the P combiners of its round;
        level 1: combiner ``sender``'s run for its consumer."""
        if level == 0:
            j = self.round_of(sender)
            if self.pipelined:  # one plain object per combiner of the round: named before it exists
                return [ObjectWrite(self.key(0, sender, c % self.workers), (c,)) for c in self.round_combiners(j)]
            return [ObjectWrite(self.key(0, sender, None), tuple(self.round_combiners(j)))]
        partition = sender % self.workers
        return [ObjectWrite(self.key(1, sender, partition), (partition,))]

    def senders_of(self, level: int, worker: int) -> list[int]:
        """Level 0: combiner ``worker``'s round's producers; level 1: consumer ``worker``'s combiners."""
        if level == 0:
            return list(self.round_producers(worker // self.workers))
        return [self.combiner(j, worker) for j in range(self.rounds)]

    def reads(self, level: int, worker: int) -> list[ObjectRead]:
        """Level 0 (combiner j*P+c): the byte range of partition c in each producer of round j;
        level 1 (consumer c): the R runs of partition c, whole."""
        if level == 0:
            c = worker % self.workers
            if self.pipelined:
                return [ObjectRead(self.key(0, s, c), s, False) for s in self.senders_of(0, worker)]
            first, end = self.bucket_start(c), self.bucket_start(c + 1)
            return [ObjectRead(self.key(0, s, None), s, True, first, end) for s in self.senders_of(0, worker)]
        return [ObjectRead(self.key(1, s, worker), s, False) for s in self.senders_of(1, worker)]

    def round_keys(self, round_: int) -> list[str]:
        """The fast-tier objects of round ``round_`` (deleted once its combiners read them)."""
        return [o.key for s in self.round_producers(round_) for o in self.writes(0, s)]

    # --- counting ----------------------------------------------------------------------------------------
    def counts(self, data_bytes: int = 0) -> list[LevelCount]:
        """Level 1 (fast): M PUTs, M * P ranged GETs (pipelined: M * P PUTs and plain GETs);
        level 2 (slow): R * P PUTs and GETs."""
        m, p, rp = self.producers, self.workers, self.rounds * self.workers
        mp = m * p
        first = LevelCount(0, p, mp, mp, 0, mp, data_bytes, data_bytes // mp, data_bytes // mp) if self.pipelined else LevelCount(0, p, m, 0, mp, m, data_bytes, data_bytes // m, data_bytes // mp)
        return [
            first,
            LevelCount(1, 1, rp, rp, 0, rp, data_bytes, data_bytes // rp, data_bytes // rp),
        ]

    def requests_by_tier(self) -> dict[str, dict[str, int]]:
        """PUTs and GETs on each tier: {"fast": {...}, "slow": {...}} (the driver's fast-tier
        DELETEs: :meth:`delete_requests`)."""
        return requests_by_tier(self.counts(), self.tier)

    def delete_requests(self, batch: int) -> int:
        """DELETE requests the driver sends to free the fast tier after the rounds (``batch``: keys
        per request; a round holds m keys, or m * P pipelined)."""
        return sum(math.ceil(len(self.round_keys(j)) / batch) for j in range(self.rounds))


def per_round_for(round_bytes: float, data_bytes: float, senders: int, writers: int = 0) -> int:
    """m: how many of ``senders`` producers of ``data_bytes`` in all fit in a round of
    ``round_bytes`` (0 if not even one producer's share fits). ``writers``: producers writing at
    once, each needing one share more while its write is in flight (Redis counts a request's
    input buffer in its memory)."""
    if senders < 1:
        raise ValueError(f"an exchange needs at least one producer, got {senders}")
    share = max(1.0, data_bytes / senders)
    return max(0, min(senders, int((round_bytes - writers * share) // share)))


def hybrid_name(round_bytes: int, per_round: int, pipelined: bool) -> str:
    """A hybrid exchange's name: "hybrid r=256MiB" (or "hybrid m=3" when r is not known), with
    " pipelined" when its rounds are."""
    size = f"r={compact_bytes(round_bytes)}" if round_bytes else f"m={per_round}"
    return f"hybrid {size}" + (" pipelined" if pipelined else "")


def compact_bytes(n: float) -> str:
    """256 MiB as "256MiB", 1.5 GiB as "1.5GiB" (for plan names)."""
    return format_bytes(n).replace(".0 ", "").replace(" ", "")
