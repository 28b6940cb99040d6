"""Binding exchanges: choosing P, the algorithm and the topology of each exchange, by the selector.

Every stage boundary of every job is bound here, from measured bytes, with one profile per run:

* **late** (the default for hash exchanges): the producers cut their rows into B fine buckets and
  write one combined object each; when they have reported their bytes D, the selector picks P <= B
  and the topology among write-combined plans (the only form writable before P is known);
* **early**: a plan fixed before the producers run — a sort's range exchange planned from a probe
  (D measured by sampling), or a forced plain algorithm (P from the bytes the producers will read);
  every algorithm family is a candidate;
* **broadcast**: the build side of a broadcast join, or a gather (one consumer): direct or
  multi-level broadcast among the consumers.

Forcing (``Config.workers``/``algorithm``/``topology``) narrows the candidates of every
partitioned exchange; the decision records the candidates compared and why one won, for explain
and the run report.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Union

from croupier.config import Config
from croupier.errors import ConfigError
from croupier.exchange.broadcast import BroadcastPlan
from croupier.exchange.plan import ExchangePlan
from croupier.exchange.topology import Topology, candidates
from croupier.model.profile import StorageProfile, profile_for
from croupier.model.selector import Choice, choose, search_range
from croupier.units import format_bytes

Plan = Union[ExchangePlan, BroadcastPlan]
#: Buckets per partition of the largest P a late-bound exchange may choose: with B >= 8 P the
#: partitions (contiguous bucket runs) differ in size by at most 1/8.
BUCKETS_PER_PARTITION = 8
MAX_BUCKETS = 8192


@dataclass(frozen=True)
class Decision:
    """A bound exchange: the plan, how it was chosen, and (when the selector chose) the candidates."""

    plan: Plan
    how: str
    choice: Choice | None = None

    @property
    def workers(self) -> int:
        return self.plan.workers


class Binder:
    """Chooses the plans of one run's exchanges (thread-safe; the profile is loaded once)."""

    def __init__(self, config: Config, tmp_url: str) -> None:
        self.config = config
        self.tmp_url = tmp_url
        self._profile: StorageProfile | None = None
        self._lock = threading.Lock()

    def profile(self) -> StorageProfile:
        """The storage profile of the run's intermediate store, with this run's function memory."""
        with self._lock:
            if self._profile is None:
                self._profile = profile_for(self.config, self.tmp_url)
            return self._profile

    # --- what the forcing fields say -----------------------------------------------------------
    def forced_topology(self) -> Topology | None:
        return Topology.parse(self.config.topology) if self.config.topology else None

    def needs_early(self) -> bool:
        """Whether the forced algorithm needs P before the producers write (plain level 1)."""
        algorithm = self.config.algorithm
        return algorithm is not None and not algorithm.endswith("+wc")

    def max_partitions(self) -> int:
        """The largest P any exchange of this run may get."""
        if self.config.workers:
            return self.config.workers
        topology = self.forced_topology()
        if topology is not None:
            return topology.workers
        return search_range(0, self.profile(), self.config.max_workers).stop - 1

    def fine_buckets(self) -> int:
        """B for late-bound exchanges: a multiple of every candidate P's size, within bounds."""
        p = self.max_partitions()
        if self.config.workers or self.config.topology:
            return p
        return max(p, min(MAX_BUCKETS, BUCKETS_PER_PARTITION * p))

    # --- decisions --------------------------------------------------------------------------------
    def _choose(self, nbytes: int, senders: int | None, buckets: int | None, producers_done: bool) -> Choice:
        config = self.config
        return choose(
            max(1, nbytes), self.profile(), config.objective, config.budget, workers=config.workers, concurrency=config.concurrency,
            max_workers=config.max_workers, algorithm=config.algorithm, senders=senders, buckets=buckets,
            topology=self.forced_topology(), producers_done=producers_done,
        )  # fmt: skip

    def late(self, nbytes: int, senders: int, buckets: int, what: str = "measured") -> Decision:
        """P and a write-combined plan for ``nbytes`` the ``senders`` producers wrote in ``buckets``."""
        choice = self._choose(nbytes, senders, buckets, producers_done=True)
        return Decision(choice.best.plan, self._why(choice, nbytes, what), choice)

    def early(self, nbytes: int, senders: int | None, what: str) -> Decision:
        """A plan fixed before ``senders`` producers run (None: as many as consumers, TeraSort's
        mappers = reducers), for ``nbytes`` (``what`` says how D was known: "sampled", ...)."""
        choice = self._choose(nbytes, senders, None, producers_done=False)
        return Decision(choice.best.plan, self._why(choice, nbytes, what), choice)

    def fixed(self, workers: int, senders: int, buckets: int | None) -> Decision:
        """A plan whose P the stage itself fixes (e.g. one task): the cheapest of that P."""
        if buckets is not None and workers > buckets:
            raise ConfigError(f"a stage asks for P={workers} but its producers wrote only {buckets} buckets")
        combine = True if buckets is not None else False
        plan = ExchangePlan(candidates(workers, 1)[0], combine, senders, buckets)
        return Decision(plan, f"P={workers} fixed by the plan, {plan.name}")

    def broadcast(self, nbytes: int, senders: int, consumers: int) -> Decision:
        """Direct or multi-level broadcast of ``nbytes`` from ``senders`` to ``consumers`` tasks.

        A multi-level broadcast pays an extra write and read of the growing data per level; it wins
        only when the direct one's M*N reads are request-bound, which the request counts decide.
        """
        if consumers <= 1:
            return Decision(BroadcastPlan(Topology((1,)), senders), f"gather of {format_bytes(nbytes)} from {senders} producer(s) into one task")
        profile = self.profile()
        best: tuple[float, BroadcastPlan] | None = None
        for topology in candidates(consumers, 2):
            plan = BroadcastPlan(topology, senders)
            seconds = _broadcast_seconds(plan, nbytes, profile, self.config.concurrency)
            if best is None or seconds < best[0]:
                best = (seconds, plan)
        assert best is not None
        return Decision(best[1], f"broadcast of {format_bytes(nbytes)} from {senders} producer(s) to {consumers} tasks: {best[1].name} ({best[0]:.3f} s predicted)")

    @staticmethod
    def _why(choice: Choice, nbytes: int, what: str) -> str:
        best = choice.best
        d = best.dominant()
        return f"{format_bytes(nbytes)} {what} -> {best.plan.name}, P={best.workers} ({best.seconds:.3f} s predicted, dominated by {d.name}; {len(choice.candidates)} candidates)"


def _broadcast_seconds(plan: BroadcastPlan, nbytes: int, profile: StorageProfile, concurrency: int) -> float:
    """Storage time of a broadcast plan's levels (reads and writes at the profile's rates)."""
    from croupier.model.stage import io_term as _io

    seconds = 0.0
    for count in plan.counts(nbytes):
        c = max(1, min(concurrency, plan.workers))
        read_bytes = count.object_bytes * count.gets
        seconds += _io("write", count.bytes_moved, count.puts, profile, c).seconds
        seconds += _io("read", read_bytes, count.gets, profile, c).seconds
        seconds += profile.startup_seconds
    return seconds
