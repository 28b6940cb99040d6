"""What a finished stage leaves for the stages that read it, and one bound exchange input."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from croupier.dag.binding import Decision
from croupier.dag.stage import ExchangeSink, Stage
from croupier.exchange import move
from croupier.exchange.broadcast import BroadcastPlan
from croupier.exchange.move import Fetch, Written
from croupier.exchange.plan import ExchangePlan
from croupier.units import format_bytes


@dataclass
class StageOutput:
    """What a finished stage left in storage (or returned), and how it ran."""

    stage: Stage
    schema: pl.Schema | None
    tasks: int = 0
    plan: ExchangePlan | BroadcastPlan | None = None  # the plan its producers wrote level 1 with
    early: bool = False  # that plan was bound before they ran (else: fine buckets, bound late)
    written: list[Written] = field(default_factory=list)
    bytes: int = 0
    #: what the rows of its exchange objects take decoded (``bytes`` is what the objects hold)
    data: int = 0
    rows: int = 0
    samples: list[Any] = field(default_factory=list)
    files: list[tuple[str, int, int]] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    inline: dict[int, pl.DataFrame] = field(default_factory=dict)  # task index -> rows it returned instead of writing
    scan: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    bindings: int = 0
    url: str = ""  # where its exchange objects are (slow or fast tier); "" = the run's temporaries
    where: list[str] = field(default_factory=list)  # per sender: the store it wrote to instead ("" = url)
    fell_back: list[str] = field(default_factory=list)  # why senders fell back to the slow tier
    lost: list[str] = field(default_factory=list)  # hybrid rounds the fast tier lost, re-run to the slow tier

    @property
    def prefix(self) -> str:
        """Key prefix of this stage's level-1 objects."""
        return f"{self.stage.name}/"

    def describe(self) -> str:
        scan = f"; row groups read {self.scan['row_groups'] - self.scan['row_groups_pruned']}/{self.scan['row_groups']}" if self.scan.get("row_groups") else ""
        notes = "".join(f"\n      {n}" for n in self.notes)
        out = f"{format_bytes(self.bytes)} out, " if isinstance(self.stage.sink, ExchangeSink) else ""
        return f"{self.stage.describe()}\n      {self.tasks} task(s), {self.rows:,} rows, {out}{self.seconds:.2f} s{scan}{notes}"


@dataclass
class Bound:
    """One exchange input of a consumer stage, bound: the plan and where its last level is."""

    producer: StageOutput
    decision: Decision
    prefix: str  # where levels 2..k go
    written: list[Written]  # what the senders of the last level reported
    last_prefix: str
    done: int = 1  # levels already written (a hybrid exchange's rounds write both of its levels)
    url: str = ""  # the store of the last level, if not the producers' (a hybrid's runs: the slow tier)

    def advance(self, written: list[Written], url: str) -> None:
        """The next level was written (``written`` by its senders, to ``url``, under ``prefix``):
        it is the last now."""
        self.written, self.last_prefix, self.url = written, self.prefix, url

    def fetches(self, consumer: int) -> list[Fetch]:
        plan = self.decision.plan
        return move.fetches_for(plan, plan.levels - 1, consumer, self.written, self.last_prefix, self.urls)

    @property
    def urls(self) -> list[str]:
        """Per sender of the last level: the store it wrote to instead of the exchange's ("" = same);
        only producers (level 1) fall back, so later levels have none."""
        return self.producer.where if self.last_prefix == self.producer.prefix else []


def buckets_of(out: StageOutput) -> int:
    assert isinstance(out.plan, ExchangePlan), f"stage {out.stage.name} did not write a partitioned exchange"
    return out.plan.bucket_count



