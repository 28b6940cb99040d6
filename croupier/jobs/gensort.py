"""The gensort job: write TeraSort input as N objects, generated in parallel by the workers.

One stage on the DAG runner: each task generates its range of records (record ``i`` depends only
on the seed and ``i``) and writes it as one output part; the ``_SUCCESS`` manifest commits them
(the commit protocol of :mod:`croupier.storage.commit`).
"""

from __future__ import annotations

import math

from croupier.signals import handles_sigterm
from croupier.compute.base import Executor
from croupier.config import Config
from croupier.dag.runner import DagRunner
from croupier.dag.stage import OutputSink, Stage, TaskSource
from croupier.dag.task import GenerateRead
from croupier.errors import ConfigError
from croupier.dag.run import Run
from croupier.ops.records import RECORD_SIZE
from croupier.plan.output import commit_stage
from croupier.report import RunReport
from croupier.storage import parse_location
from croupier.storage.commit import OutputCommit
from croupier.units import format_bytes


@handles_sigterm  # SIGTERM cleans up like Ctrl-C (issue 12, promise 6)
def gensort(
    output_url: str,
    size: int,
    parts: int,
    config: Config,
    seed: int = 0,
    ascii_keys: bool = False,
    overwrite: bool = False,
    executor: Executor | None = None,
) -> RunReport:
    """Generate ``size`` bytes (rounded down to whole records) of gensort data as ``parts`` objects."""
    if parts < 1:
        raise ConfigError(f"parts must be >= 1, got {parts}")
    records = size // RECORD_SIZE
    bounds = [records * i // parts for i in range(parts + 1)]
    output = parse_location(output_url)
    run = Run("gensort", config, executor)
    runner: DagRunner | None = None
    commit: OutputCommit | None = None
    try:
        runner = DagRunner(run, str(run.open_tmp(output)))
        commit = run.begin_output(output, overwrite)
        reads = tuple(GenerateRead(bounds[i], bounds[i + 1] - bounds[i], seed, ascii_keys) for i in range(parts))
        stage = Stage("generate", TaskSource(reads), sink=OutputSink(str(output), "records-gensort", commit.tag), rep="records")
        out = runner.result(stage)
        commit_stage(commit, out, {"job": "gensort", "run_id": run.run_id, "seed": seed, "ascii": ascii_keys})
        run.report.summary.update(records=records, bytes=format_bytes(records * RECORD_SIZE), parts=parts, seed=seed, ascii=ascii_keys)
    except BaseException:
        if runner is not None:
            runner.wait_all()
        if commit is not None:
            commit.abort()
        raise
    finally:
        if runner is not None:
            runner.close()
        report = run.finish()
    return report


def default_parts(size: int, concurrency: int) -> int:
    """Parts for ``size`` bytes: about 128 MB each, at least one per worker."""
    return max(concurrency, math.ceil(size / 128e6), 1)
