"""Exchange topologies: P workers on a k-dimensional grid, P = g_1 * ... * g_k, for any P.

A worker (and a partition) id is written in mixed radix with the digit of level 1 MOST significant::

    id = d_1 * (g_2 * ... * g_k) + d_2 * (g_3 * ... * g_k) + ... + d_k,      0 <= d_i < g_i

Level i of a k-level exchange moves every record to the worker whose digit i equals digit i of the
record's partition, among the g_i workers that differ from the sender only in digit i (its group).
After level k every record sits at the worker numbered like its partition (Lambada §5.3).

Why level 1 is the most significant digit: the partitions a level-1 receiver collects are then a
contiguous range of partition ids, so with partitions that are contiguous ranges of finer buckets
(hash or key-range buckets a producer wrote before P was chosen) each level-1 receiver reads ONE
byte range of each producer's object. That is what lets P and the topology be bound late.

Candidates (MinFlow's topology optimizer): for each level count L, the factorisation of P into L
factors >= 2 with the smallest sum, i.e. the fewest remote edges P * sum(g_i), by dynamic
programming over divisors:  MinSum(n, 1) = n;  MinSum(n, L) = min over divisors d>=2 of n of
d + MinSum(n/d, L-1). A prime P has only the one-level (direct) topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import prod


@dataclass(frozen=True)
class Topology:
    """Group sizes g_1..g_k of a k-level exchange among prod(g_i) workers."""

    groups: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.groups or any(g < 1 for g in self.groups):
            raise ValueError(f"group sizes must be positive integers, got {self.groups}")
        if len(self.groups) > 1 and any(g < 2 for g in self.groups):
            raise ValueError(f"a multi-level topology needs groups of at least 2, got {self.groups}")

    @classmethod
    def direct(cls, workers: int) -> Topology:
        """The one-level topology: one group of all workers."""
        return cls((workers,))

    @classmethod
    def parse(cls, text: str) -> Topology:
        """Read "3x4" or "2x2x3" (g_1 first)."""
        try:
            return cls(tuple(int(part) for part in text.lower().split("x")))
        except ValueError as exc:
            raise ValueError(f"cannot read topology {text!r}; write group sizes like 3x4 or 2x2x3") from exc

    @property
    def workers(self) -> int:
        """P = the product of the group sizes."""
        return prod(self.groups)

    @property
    def levels(self) -> int:
        """k, the number of levels."""
        return len(self.groups)

    def stride(self, level: int) -> int:
        """Weight of digit ``level`` (0-based) in an id: the product of the later groups."""
        return prod(self.groups[level + 1 :])

    def digit(self, worker: int, level: int) -> int:
        """Digit ``level`` (0-based) of ``worker`` (or of a partition id)."""
        return (worker // self.stride(level)) % self.groups[level]

    def with_digit(self, worker: int, level: int, value: int) -> int:
        """``worker`` with its digit ``level`` replaced by ``value``."""
        return worker + (value - self.digit(worker, level)) * self.stride(level)

    def group(self, worker: int, level: int) -> list[int]:
        """The workers ``worker`` exchanges with at ``level`` (itself included), by digit value."""
        return [self.with_digit(worker, level, v) for v in range(self.groups[level])]

    def block(self, worker: int, level: int) -> range:
        """The partitions a receiver of ``level`` collects: those agreeing with ``worker`` on digits
        0..level, a contiguous range of ids (see the module docstring)."""
        size = self.stride(level)
        first = worker // size * size
        return range(first, first + size)

    def remote_edges(self) -> int:
        """Objects moved through storage by one exchange: P * sum(g_i)."""
        return self.workers * sum(self.groups)

    def __str__(self) -> str:
        return "x".join(map(str, self.groups))


@lru_cache(maxsize=4096)
def _min_sum(n: int, levels: int) -> tuple[int, tuple[int, ...]] | None:
    """(smallest sum, factors) of ``n`` split into ``levels`` factors >= 2; None if impossible."""
    if levels == 1:
        return (n, (n,)) if n >= 2 else None
    best: tuple[int, tuple[int, ...]] | None = None
    for d in range(2, n // 2 + 1):
        if n % d:
            continue
        rest = _min_sum(n // d, levels - 1)
        if rest is not None and (best is None or d + rest[0] < best[0]):
            best = (d + rest[0], (d, *rest[1]))
    return best


def candidates(workers: int, max_levels: int | None = None) -> list[Topology]:
    """For each level count L = 1, 2, ..., the topology of P = ``workers`` with the fewest edges."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1:
        return [Topology((1,))]
    out = []
    for levels in range(1, (max_levels or workers.bit_length()) + 1):
        found = _min_sum(workers, levels)
        if found is None:
            break
        out.append(Topology(tuple(sorted(found[1], reverse=True))))
    return out
