"""The exchange inputs of a consumer stage: binding each (by the selector), running its levels
2..k, and handing every task its fetch list; and the plan a producer stage writes level 1 with.

::

    consumer stage ──reads──> bind (late | early | broadcast) ──> levels 2..k ──> fetch lists per task
    producer stage ──writes─> level-1 plan: fine buckets (late), the early plan, or one bucket
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable

from croupier.compute.base import Task, TaskResult
from croupier.config import Config
from croupier.dag.batcher import Batcher
from croupier.dag.binding import Binder, Decision, early_kinds, format_for, stage_kinds
from croupier.dag.outputs import Bound, StageOutput, buckets_of
from croupier.dag.run import Run
from croupier.dag.splits import ScanPlanner
from croupier.dag.stage import ExchangeInput, ExchangeSink, HashPartitioning, ScanSource, SinglePartitioning, Stage, TaskSource, UnionSource
from croupier.dag.task import ExchangeRead, ExchangeWrite, ScanRead, TaskSpec, run_level, run_memory_level
from croupier.dag.tiers import Tiers, fast_tier_failure, is_full
from croupier.errors import ConfigError, CroupierError, StorageError
from croupier.exchange import move
from croupier.exchange.hybrid import HybridPlan
from croupier.exchange.levels import LevelsPlan
from croupier.exchange.move import Fetch, Written
from croupier.exchange.plan import ExchangePlan
from croupier.exchange.topology import Topology
from croupier.model.selector import even_workers
from croupier.report import add_counts
from croupier.units import format_bytes


class Exchanges:
    """Exchange binding for one run (see the module docstring).

    State:
        binder:   the selector's decisions (one profile per run)
        scans:    split planning of the run's scans
        predict:  called with a level stage's name once it ran (the model's prediction for the report)
    """

    def __init__(self, run: Run, tmp_url: str, binder: Binder, batcher: Batcher, scans: ScanPlanner, predict: Callable[[str], None], tiers: Tiers | None = None) -> None:
        self.run = run
        self.tiers = tiers
        self.config: Config = run.config
        self.tmp_url = tmp_url
        self.binder = binder
        self.scans = scans
        self._batcher = batcher
        self._predict = predict
        self._lock = threading.Lock()
        self._merged: dict[int, tuple[list[Written], str, str]] = {}  # hybrid producers: their runs
        self._hybrid_workers = 0  # P of the run's hybrid exchanges (the first one's)
        if tiers is not None:  # auto's tier: the selector's search over tier x algorithm x P
            tiers.select = lambda nbytes, senders, options, phases, plan: binder.tiered(nbytes, senders, None, options, phases, plan)
        self.encoding = self.config.shuffle_encoding(tmp_url)

    def format_of(self, rep: str) -> str:
        """The chunk codec of a representation ("records" or "frames")."""
        return format_for(self.encoding, rep)

    def reads(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput) -> tuple[list[Any], list[dict[str, ExchangeRead]]]:
        """Per task: the main read and the side reads."""
        source = stage.source
        partitioned: dict[str, Bound] = {}
        if isinstance(source, ScanSource):
            file_schema = self.scans.file_schema(source)
            splits, counts = self.scans.splits(source.spec)
            out.scan = counts
            mains: list[Any] = [ScanRead(source.spec, s, file_schema, source.filters) for s in splits]
        elif isinstance(source, TaskSource):
            mains = list(source.reads)
        elif isinstance(source, UnionSource):
            producers = [inputs[id(i.stage)] for i in source.inputs]
            mains = [self.forward_read(p, i) for p in producers for i in range(p.tasks)]
        else:
            producer = inputs[id(source.stage)]
            if source.read == "partition":
                partitioned = self.bind_partitioned(stage, inputs, out)
                bound = partitioned[""]
                mains = [self.exchange_read(bound, j) for j in range(bound.decision.workers)]
            elif source.read == "all":
                bound = self.bind_broadcast(producer, 1, out)
                mains = [self.exchange_read(bound, 0)]
            else:
                mains = [self.forward_read(producer, i) for i in range(producer.tasks)]
        n = len(mains)
        sides: list[dict[str, ExchangeRead]] = [{} for _ in range(n)]
        for name, side in stage.sides.items():
            if side.read == "partition":
                bound = partitioned.get(name) or self.missing_partition(stage, name)
            elif side.read == "all":
                bound = self.bind_broadcast(inputs[id(side.stage)], n, out)
            else:
                raise ConfigError(f"stage {stage.name!r}: a side input cannot be read 'forward'")
            for j in range(n):
                read = self.exchange_read(bound, j)
                sides[j][name] = replace(read, shared=True) if side.read == "all" and n > 1 else read
        return mains, sides

    @staticmethod
    def missing_partition(stage: Stage, name: str) -> Bound:
        raise ConfigError(f"stage {stage.name!r}: side {name!r} is read partition-wise but the main input is not")

    def exchange_read(self, bound: Bound, consumer: int) -> ExchangeRead:
        producer = bound.producer
        fmt = self.format_of(producer.stage.rep)
        schema = dict(producer.schema) if producer.schema is not None else None
        sink = producer.stage.sink
        keys = sink.partitioning.keys if isinstance(sink, ExchangeSink) and isinstance(sink.partitioning, HashPartitioning) else ()
        return ExchangeRead(bound.url or self.producers_url(bound), tuple(bound.fetches(consumer)), producer.stage.rep, fmt, schema, self.config.request_timeout, f"x:{producer.stage.name}", partitioned_by=keys)

    def forward_read(self, producer: StageOutput, index: int) -> ExchangeRead:
        fmt = self.format_of(producer.stage.rep)
        schema = dict(producer.schema) if producer.schema is not None else None
        moved = producer.where[index] if index < len(producer.where) else ""  # the sender fell back to the slow tier
        fetch = Fetch(f"{producer.prefix}l0/s{index:05d}", url=moved or None)
        return ExchangeRead(producer.url or self.tmp_url, (fetch,), producer.stage.rep, fmt, schema, self.config.request_timeout, f"x:{producer.stage.name}")

    def bind_partitioned(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput) -> dict[str, Bound]:
        """Bind the main input and the co-partitioned side inputs with one P."""
        assert isinstance(stage.source, ExchangeInput)
        named = {"": inputs[id(stage.source.stage)]}
        named.update({k: inputs[id(v.stage)] for k, v in stage.sides.items() if v.read == "partition"})
        main = named[""]
        total = sum(o.bytes for o in named.values())
        decoded = sum(o.data or o.bytes for o in named.values())  # what the consumers work through
        early = main if main.early else next((o for o in named.values() if o.early), None)  # a hybrid side fixes P too
        if early is not None:
            assert isinstance(early.plan, ExchangePlan)
            template = Decision(early.plan, f"{early.plan.describe()} (bound before the producers ran)")
        elif stage.workers:
            template = self.binder.fixed(stage.workers, main.tasks, buckets_of(main))
        else:
            template = self.binder.late(total, main.tasks, buckets_of(main), phases={"reduce": stage_kinds(stage, self.format_of)}, decoded=decoded)
        bound = {}
        for name, producer in named.items():
            plan = producer.plan if producer.early else ExchangePlan(template.plan.topology, template.plan.combine or isinstance(template.plan, HybridPlan), producer.tasks, buckets_of(producer))
            assert isinstance(plan, ExchangePlan)
            if plan.workers != template.workers:
                raise ConfigError(f"stage {stage.name!r}: inputs partitioned {plan.workers} and {template.workers} ways cannot be joined partition-wise")
            if isinstance(template.plan, LevelsPlan) and not producer.early:  # MinFlow: the template's memory levels
                plan = LevelsPlan(plan.topology, plan.combine, plan.senders, plan.buckets, template.plan.memory)
            bound[name] = self.bound(producer, replace(template, plan=plan))
        self.run_levels(stage, list(bound.values()))
        for b in bound.values():
            out.notes.append(f"reads {b.producer.stage.name}: {format_bytes(b.producer.bytes)} -> {b.decision.how}")
            self.record_exchange(stage, b)
        return bound

    def bind_broadcast(self, producer: StageOutput, consumers: int, out: StageOutput) -> Bound:
        decision = self.binder.broadcast(producer.bytes, producer.tasks, consumers)
        bound = self.bound(producer, decision)
        self.run_levels(out.stage, [bound])
        out.notes.append(f"reads {producer.stage.name}: {decision.how}")
        self.record_exchange(out.stage, bound)
        return bound

    def bound(self, producer: StageOutput, decision: Decision) -> Bound:
        with self._lock:
            producer.bindings += 1
            prefix = f"{producer.prefix}x{producer.bindings}/"
            merged = self._merged.get(id(producer))
        if merged is not None and decision.plan is producer.plan:  # a hybrid exchange: its rounds ran with the producers
            written, runs, url = merged
            return Bound(producer, decision, prefix, list(written), runs, done=decision.plan.levels, url=url)
        return Bound(producer, decision, prefix, list(producer.written), producer.prefix)

    def run_levels(self, stage: Stage, bounds: list[Bound]) -> None:
        """Run levels 2..k of every bound exchange (one batch per level, exchanges side by side); a
        memory level L runs as group tasks that read level L - 1 and write level L + 1 (a batch of
        its own beside the plain level tasks of other exchanges, if any)."""
        deepest = max(b.decision.plan.levels for b in bounds)
        for level in range(1, deepest):
            running = [b for b in bounds if b.done <= level < b.decision.plan.levels]  # (a hybrid's level 2 ran in its rounds)
            if not running:
                continue
            fresh: dict[int, tuple[list[Written], str]] = {}
            for grouped in (False, True):  # (one batch of plain level tasks, one of memory-level group tasks)
                batch = [b for b in running if in_memory(b.decision.plan, level) == grouped]
                if batch:
                    fresh.update(self._level_batch(stage, batch, level, grouped))
            for b in running:
                b.advance(*fresh[id(b)])
                b.done = level + (2 if in_memory(b.decision.plan, level) else 1)

    def _level_batch(self, stage: Stage, bounds: list[Bound], level: int, grouped: bool) -> dict[int, tuple[list[Written], str]]:
        """Run ``level`` (0-based) of every exchange of ``bounds`` as one batch, reading the level
        before from where each bound says it is; return per bound what its senders wrote and the
        store they wrote it to. ``grouped``: ``level`` is a memory level of every bound, run as one
        task per group (:meth:`LevelsPlan.members`) that writes level ``level + 1``; the batch
        is named after the levels its tasks do."""
        label = f"{stage.name} level {level + 1}" + (f" in memory, level {level + 2}" if grouped else "")
        tasks: list[Task] = []
        owners: list[tuple[Bound, list[int]]] = []
        stores: dict[int, str] = {}
        for b in bounds:
            plan = b.decision.plan
            url = stores[id(b)] = self.levels_url(b)
            urls = [u if u != url else "" for u in self.sender_urls(b, level - 1)]  # ("": the task's own store)
            channel = f"x:{b.producer.stage.name}"
            groups = [plan.members(level, t) for t in range(plan.group_count(level))] if grouped else [[w] for w in range(plan.workers)]
            for t, members in enumerate(groups):
                reads = [tuple(move.fetches_for(plan, level - 1, w, b.written, b.last_prefix, urls)) for w in members]
                inputs = tuple(f.as_input(url) for fetches in reads for f in fetches) if self.config.prefetch else ()
                if grouped:
                    args: tuple[Any, ...] = (url, plan, level, t, tuple(reads), self.config.request_timeout, b.prefix, channel)
                    tasks.append(Task(f"{b.producer.stage.name}>{stage.name}-L{level + 1}m-{t}", run_memory_level, args, inputs=inputs))
                else:
                    args = (url, plan, level, members[0], reads[0], self.config.request_timeout, b.prefix, channel)
                    tasks.append(Task(f"{b.producer.stage.name}>{stage.name}-L{level + 1}-{t}", run_level, args, inputs=inputs))
                owners.append((b, members))
        results = self._batcher.map(label, tasks)
        self._predict(label)
        fresh: dict[int, list[Written]] = {}
        for (b, members), result in zip(owners, results):
            slots = fresh.setdefault(id(b), [None] * b.decision.plan.workers)
            written = result.value["written"]
            for i, w in enumerate(members):
                slots[w] = written[i] if grouped else written
        return {id(b): (fresh[id(b)], stores[id(b)]) for b in bounds}

    def producers_url(self, b: Bound) -> str:
        """Where ``b``'s producers wrote level 1 (those that did not spill): their store, or the
        run's temporaries."""
        return b.producer.url or self.tmp_url

    def levels_url(self, b: Bound) -> str:
        """Where ``b``'s exchange writes its levels 2..k: where its producers wrote, unless the
        fast tier was not expected to hold it whole, or some producers spilled to the slow tier
        (the fast tier was full): then the slow tier too."""
        spilling = self.tiers is not None and b.producer.stage.name in self.tiers.spilling
        return self.tmp_url if spilling or b.producer.fell_back else self.producers_url(b)

    def sender_urls(self, b: Bound, level: int) -> list[str]:
        """Per sender of ``level`` (the last one written): the store it wrote to."""
        before = b.url or self.producers_url(b)
        senders = b.decision.plan.level_senders(level)
        return [(b.urls[s] if s < len(b.urls) else "") or before for s in range(senders)]

    def record_exchange(self, consumer: Stage, bound: Bound) -> None:
        """Keep the binding (with the candidates the selector compared) for the run report."""
        decision = bound.decision
        entry: dict[str, Any] = {
            "producer": bound.producer.stage.name,
            "consumer": consumer.name,
            "bytes": bound.producer.bytes,
            "producers": bound.producer.tasks,
            "plan": decision.plan.name,
            "workers": decision.workers,
            "how": decision.how,
            "predicted_requests": decision.plan.predicted_requests(),
        }
        chosen = self.tiers.chosen.get(bound.producer.stage.name) if self.tiers is not None else None
        if chosen is not None:  # which tier its objects went to, and the model's candidates per tier
            entry["tier"], entry["tier_why"] = chosen
        if isinstance(decision.plan, HybridPlan):  # the requests of each tier, as the plan counts them
            entry["predicted_requests_by_tier"] = decision.plan.requests_by_tier()
            entry["rounds"] = decision.plan.rounds
        if decision.choice is not None:
            ranked = decision.choice.ranked(8)
            entry["predicted_seconds"] = decision.choice.best.seconds
            entry["candidates"] = [
                {"plan": c.plan.name, "workers": c.workers, "seconds": round(c.seconds, 4), "low": round(c.low, 4), "high": round(c.high, 4), "cost": c.cost, "dominant": c.dominant().name, "chosen": c is decision.choice.best}
                for c in ranked
            ]
        with self._lock:
            self.run.report.exchanges.append(entry)

    def producer_plan(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput) -> None:
        """The plan this stage's tasks write level 1 with (exchange sinks only)."""
        sink = stage.sink
        if not isinstance(sink, ExchangeSink):
            return
        self.choose_tier(stage, inputs, out)
        n = max(1, out.tasks)
        hybrid = self.tiers.rounds.get(stage.name) if self.tiers is not None else None
        if hybrid is not None:
            out.plan, out.early = self.hybrid_plan(stage, inputs, out, hybrid.per_round, hybrid.round_bytes, hybrid.workers, hybrid.pipelined), True
            out.notes.append(f"writes: {out.plan.describe()}")
            return
        if sink.plan is not None:
            out.plan, out.early = replace(sink.plan, senders=n), True
            return
        if isinstance(sink.partitioning, SinglePartitioning):
            out.plan = ExchangePlan(Topology((1,)), True, n, 1)
            return
        if self.binder.binds_early(sink):
            estimate = self.input_bytes(stage, inputs, out)
            decision = self.binder.early(estimate, n, "estimated from the stage's input (a plain algorithm needs P before its producers write)", early_kinds(stage, self.format_of))
            out.plan, out.early = decision.plan, True
            out.notes.append(f"writes: {decision.how}")
            return
        buckets = self.binder.fine_buckets()
        out.plan = ExchangePlan(Topology((buckets,)), True, n, buckets)

    def hybrid_plan(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput, per_round: int, round_bytes: int, chosen: int = 0, pipelined: bool = False) -> HybridPlan:
        """The hybrid plan of this producer stage: P bound now (a fixed plan's, the forced one,
        the one the tier search ``chosen``, or the selector's for the estimated bytes), B as the
        plan would have had; ``pipelined`` as the tier choice says."""
        sink = stage.sink
        assert isinstance(sink, ExchangeSink)
        n = max(1, out.tasks)
        if sink.plan is not None:  # TeraSort: P and the splitters are fixed
            workers, buckets = sink.plan.workers, sink.plan.bucket_count
        else:
            buckets = self.binder.fine_buckets()
            kinds = early_kinds(stage, self.format_of)
            with self._lock:  # one P for every hybrid exchange of the run: a join's hybrid sides must agree
                workers = self.config.workers or self._hybrid_workers or chosen or self.binder.early(self.input_bytes(stage, inputs, out), n, "estimated from the stage's input (a hybrid exchange binds P before its producers write)", kinds).workers
                workers = self._hybrid_workers = even_workers(min(workers, buckets), buckets)
        return HybridPlan.build(workers, n, per_round, buckets if buckets != workers else None, round_bytes, pipelined)

    def run_producers(self, stage: Stage, out: StageOutput, tasks: list[Task]) -> list[TaskResult]:
        """Run a stage's tasks (the runner's hook). A hybrid exchange's producers run round by
        round: each round's producers write to the fast tier, its P combiners read them and write
        their runs to the slow tier, and the round's fast objects are deleted before the next. A
        pipelined hybrid runs each round's combiners beside its producers (one executor call; they
        start once ``config.eager_after`` of the producers finished and poll for the objects still
        being written). A round the fast tier loses runs again through the slow tier, unpipelined."""
        plan = out.plan
        if not tasks:
            return []
        if not isinstance(plan, HybridPlan):
            return self._round(stage.name, tasks)
        assert self.tiers is not None
        fast, slow = self.tiers.fast(), self.tmp_url
        runs = f"{out.prefix}runs/"
        results: list[TaskResult] = []
        written: list[Written] = [None] * plan.producers
        where: list[str] = [""] * plan.producers
        merged: list[Written] = [None] * plan.level_senders(1)
        dead = ""  # why the fast tier failed for good (a pipelined round's producers cannot spill)
        for j in range(plan.rounds):
            producers = plan.round_producers(j)
            round_tasks = tasks[producers.start : producers.stop]
            if dead:  # trying the dead server again would wait out its time-outs every round
                got = self._on_slow(stage, plan, j, round_tasks, written, where, runs, merged)
                out.lost.append(f"round {j + 1}: not tried on the fast tier ({dead}, in an earlier round); its {len(producers)} producer(s) wrote to the slow tier")
                results += got
                continue
            if not plan.pipelined:  # its producers spill to the slow tier one by one: a failure here is not the fast tier's
                got = self._round(f"{stage.name} round {j + 1}/{plan.rounds}", round_tasks)
            try:
                if plan.pipelined:
                    got = self._pipelined_round(stage, plan, j, round_tasks, fast, runs, merged)
                for s, result in zip(producers, got):
                    written[s], where[s] = result.value["written"], result.value.get("url", "")
                if not plan.pipelined:
                    self._combine(stage, plan, j, written, [w or fast for w in where], runs, merged, "")
            except CroupierError as exc:  # the fast tier lost the round: re-run its producers (only those) to the slow tier
                reason = fast_tier_failure(exc, self.config)
                if reason is None:
                    raise
                if is_full(reason):  # a full tier (alive) may take the next round: free what this one wrote there
                    self._free(fast, [out.prefix + key for key in plan.round_keys(j)])
                elif plan.pipelined:  # gone: its objects with it, and the later rounds skip it
                    dead = reason
                got = self._on_slow(stage, plan, j, round_tasks, written, where, runs, merged)
                out.lost.append(f"round {j + 1}: {reason}; its {len(producers)} producer(s) ran again, writing to the slow tier")
            results += got
            if not dead:  # the fast tier holds one round at most
                self._free(fast, [out.prefix + o.key for s in producers if not where[s] for o in plan.writes(0, s)])
        with self._lock:
            self._merged[id(out)] = (merged, runs, slow)
        return results

    def _on_slow(self, stage: Stage, plan: HybridPlan, j: int, round_tasks: list[Task], written: list[Written], where: list[str], runs: str, merged: list[Written]) -> list[TaskResult]:
        """Round ``j`` (again) through the slow tier alone: its producers write there, its
        combiners read there; return the producers' results."""
        slow = self.tmp_url
        got = self._round(f"{stage.name} round {j + 1}/{plan.rounds} again", [_to_slow(t, slow) for t in round_tasks])
        for s, result in zip(plan.round_producers(j), got):
            written[s], where[s] = result.value["written"], slow
        self._combine(stage, plan, j, written, where, runs, merged, " again")
        return got

    def _pipelined_round(self, stage: Stage, plan: HybridPlan, j: int, producers: list[Task], fast: str, runs: str, merged: list[Written]) -> list[TaskResult]:
        """Round ``j`` of a pipelined hybrid: its producers and its P combiners in one executor
        call, the combiners gated on ``config.eager_after`` of the producers and polling (up to the
        task time limit) for the plain objects still being written (their names need no producer's
        metadata); return the producers' results."""
        gate = (tuple(t.id for t in producers), self.config.eager_after)
        combine = self._combiner_tasks(stage, plan, j, [None] * plan.producers, [fast] * plan.producers, runs, "", self.config.task_timeout, gate)
        label = f"{stage.name} round {j + 1}/{plan.rounds}"
        got, combined = self._batcher.map_many([(label, producers), (f"{stage.name} combine {j + 1}/{plan.rounds}", combine)])
        self._predict(label, f"{stage.name} combine {j + 1}/{plan.rounds}")
        _keep_runs(plan, j, combined, merged)
        return got

    def _round(self, label: str, tasks: list[Task]) -> list[TaskResult]:
        """Run ``tasks`` as one executor call reported as ``label``, and predict it beside what it measured."""
        results = self._batcher.map(label, tasks)
        self._predict(label)
        return results

    def _free(self, url: str, keys: list[str]) -> None:
        """Delete fast-tier objects the next step has read. A failure is left to the run's
        cleanup, which tries again and reports it (a dead fast tier lost them anyway)."""
        try:
            self.run.store(url).delete(keys)
        except StorageError:
            pass

    def _combine(self, stage: Stage, plan: HybridPlan, j: int, written: list[Written], urls: list[str], runs: str, merged: list[Written], again: str) -> None:
        """Round ``j``'s P combiners: each reads its partition of the round's producers (from
        ``urls``: the fast tier, or the slow one for producers that spilled) and writes its run to
        the slow tier under ``runs``."""
        combine = self._combiner_tasks(stage, plan, j, written, urls, runs, again, self.config.request_timeout)
        _keep_runs(plan, j, self._round(f"{stage.name} combine {j + 1}/{plan.rounds}{again}", combine), merged)

    def _combiner_tasks(self, stage: Stage, plan: HybridPlan, j: int, written: list[Written], urls: list[str], runs: str, again: str, wait: float, gate: tuple[tuple[str, ...], float] | None = None) -> list[Task]:
        """Round ``j``'s combiner tasks (see :meth:`_combine`); ``wait``: how long a fetch polls for
        an object not written yet; ``gate``: the producers they start after (pipelined rounds,
        which prefetch nothing: their objects may not exist yet)."""
        slow = self.tmp_url
        combine: list[Task] = []
        for c in plan.round_combiners(j):
            fetches = tuple(move.fetches_for(plan, 0, c, written, f"{stage.name}/", urls))
            inputs = tuple(f.as_input(slow) for f in fetches) if self.config.prefetch and gate is None else ()
            args = (slow, plan, 1, c, fetches, wait, runs, f"x:{stage.name}")
            combine.append(Task(f"{stage.name}-C{j + 1}{again.strip()[:1]}-{c % plan.workers}", run_level, args, after=gate, inputs=inputs))
        return combine

    def choose_tier(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput) -> None:
        """Where this stage's exchange objects go (the slow or the fast tier, or rounds through the
        fast tier to the slow one; see dag/tiers.py)."""
        if self.tiers is None:
            return
        sink = stage.sink
        sized = self.config.tier in ("auto", "hybrid") and self.config.fast_tier is not None
        estimate = self.input_bytes(stage, inputs, out) if sized else None
        assert isinstance(sink, ExchangeSink)
        # a plan fixed before the stage runs (TeraSort's, a range sort's, a join probe side's): the one
        # priced; not a hybrid's (a probe side of a hybrid build): its tier is this search's to choose
        fixed = sink.plan if not isinstance(sink.plan, HybridPlan) else None
        out.url = self.tiers.url_for(stage.name, estimate, max(1, out.tasks), sink.in_rounds, early_kinds(stage, self.format_of) if sized else None, sink.spills, fixed)
        tier, why = self.tiers.chosen[stage.name]
        if self.config.fast_tier is not None:
            out.notes.append(f"exchange objects on the {tier} tier ({why})")

    def input_bytes(self, stage: Stage, inputs: dict[int, StageOutput], out: StageOutput) -> int:
        """Bytes a stage reads: scan bytes needed, or its inputs' exchange bytes."""
        if isinstance(stage.source, TaskSource) and stage.source.bytes is not None:
            return stage.source.bytes
        if isinstance(stage.source, ScanSource):
            return self.scans.scan_bytes(stage.source.spec)
        return sum(o.bytes for o in inputs.values())

    def measure_exchanges(self) -> None:
        """Fill in ``measured_requests`` of every exchange of the report (by its channel), and
        ``missed_requests``: reads of objects not written yet (readers that start before their
        producers finished poll: eager consumers, pipelined hybrid combiners), which the plans'
        formulas leave out and a store may bill."""
        totals: dict[str, dict[str, int]] = {}
        misses: dict[str, int] = {}
        for stage in self.run.report.stages:
            for channel, stats in stage.channels.items():
                got = totals.setdefault(channel, {})
                for kind in ("PUT", "GET", "GET_RANGE"):
                    got[kind] = got.get(kind, 0) + stats.requests(kind)
                misses[channel] = misses.get(channel, 0) + stats.misses("GET") + stats.misses("GET_RANGE")
        cached: dict[str, dict[str, int]] = {}
        for stage in self.run.report.stages:
            add_counts(cached, stage.cached)
        for entry in self.run.report.exchanges:
            entry["measured_requests"] = totals.get(f"x:{entry['producer']}", {"PUT": 0, "GET": 0, "GET_RANGE": 0})
            if cached.get(f"x:{entry['producer']}"):  # reads a worker served from rows it kept (broadcast sides)
                entry["cached_requests"] = cached[f"x:{entry['producer']}"]
            if misses.get(f"x:{entry['producer']}"):
                entry["missed_requests"] = misses[f"x:{entry['producer']}"]


def _keep_runs(plan: HybridPlan, j: int, combined: list[TaskResult], merged: list[Written]) -> None:
    """Note what round ``j``'s combiners wrote (their runs), by level-2 sender."""
    for c, result in zip(plan.round_combiners(j), combined):
        merged[c] = result.value["written"]


def _to_slow(task: Task, slow: str) -> Task:
    """A producer task again, writing its exchange objects straight to the slow tier ``slow``."""
    (spec,) = task.args
    assert isinstance(spec, TaskSpec) and isinstance(spec.write, ExchangeWrite)
    return replace(task, id=f"{task.id}-again", args=(replace(spec, write=replace(spec.write, url=slow, fallback="")),))


def in_memory(plan: Any, level: int) -> bool:
    """Whether ``level`` (0-based) of ``plan`` is a memory level (MinFlow)."""
    return isinstance(plan, LevelsPlan) and level in plan.memory
