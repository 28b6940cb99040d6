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
and the run report. The model predicts each candidate with the phase kinds of the stages that
will run it (:func:`stage_kinds`): a group-by's consumers are priced as hash aggregations, a
join's as hash joins, a sort's as sorts — not as TeraSort.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Union

from croupier.config import Config
from croupier.dag.stage import ExchangeInput, ExchangeSink, HashPartitioning, OutputSink, ResultSink, ScanSource, Stage, TaskSource
from croupier.errors import ConfigError
from croupier.exchange.broadcast import BroadcastPlan
from croupier.exchange.plan import ExchangePlan
from croupier.exchange.topology import Topology, candidates
from croupier.model.profile import StorageProfile, profile_for
from croupier.model.selector import Choice, choose, search_range
from croupier.units import format_bytes

Plan = Union[ExchangePlan, BroadcastPlan]
#: Buckets per partition of the largest P a late-bound exchange may choose. Each producer writes
#: (and each consumer decodes) an Arrow message per bucket, about 20 us each: with 8 per partition
#: (B = 128 on 2 cores), TPC-H SF1's exchanges of a few MB spent more on their messages than on
#: their rows, and B = 32 ran the 22 queries 10% faster. The selector keeps the partitions (runs
#: of whole buckets) within 1/8 of an even share by the P it considers (selector.balanced).
BUCKETS_PER_PARTITION = 2
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

    def __init__(self, config: Config, tmp_url: str, profile: StorageProfile | None = None) -> None:
        self.config = config
        self.tmp_url = tmp_url
        self._profile: StorageProfile | None = profile
        self._lock = threading.Lock()

    def profile(self) -> StorageProfile:
        """The storage profile of the run's intermediate store, with this run's function memory
        (the run's own when it was given one; else found by :func:`profile_for`)."""
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
        return algorithm is not None and "wc" not in algorithm.split("+")

    def binds_early(self, sink: ExchangeSink) -> bool:
        """Whether the exchange of ``sink`` (without a plan of its own) is bound before its
        producers write: a hash exchange under a forced plain algorithm. The runner binds it so and
        explain's preview shows it so."""
        return self.needs_early() and isinstance(sink.partitioning, HashPartitioning)

    def max_partitions(self) -> int:
        """The largest P any exchange of this run may get."""
        if self.config.workers:
            return self.config.workers
        topology = self.forced_topology()
        if topology is not None:
            return topology.workers
        return search_range(0, self.profile(), self.config.max_workers).stop - 1

    def fine_buckets(self) -> int:
        """B for late-bound exchanges: :data:`BUCKETS_PER_PARTITION` times the largest P, within
        bounds (the selector then considers the P that split B evenly: selector.balanced)."""
        p = self.max_partitions()
        if self.config.workers or self.config.topology:
            return p
        return max(p, min(MAX_BUCKETS, BUCKETS_PER_PARTITION * p))

    # --- decisions --------------------------------------------------------------------------------
    def _choose(self, nbytes: int, senders: int | None, buckets: int | None, producers_done: bool, phases: Phases | None, tiers: Any = None, plan: ExchangePlan | None = None, stored: float | None = None) -> Choice:
        config = self.config
        algorithm, topology = (plan.family, plan.topology) if plan is not None else (config.algorithm, self.forced_topology())
        return choose(
            max(1, nbytes), self.profile(), config.objective, config.budget, workers=config.workers, concurrency=config.concurrency,
            max_workers=config.max_workers, algorithm=algorithm, senders=senders, buckets=buckets,
            topology=topology, producers_done=producers_done, phases=phases, tiers=tiers, stored=stored,
        )  # fmt: skip

    def tiered(self, nbytes: int, senders: int, buckets: int | None, tiers: Any, phases: Phases | None = None, plan: ExchangePlan | None = None) -> Choice:
        """The selector over tier x algorithm x P before ``senders`` producers write ``nbytes``
        (``tiers``: a :class:`croupier.model.tier.TierOptions`; ``plan``: the exchange's plan when
        it is fixed already, as TeraSort's is: only it is priced, on each tier); the caller keeps
        the tier."""
        return self._choose(nbytes, senders, buckets, False, phases, tiers, plan)

    def late(self, nbytes: int, senders: int, buckets: int, what: str = "measured", phases: Phases | None = None, decoded: int | None = None) -> Decision:
        """P and a write-combined plan for ``nbytes`` the ``senders`` producers wrote in ``buckets``;
        ``phases``: the phase kinds of the stages that will run it (see :func:`stage_kinds`);
        ``decoded``: what the rows take decoded, when the producers measured it — the consumers'
        operators work through that much (a zstd exchange's objects hold a third of it, a
        condensed one's a third of the partial form), and are priced by it."""
        data = max(1, decoded or nbytes)
        stored = max(1, nbytes) / data if decoded else None  # else: the profile's ratio for the write kind
        choice = self._choose(data, senders, buckets, producers_done=True, phases=phases, stored=stored)
        return Decision(choice.best.plan, self._why(choice, nbytes, what, data), choice)

    def early(self, nbytes: int, senders: int | None, what: str, phases: Phases | None = None) -> Decision:
        """A plan fixed before ``senders`` producers run (None: as many as consumers, TeraSort's
        mappers = reducers), for ``nbytes`` (``what`` says how D was known: "sampled", ...)."""
        choice = self._choose(nbytes, senders, None, producers_done=False, phases=phases)
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
    def _why(choice: Choice, nbytes: int, what: str, decoded: int | None = None) -> str:
        best = choice.best
        d = best.dominant()
        also = f"on {format_bytes(decoded)} decoded: " if decoded is not None and decoded != max(1, nbytes) else ""
        return (
            f"{format_bytes(nbytes)} {what} -> {best.plan.name}, P={best.workers} ({also}{best.seconds:.3f} s predicted, "
            f"{best.low:.3f}-{best.high:.3f}; dominated by {d.name}; {len(choice.candidates)} candidates){choice.note()}"
        )


#: Phase kinds per role of an exchange's stages ("map", "level", "reduce"), for the model.
Phases = dict[str, tuple[str, ...]]


def stage_kinds(stage: Stage, format_of: Callable[[str], str]) -> tuple[str, ...]:
    """The phase kinds ``stage``'s tasks will report (what :mod:`croupier.dag.task` names them):
    its reads, its operators, its write. ``format_of(rep)`` is the exchange codec of a data
    representation ("records" or "frames")."""
    from croupier.dag.operators import RecordsToFrame
    from croupier.dag.task import read_kind

    source = stage.source
    if isinstance(source, ScanSource):
        kinds = [source.spec.cost_kind]
    elif isinstance(source, TaskSource):
        kinds = [read_kind(source.reads[0])] if source.reads else []
    else:
        kinds = [exchange_read_kind(source, format_of)]
    kinds += [exchange_read_kind(side, format_of) for side in stage.sides.values()]
    kinds += [op.cost_kind for op in stage.ops]
    sink = stage.sink
    rep = "frames" if stage.rep == "frames" or any(isinstance(op, RecordsToFrame) for op in stage.ops) else "records"
    if isinstance(sink, ResultSink):
        kinds.append("write:result")
    elif isinstance(sink, OutputSink):
        kinds.append(f"write:output-{sink.fmt}")
    elif isinstance(sink, ExchangeSink):
        part = type(sink.partitioning).__name__.removesuffix("Partitioning").lower()
        kinds.append(f"write:exchange-{rep}-{format_of(rep)}-{part}")
    return tuple(dict.fromkeys(kinds))


def format_for(encoding: str, rep: str) -> str:
    """The chunk codec of a representation ("records" or "frames") when shuffle objects are
    encoded as ``encoding``: "raw" is the records' own bytes; query rows travel as uncompressed
    Arrow instead."""
    if rep == "records":
        return encoding
    return "arrow" if encoding == "raw" else encoding


def early_kinds(stage: Stage, format_of: Callable[[str], str]) -> Phases:
    """Phase kinds of an exchange bound before ``stage``, its producer, writes: the producer's,
    and its consumers' exchange read (what else they run is not the binding's to know yet)."""
    return {"map": stage_kinds(stage, format_of), "reduce": (f"read:exchange-{stage.rep}-{format_of(stage.rep)}",)}


def sort_phases(fmt: str) -> Phases:
    """Phase kinds of a query's range-partitioned sort: the stage that cuts the materialised input
    by splitters, and the stage that sorts each range (its write is not known yet: left out)."""
    return {"map": (f"read:exchange-frames-{fmt}", f"write:exchange-frames-{fmt}-range"), "reduce": (f"read:exchange-frames-{fmt}", "sort")}


def exchange_read_kind(source: ExchangeInput, format_of: Callable[[str], str]) -> str:
    """The phase kind of reading an exchange input."""
    rep = source.stage.rep
    return f"read:exchange-{rep}-{format_of(rep)}"


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
