"""The direct (one-level) exchange as a pure plan: who writes and who reads which object.

Every sender writes one object per receiver; every receiver reads one object per sender:

    sender s ──put──> "direct/s{s}/r{r}" ──get──> receiver r        for all s, r

With S senders and R receivers that is S*R PUTs and S*R GETs (2P^2 requests for P workers, each of
about D/P^2 bytes: SEER §3.1, Lambada Alg. 1). Receivers read in sender order, which keeps records of
equal keys in input order through the exchange.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DirectExchange:
    """Plan of a direct exchange between ``senders`` and ``receivers`` workers."""

    senders: int
    receivers: int
    name: str = "direct"

    def __post_init__(self) -> None:
        if self.senders < 1 or self.receivers < 1:
            raise ValueError(f"an exchange needs at least one sender and receiver, got {self.senders}x{self.receivers}")

    def object_key(self, sender: int, receiver: int) -> str:
        """Key (relative to the run's shuffle prefix) of the object from ``sender`` to ``receiver``."""
        return f"direct/s{sender:05d}/r{receiver:05d}"

    def writes(self, sender: int) -> list[str]:
        """Keys ``sender`` writes, indexed by receiver."""
        return [self.object_key(sender, r) for r in range(self.receivers)]

    def reads(self, receiver: int) -> list[str]:
        """Keys ``receiver`` reads, in sender order."""
        return [self.object_key(s, receiver) for s in range(self.senders)]

    def predicted_requests(self) -> dict[str, int]:
        """Requests the plan implies, by kind (what the performance model counts)."""
        objects = self.senders * self.receivers
        return {"PUT": objects, "GET": objects}
