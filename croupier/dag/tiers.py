"""Which tier an exchange's intermediate objects go to: the run's temporaries on the slow store,
a run-scoped prefix on the fast tier (Locus §3.3: a small Redis beside object storage), or rounds
through the fast tier with runs on the slow one (Locus §3.4, :mod:`croupier.exchange.hybrid`).

::

    producer stage ──Tiers.url_for(estimate)──> slow:   <tmp base>/_croupier_tmp/<run>/
                                               fast:   <fast tier>/_croupier_tmp/<run>/  (opened once, with a lease)
                                               hybrid: producers write the fast prefix, round by
                                                       round; combiners write runs to the slow one

The choice is made per exchange, before its producers write (``Config.tier``: "slow", "fast",
"hybrid", or "auto": the selector's search over tier x algorithm x P, see
:func:`croupier.model.selector.choose` with ``tiers``; Locus' Table 3 alone,
:func:`croupier.model.tier.choose`, when no selector is attached). A hybrid choice carries its
round (producers per round, r, pipelined or not) in :attr:`Tiers.rounds`; the exchanges build the
:class:`~croupier.exchange.hybrid.HybridPlan` from it and run the rounds. Every reader of the
exchange (levels 2..k, the consumers, the driver) reads where its producers wrote
(``StageOutput.url``; a hybrid's consumers read the slow tier). An exchange the fast tier was not
expected to hold whole (the selector's "fast" candidate with a share of its producers spilling,
:attr:`Tiers.spilling`), or whose producers spilled, writes its levels 2..k to the slow tier. The
fast prefix is a temporary of the run like the slow one: :meth:`croupier.dag.run.Run.finish`
deletes it.

Faults: a producer whose writes the fast tier refuses (full, or dead) writes its objects to the
slow tier instead, and its readers read them there (``StageOutput.where``; the report's
``summary["fast_tier_spills"]``), except in a pipelined hybrid round, whose combiners read
beside its producers. A hybrid round the fast tier loses is written again to the slow tier, only
its producers, and read again (``summary["fast_tier_reruns"]``); after a pipelined round lost to a
dead (not a full) fast tier, the later rounds go to the slow tier without trying it.
Anything else the fast tier fails — eager consumers, a hybrid's combiners — fails the run with errors
naming the fast tier; :func:`fast_tier_failure` recognises those, and the query front end runs
the job once more on the slow tier (see :mod:`croupier.frame.lazy`), saying so in the report
(``fast_tier_fallback``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from croupier.config import Config
from croupier.errors import StorageError, StoreFullError
from croupier.storage.location import parse_location

if TYPE_CHECKING:
    from croupier.dag.run import Run
    from croupier.model.tier import TierChoice, TierOptions


class Tiers:
    """The tier choice of one run (see the module docstring).

    State:
        slow_url: the run's temporaries on the slow store (canonical URL)
        fast_url: the run's prefix on the fast tier, once an exchange chose it (else None)
        chosen:   per producer stage: (tier, why), for the report and explain ("hybrid r=...")
        rounds:   per producer stage whose exchange is hybrid: the model's round
        spilling: producer stages whose exchange the fast tier is not expected to hold whole
                  (some producers spill; its levels 2..k go to the slow tier)
    """

    def __init__(self, run: Run, slow_url: str) -> None:
        self.run = run
        self.config: Config = run.config
        self.slow_url = slow_url
        self.fast_url: str | None = None
        self.chosen: dict[str, tuple[str, str]] = {}
        self.rounds: dict[str, TierChoice] = {}
        self.spilling: set[str] = set()
        #: the selector over tier x algorithm x P: (data bytes D, producers, TierOptions, the
        #: exchange's phase kinds, its plan if fixed) -> Choice; set by the exchanges (None:
        #: Locus' Table 3 comparison alone, croupier.model.tier.choose)
        self.select: Callable[[int, int, Any, Any, Any], Any] | None = None
        self._lock = threading.Lock()

    def url_for(self, stage: str, estimate: int | None, senders: int = 1, in_rounds: bool = False, phases: Any = None, spills: bool = True, plan: Any = None) -> str:
        """Where the exchange written by ``stage`` (``senders`` producers) puts its level-1 objects
        (``estimate``: its input bytes, if known; ``in_rounds``: it may run as the hybrid's
        rounds, :attr:`croupier.dag.stage.ExchangeSink.in_rounds`; ``phases``: the exchange's
        phase kinds, for the selector; ``spills``: its producers may write to the slow tier when
        the fast one is full, so it may go there even if it does not fit whole; ``plan``: its plan when fixed before it runs, the
        only one the search then prices). A hybrid exchange's producers write to the fast tier
        too; its round is in :attr:`rounds`."""
        choice = self.choose(estimate, senders, in_rounds, phases, spills, plan)
        with self._lock:
            self.chosen[stage] = (choice.label, choice.why)
            if choice.tier == "hybrid":
                self.rounds[stage] = choice
            if choice.tier == "fast" and choice.fast_share < 1:
                self.spilling.add(stage)
            if choice.tier == "slow":
                return self.slow_url
            return self.fast()

    def fast(self) -> str:
        """The run's prefix on the fast tier (opened, with a lease, the first time)."""
        if self.fast_url is None:
            assert self.config.fast_tier is not None
            self.fast_url = str(self.run.open_tmp(self.config.fast_tier, explicit=True, volatile=True))
        return self.fast_url

    def choose(self, estimate: int | None, senders: int = 1, in_rounds: bool = False, phases: Any = None, spills: bool = True, plan: Any = None) -> TierChoice:
        """The tier for an exchange of ``estimate`` bytes from ``senders`` producers. The selector
        takes ``estimate`` as the exchange's data D, as an early binding does, and sizes what the
        fast tier must hold by the bytes the producers' codec stores per byte of D
        (:func:`croupier.model.tier.stored_share`)."""
        from croupier.model.tier import TierChoice, choose, forced_hybrid

        config = self.config
        if config.fast_tier is None or config.tier == "slow":
            return TierChoice("slow", "no fast tier" if config.fast_tier is None else "tier forced: slow")
        if config.tier == "fast" or (config.tier == "hybrid" and not in_rounds):
            return TierChoice("fast", "tier forced: fast" if config.tier == "fast" else "tier forced: hybrid; not a partitioned exchange: fast")
        try:
            free = self._free()
        except StorageError as exc:
            return TierChoice("slow", f"the fast tier is unreachable: {_first_line(str(exc))}")
        if config.tier == "hybrid":
            return forced_hybrid(estimate, config, senders, self.slow_url, free, phases)
        options = search_options(config, free, in_rounds, spills)
        if self.select is not None and estimate is not None:  # the selector's tier x algorithm x P search
            from croupier.model.tier import from_selection

            return from_selection(self.select(estimate, senders, options, phases, plan), options)
        return choose(estimate, config, self.slow_url, free, senders, options.allowed)  # Locus Table 3 alone

    def _free(self) -> int | None:
        """Bytes the fast tier has free now (None: no limit, or not a store that says)."""
        assert self.config.fast_tier is not None
        free = getattr(self.run.store(self.config.fast_tier).backend, "free_memory", None)
        return free() if free is not None else None


def search_options(config: Config, free: float | None, in_rounds: bool, spills: bool) -> TierOptions:
    """What the tier search may choose for one exchange: the hybrid only when it ``in_rounds``
    (:attr:`croupier.dag.stage.ExchangeSink.in_rounds`), the fast tier with producers spilling
    only when they may (``spills``); the fast tier's profile with ``free`` bytes free now. The
    runner (:meth:`Tiers.choose`) and explain (croupier.plan.compile.tier_preview) both ask here."""
    from croupier.model.tier import TierOptions, fast_profile_for

    allowed = ("slow", "fast", "hybrid") if in_rounds else ("slow", "fast")
    return TierOptions(fast_profile_for(config), free, allowed, config.concurrency, config.pipelined, spills)


def fast_tier_failure(exc: BaseException, config: Config) -> str | None:
    """Why the fast tier made a run fail (it filled up, or could not be reached), or None when the
    failure has another cause. Task errors arrive as text from the workers, so the check reads
    the error chain's messages for the fast tier's error kind or its server's address."""
    if config.fast_tier is None or config.tier == "slow":
        return None
    server = f"{parse_location(config.fast_tier).scheme}://{parse_location(config.fast_tier).bucket.partition('/')[0]}"
    seen: BaseException | None = exc
    while seen is not None:
        text = f"{seen} {getattr(seen, 'cause', '')} {getattr(seen, 'worker_traceback', '')}"
        if isinstance(seen, StoreFullError) or "StoreFullError" in text or "maxmemory" in text:
            return f"the fast tier {config.fast_tier} {FULL}"
        if (isinstance(seen, StorageError) or "Error" in text) and server in text:
            return f"the fast tier {config.fast_tier} failed: {_first_line(str(seen))}"
        seen = seen.__cause__ or seen.__context__
    return None


#: How :func:`fast_tier_failure` says the fast tier is full (alive, and may take more later).
FULL = "is full (Redis maxmemory)"


def is_full(reason: str) -> bool:
    """Whether a :func:`fast_tier_failure` reason says the fast tier is full, not gone."""
    return reason.endswith(FULL)


def _first_line(text: str) -> str:
    """The first line of an error, whole up to 1,000 characters (then cut with an ellipsis)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 1000 else line[:999] + "…"


def describe(chosen: dict[str, tuple[str, str]]) -> list[str]:
    """One note per exchange: its tier and why."""
    return [f"exchange of {stage}: {tier} tier ({why})" for stage, (tier, why) in chosen.items()]

