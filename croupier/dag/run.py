"""One job run on the driver: its id, executor, stores, stages and report.

A run owns a run-scoped prefix for intermediate objects (``<tmp base>/_croupier_tmp/<run_id>/``,
opened by :meth:`Run.open_tmp` with its lease, see :mod:`croupier.storage.lease`) and deletes it
when it ends, on success and on failure. An output is written through :meth:`Run.begin_output`
(the commit protocol of :mod:`croupier.storage.commit`); the run's lease keeper renews the
temporaries' lease and the output's writer lock while it lives. Every stage's task results are
folded into a :class:`croupier.report.StageReport`; the driver's own requests (listing, manifests,
cleanup) are reported as the stage ``driver``, lease renewals as the stage ``lease``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
import weakref
from typing import Sequence

from tqdm import tqdm

from croupier.compute.base import Executor, Task, TaskResult
from croupier.compute.session import current_session, new_executor
from croupier.config import Config
from croupier.errors import ConfigError, StorageError
from croupier.report import PHASE_FIELDS, RunReport, StageReport, add_counts
from croupier.storage import IOStats, Store, open_store
from croupier.storage.commit import OutputCommit
from croupier.storage.lease import TMP_FOLDER, LeaseKeeper, RunTemp
from croupier.storage.location import Location, parse_location


#: Runs of this process that have not finished (the profile learner refits between them), and
#: when (time.monotonic()) the last one finished.
_ACTIVE = 0
_LAST_END = -float("inf")
_ACTIVE_LOCK = threading.Lock()


def active_runs() -> int:
    """How many runs of this process are under way (see :class:`croupier.dag.profiles.Learner`)."""
    return _ACTIVE


def idle_seconds() -> float:
    """Seconds since the process's last run finished; 0 while one is under way."""
    with _ACTIVE_LOCK:
        return 0.0 if _ACTIVE else time.monotonic() - _LAST_END


def _count_run(delta: int) -> None:
    global _ACTIVE, _LAST_END
    with _ACTIVE_LOCK:
        _ACTIVE += delta
        if not _ACTIVE:
            _LAST_END = time.monotonic()


def make_executor(config: Config) -> Executor:
    """A new executor of the kind ``config.executor`` names (the caller closes it)."""
    return new_executor(config)


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus random suffix."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


class Run:
    """Driver-side state of one job run.

    State:
        config:   the run's config
        run_id:   unique id; names the intermediate prefix
        executor: runs the tasks: the one given, else the current session's (croupier.compute.session)
        report:   stages so far and the job's summary
        driver_io: requests the driver itself makes
        lease_io: requests of lease renewals (their number depends on how long the run takes)
        keeper:   the thread renewing the run's leases
    """

    def __init__(self, job: str, config: Config, executor: Executor | None = None) -> None:
        self.config = config
        self.run_id = new_run_id()
        self.report = RunReport(job, self.run_id)
        self.driver_io = IOStats()
        self._own_executor = False  # given, or the current session's (kept warm for the next run)
        if executor is None:
            executor = current_session().executor(config)
        self.executor = executor
        tune = getattr(executor, "tune", None)
        if tune is not None:  # a serverless platform sets concurrency, max_workers, function memory
            self.config = config = tune(config)
        self._stores: dict[str, Store] = {}
        self._started = time.perf_counter()
        self.lease_io = IOStats()
        self.keeper = LeaseKeeper(self.config.lease / 3)
        self._temps: list[RunTemp] = []
        self._volatile: set[int] = set()  # ids of temps on volatile stores (see open_tmp)
        _count_run(+1)  # among the active runs until closed (or dropped unclosed)
        self._uncount = weakref.finalize(self, _count_run, -1)

    def store(self, url: str | Location) -> Store:
        """A driver-side store for ``url``; its requests count as the ``driver`` stage."""
        key = str(parse_location(url))
        if key not in self._stores:
            self._stores[key] = open_store(key, self.config, self.driver_io)
        return self._stores[key]

    def open_tmp(self, base: str | Location | None, explicit: bool = False, volatile: bool = False) -> Location:
        """Open this run's temporary prefix ``<base>/_croupier_tmp/<run_id>``: write its lease
        first, keep it renewed; :meth:`finish` deletes it (the lease last). ``config.tmp_url``
        wins over ``base`` unless ``explicit``. ``volatile``: a store whose objects die with its
        server (a Redis fast tier without persistence): failing to delete them is reported in
        ``report.summary["cleanup"]``, not raised."""
        root = base if explicit and base is not None else self.config.tmp_url or base
        if root is None:
            raise ConfigError("this run needs a place for intermediate objects: pass one or set tmp_url (--tmp)")
        tmp_base = parse_location(root)
        key = f"{TMP_FOLDER}/{self.run_id}"
        # the store is rooted at the base, so that deleting the run's objects removes its folders
        temp = RunTemp(self.store(tmp_base).sub(key), self.run_id, self.config.lease)
        temp.open()
        self._temps.append(temp)
        if volatile:
            self._volatile.add(id(temp))
        renewals = self._lease_store(tmp_base).sub(key)
        self.keeper.add(lambda: temp.renew(renewals))
        return tmp_base.join(key)

    def begin_output(self, output: str | Location, overwrite: bool) -> OutputCommit:
        """Start writing the output at ``output``: take its writer lock and check it may be
        written (see :class:`OutputCommit`); the lock is renewed while the run lives."""
        commit = OutputCommit(self.store(output), self.run_id, overwrite, self.config.lease)
        commit.begin()
        renewals = self._lease_store(output)
        self.keeper.add(lambda: commit.renew(renewals))
        return commit

    def _lease_store(self, url: str | Location) -> Store:
        """A store for lease renewals at ``url``: counted apart (``lease_io``), closed with the run."""
        store = open_store(url, self.config, self.lease_io)
        self._stores[f"lease:{url}"] = store
        return store

    def progress_bar(self, name: str, tasks: int) -> tqdm:  # type: ignore[type-arg]
        """A progress bar of ``tasks`` tasks for stage(s) ``name`` (off when not on a terminal)."""
        return tqdm(total=tasks, desc=f"{self.report.job}: {name}", unit="task", disable=not self._progress(), leave=False)

    def stage(self, name: str, tasks: Sequence[Task]) -> list[TaskResult]:
        """Run ``tasks`` as one stage, with a progress bar; record its report."""
        started = time.perf_counter()
        with self.progress_bar(name, len(tasks)) as bar:
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
            add_counts(report.cached, result.value.get("cached", {}) if isinstance(result.value, dict) else {})
            if result.started and result.finished:
                report.timeline.append([result.task_id, result.worker, result.started, result.finished, {k: v[1] for k, v in (phases or {}).items()}])
            for kind, values in (phases or {}).items():
                total = report.phases.setdefault(kind, [0.0] * PHASE_FIELDS)
                for i, v in enumerate(values[:PHASE_FIELDS]):
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
        """Close the run: delete its temporaries (the lease last), add the driver's requests,
        the wall time, and release resources (also when deleting fails)."""
        self.keeper.stop()
        try:
            while self._temps:
                temp = self._temps[-1]
                try:
                    temp.remove()
                except StorageError as exc:
                    if id(temp) not in self._volatile:
                        raise
                    self.report.summary.setdefault("cleanup", []).append(
                        f"could not delete the run's objects on {temp.store.url}: {str(exc).splitlines()[0]}; "
                        "they die with the server, or `croupier clean` removes them once the lease expires"
                    )
                self._temps.pop()
        finally:
            driver = StageReport("driver", io=self.driver_io.snapshot())
            if driver.io.kinds:
                self.report.stages.append(driver)
            if self.lease_io.kinds:
                self.report.stages.append(StageReport("lease", io=self.lease_io.snapshot()))
            self.report.wall_seconds = time.perf_counter() - self._started
            self.close()
        return self.report

    def close(self) -> None:
        """Stop the lease keeper and the executor (if this run created it); close driver stores."""
        self._uncount()  # once: a finalizer runs at most once
        self.keeper.stop()
        if self._own_executor:
            self.executor.close()
        for store in self._stores.values():
            store.close()
        self._stores.clear()
