"""The sort job (TeraSort): ``scan(IN).sort("key")`` written to OUT, through the frame API.

``croupier sort`` and ``croupier.sort()`` build exactly the query a user would write with the lazy
frame API; the physical planner recognises a TeraSort table sorted by its key and runs the TeraSort
plan (:mod:`croupier.plan.terasort`): a probe measures the shuffle volume D (records x 100 bytes)
and samples keys, the selector binds P and the exchange plan from D and the store's profile, a map
stage range-partitions records with numpy, an exchange of any algorithm carries them, and reducers
sort their partitions and write ``part-<i>-<run tag>`` objects, committed by the ``_SUCCESS``
manifest. So the frame API's sort and this job give byte-identical output.
"""

from __future__ import annotations

from typing import Any

from croupier.compute.base import Executor
from croupier.config import Config
from croupier.errors import ConfigError
from croupier.exchange.plan import ExchangePlan
from croupier.ops.formats import FORMATS
from croupier.report import RunReport


def sort(
    input_url: str,
    output_url: str,
    workers: int | None,
    config: Config,
    out_format: str = "gensort",
    overwrite: bool = False,
    seed: int = 0,
    executor: Executor | None = None,
    plan: ExchangePlan | None = None,
    objective: str | None = None,
    budget: float | None = None,
    algorithm: str | None = None,
) -> RunReport:
    """Sort the records under ``input_url`` into P output objects under ``output_url``.

    Late binding: the probe measures D; P and the exchange plan are chosen by the selector, unless
    forced: ``workers`` fixes P (only the algorithm is chosen), ``algorithm`` (e.g. "direct+wc",
    "2-level") fixes the family, ``plan`` fixes both. Any plan gives the same output.
    """
    from croupier.frame.lazy import scan_table

    if workers is not None and workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    if out_format not in FORMATS:
        raise ConfigError(f"output format must be one of {FORMATS}, got {out_format!r}")
    if plan is not None and workers is not None and plan.workers != workers:
        raise ConfigError(f"exchange topology {plan.topology} has {plan.workers} workers, not {workers}")
    forced: dict[str, Any] = {"workers": workers or config.workers, "algorithm": algorithm or config.algorithm}
    if plan is not None:
        forced.update(workers=plan.workers, topology=str(plan.topology), algorithm=plan.family)
    if objective is not None:
        forced["objective"] = objective
    if budget is not None:
        forced["budget"] = budget
    config = config.with_(**forced)
    del seed  # sampling is seeded per task; kept for API compatibility
    query = scan_table(input_url, config).sort("key")
    query._sink(output_url, out_format, None, overwrite, config, executor, job="sort")
    run = query.last_run
    assert run is not None and run.report is not None
    _summarise(run, out_format, config)
    return run.report


def _summarise(run: Any, out_format: str, config: Config) -> None:
    """Records, P, plan, D and predicted beside measured time into the run's summary."""
    report = run.report
    facts = run.compiler.terasort or {}
    report.summary.update(
        records=facts.get("records", 0),
        workers=facts.get("workers"),
        exchange=facts.get("exchange"),
        measured_data_bytes=facts.get("data_bytes", 0),
        shuffle_bytes=sum(s.exchange.bytes_written for s in report.stages if s.name == "map"),
        intermediate_format=config.shuffle_encoding(run.tmp_url) if run.tmp_url else config.intermediate_format,
        output_format=out_format,
        reducers="eager: started once {:.0%} of the mappers finished".format(config.eager_after) if facts.get("eager") else "lazy: started after every mapper finished",
    )
    if run.compiler.decisions and run.compiler.decisions[0].choice is not None:
        choice = run.compiler.decisions[0].choice
        report.summary["selector"] = choice.explain(rows=8).removeprefix("selector: ")
        report.summary["predicted/measured s"] = _compare(choice.best, report)


def _compare(prediction: Any, report: RunReport) -> str:
    """Predicted beside measured seconds per stage of the TeraSort plan."""
    from croupier.jobs.exchange_stats import stage_names

    names = {s.name for s in report.stages}
    physical = stage_names(report, prediction.plan)[-len(prediction.stages) :]  # (the prediction may leave the producers out)

    def measured(name: str) -> float:
        return report.stage(name).wall_seconds if name in names else float("nan")

    rows = [f"{s.name} {s.seconds:.3f}/{measured(name):.3f}" for s, name in zip(prediction.stages, physical)]
    total = sum(measured(name) for name in physical)
    return ", ".join(rows) + f"; exchange {prediction.seconds:.3f}/{total:.3f}"
