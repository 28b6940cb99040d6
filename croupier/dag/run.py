"""One job run on the driver: its id, executor, stores, stages and report.

A run owns a run-scoped prefix for intermediate objects (``<tmp>/<run_id>/``) and deletes it when it
ends, on success and on failure. Every stage's task results are folded into a
:class:`croupier.report.StageReport`; the driver's own requests (listing, manifests, cleanup) are
reported as the stage ``driver``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Sequence

from tqdm import tqdm

from croupier.compute.base import Executor, Task, TaskResult
from croupier.config import Config
from croupier.report import RunReport, StageReport
from croupier.storage import IOStats, Store, open_store


def make_executor(config: Config) -> Executor:
    """The executor ``config.executor`` names: local worker processes, or Lithops."""
    if config.executor == "lithops":
        from croupier.compute.lithops_executor import LithopsExecutor

        return LithopsExecutor(config, config.lithops_config)
    from croupier.compute.local import LocalExecutor

    return LocalExecutor(config)


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus random suffix."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


class Run:
    """Driver-side state of one job run.

    State:
        config:   the run's config
        run_id:   unique id; names the intermediate prefix
        executor: runs the tasks (created here and closed at the end unless given)
        report:   stages so far and the job's summary
        driver_io: requests the driver itself makes
    """

    def __init__(self, job: str, config: Config, executor: Executor | None = None) -> None:
        self.config = config
        self.run_id = new_run_id()
        self.report = RunReport(job, self.run_id)
        self.driver_io = IOStats()
        self._own_executor = executor is None
        if executor is None:
            executor = make_executor(config)
        self.executor = executor
        tune = getattr(executor, "tune", None)
        if tune is not None:  # a serverless platform sets concurrency, max_workers, function memory
            self.config = config = tune(config)
        self._stores: dict[str, Store] = {}
        self._started = time.perf_counter()

    def store(self, url: str) -> Store:
        """A driver-side store for ``url``; its requests count as the ``driver`` stage."""
        if url not in self._stores:
            self._stores[url] = open_store(url, self.config, self.driver_io)
        return self._stores[url]

    def tmp_url(self, output_url: str) -> str:
        """URL of this run's intermediate prefix: ``<tmp or output>/_croupier_tmp/<run_id>``."""
        base = self.config.tmp_url or output_url
        return f"{base.rstrip('/')}/_croupier_tmp/{self.run_id}"

    def stage(self, name: str, tasks: Sequence[Task]) -> list[TaskResult]:
        """Run ``tasks`` as one stage, with a progress bar; record its report."""
        started = time.perf_counter()
        with tqdm(total=len(tasks), desc=f"{self.report.job}: {name}", unit="task", disable=not self._progress(), leave=False) as bar:
            results = self.executor.map(tasks, self.config, on_done=lambda r: bar.update(1))
        self.record(name, results, time.perf_counter() - started)
        return results

    def record(self, name: str, results: Sequence[TaskResult], wall_seconds: float) -> StageReport:
        """Fold the results of one stage's tasks into a stage report and add it to the run's report."""
        report = StageReport(name, tasks=len(results), wall_seconds=wall_seconds)
        for result in results:
            report.io.merge(result.io)
            for channel, stats in result.channels.items():
                if channel == "exchange" or channel.startswith("x:"):
                    report.exchange.merge(stats)
                if channel.startswith("x:"):
                    report.channels.setdefault(channel, IOStats()).merge(stats)
            report.task_seconds += result.seconds
            report.slowest_task_seconds = max(report.slowest_task_seconds, result.seconds)
            report.peak_rss = max(report.peak_rss, result.peak_rss)
            report.retried_tasks += result.attempts > 1
            report.backup_wins += result.backup
            phases = result.value.get("phases") if isinstance(result.value, dict) else None
            for kind, values in (phases or {}).items():
                total = report.phases.setdefault(kind, [0.0, 0.0, 0.0, 0.0])
                for i, v in enumerate(values):
                    total[i] += v
        asked = [r.requested for r in results if r.requested]
        if asked:
            zero = min(asked)
            report.invocations = [(r.task_id, r.requested - zero, r.started - zero) for r in results]
        self.report.stages.append(report)
        return report

    def _progress(self) -> bool:
        if self.config.progress is not None:
            return self.config.progress
        return sys.stderr.isatty() and not os.environ.get("CI")

    def drain(self, timeout: float = 60.0) -> None:
        """Wait (bounded) for task copies still running after their stage ended — Lithops cannot
        stop a losing speculative copy — so that none writes after the run's cleanup."""
        drain = getattr(self.executor, "drain", None)
        if drain is not None:
            drain(timeout)

    def finish(self) -> RunReport:
        """Close the run: add the driver's requests, the wall time, and release resources."""
        driver = StageReport("driver", io=self.driver_io.snapshot())
        if driver.io.kinds:
            self.report.stages.append(driver)
        self.report.wall_seconds = time.perf_counter() - self._started
        self.close()
        return self.report

    def close(self) -> None:
        """Stop the executor (if this run created it) and close driver stores."""
        if self._own_executor:
            self.executor.close()
        for store in self._stores.values():
            store.close()
        self._stores.clear()
