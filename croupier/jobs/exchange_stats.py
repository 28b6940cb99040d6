"""Proof by counting: run every exchange plan on the same input and compare requests with the formulas.

For each plan (direct, each topology candidate, each with and without write combining) the same
sort runs on the same data; per level the measured PUTs, GETs and ranged GETs of the exchange
(shuffle objects only, not input or output) are set beside the plan's prediction, and the outputs of
all plans must be byte-identical.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from croupier.compute.base import Executor
from croupier.config import Config
from croupier.errors import ValidationError
from croupier.exchange.plan import ExchangePlan, LevelCount, all_plans
from croupier.jobs.common import read_manifest
from croupier.jobs.sort import sort
from croupier.report import RunReport
from croupier.storage import open_store, parse_location


@dataclass(frozen=True)
class LevelMeasure:
    """What one level of a run actually did."""

    level: int
    puts: int
    gets: int
    ranged_gets: int
    bytes_written: int
    bytes_read: int


def stage_names(report: RunReport, plan: ExchangePlan) -> list[str]:
    """The sort stages of ``plan`` (:meth:`ExchangePlan.stages`), as the report names them: map,
    each level's ("reduce level 2" writes level 2; a memory level's group tasks are named
    "reduce level 2 in memory, level 3"), the reducers."""
    names = []
    for stage in plan.stages():
        if stage.reads is None:
            names.append("map")
        elif stage.writes is None:
            names.append("reduce")
        else:
            names.append(f"reduce level {stage.writes + 1}" if stage.memory is None else f"reduce level {stage.memory + 1} in memory, level {stage.writes + 1}")
    return names


def measured_levels(report: RunReport, plan: ExchangePlan) -> list[LevelMeasure]:
    """Exchange requests per level from a sort's report: level i is written by the stage that
    writes it and read by the stage that reads it (a memory level: neither, no requests)."""
    stages = plan.stages()
    reports = [report.stage(name) for name in stage_names(report, plan)]
    writer = {s.writes: r for s, r in zip(stages, reports) if s.writes is not None}
    reader = {s.reads: r for s, r in zip(stages, reports) if s.reads is not None}
    out = []
    for level in range(plan.levels):
        w, r = writer.get(level), reader.get(level)
        if w is None or r is None:  # a memory level
            out.append(LevelMeasure(level, 0, 0, 0, 0, 0))
            continue
        out.append(LevelMeasure(level, puts=w.exchange.requests("PUT"), gets=r.exchange.requests("GET"), ranged_gets=r.exchange.requests("GET_RANGE"), bytes_written=w.exchange.bytes_written, bytes_read=r.exchange.bytes_read))
    return out


def matches(measured: list[LevelMeasure], predicted: list[LevelCount]) -> bool:
    """Whether every level's request counts equal the prediction exactly."""
    return len(measured) == len(predicted) and all(
        (m.puts, m.gets, m.ranged_gets) == (p.puts, p.gets, p.ranged_gets) for m, p in zip(measured, predicted)
    )


def formula(plan: ExchangePlan, count: LevelCount) -> str:
    """The formula behind one level's prediction, spelled out."""
    s, g = plan.level_senders(count.level), count.group
    if not count.objects:
        return f"in memory: {plan.workers // g} task(s) of {g} workers, no requests"
    if plan.combine:
        return f"PUT S={s}; GET_RANGE S*g={s}*{g}"
    return f"PUT=GET S*g={s}*{g}"


@dataclass
class PlanRun:
    """One plan's run: its report, measured levels and output digest."""

    plan: ExchangePlan
    report: RunReport
    levels: list[LevelMeasure]
    digest: str


def output_digest(url: str, config: Config) -> str:
    """SHA-256 over the bytes of the output's parts, in the manifest's order (part names carry
    their run's tag, so they are left out)."""
    store = open_store(url, config)
    manifest = read_manifest(store)
    if manifest is None:
        raise ValidationError(f"{url} has no _SUCCESS manifest: the sort did not commit")
    h = hashlib.sha256()
    for part in manifest["parts"]:
        data = bytes(store.get(part["key"]))
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def run_all(input_url: str, work_url: str, workers: int, config: Config, plans: list[ExchangePlan] | None = None, executor: Executor | None = None) -> list[PlanRun]:
    """Sort ``input_url`` with every plan; raise :class:`ValidationError` if outputs differ."""
    runs = []
    for i, plan in enumerate(plans or all_plans(workers)):
        out = str(parse_location(work_url).child(f"out-{i}"))
        report = sort(input_url, out, workers, config, overwrite=True, executor=executor, plan=plan)
        runs.append(PlanRun(plan, report, measured_levels(report, plan), output_digest(out, config)))
        open_store(out, config).delete_prefix()
    digests = {r.digest for r in runs}
    if len(digests) > 1:
        raise ValidationError("exchange plans produced different outputs: " + ", ".join(f"{r.plan.name}={r.digest[:12]}" for r in runs))
    return runs


def render(runs: list[PlanRun]) -> str:
    """A table: per plan and level, measured requests beside the formula's prediction."""
    lines = [f"{'plan':<22} {'lvl':>3} {'g':>4} {'PUT':>7} {'GET':>7} {'GET_RNG':>7} {'written':>12} {'read':>12} {'obj bytes':>10}  {'predicted':<34} ok"]
    for run in runs:
        data_bytes = int(run.report.summary["shuffle_bytes"])
        for measure, predicted in zip(run.levels, run.plan.counts(data_bytes)):
            ok = (measure.puts, measure.gets, measure.ranged_gets) == (predicted.puts, predicted.gets, predicted.ranged_gets)
            lines.append(
                f"{run.plan.name:<22} {measure.level + 1:>3} {predicted.group:>4} {measure.puts:>7} {measure.gets:>7} {measure.ranged_gets:>7} "
                f"{measure.bytes_written:>12,} {measure.bytes_read:>12,} {predicted.object_bytes:>10,}  {formula(run.plan, predicted):<34} {'yes' if ok else 'NO'}"
            )
        total = run.plan.predicted_requests()
        measured = sum(m.puts + m.gets + m.ranged_gets for m in run.levels)
        lines.append(f"{'':<22} total requests {measured} (predicted {sum(total.values())}); exchange {run.report.summary['shuffle_bytes']:,} B written at level 1; wall {run.report.wall_seconds:.2f} s")
    lines.append(f"outputs byte-identical across {len(runs)} plans: {runs[0].digest[:16]}" if runs else "no plans")
    return "\n".join(lines)
