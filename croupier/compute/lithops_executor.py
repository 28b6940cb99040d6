"""Run Croupier's tasks as serverless functions through Lithops (AWS Lambda, IBM Code Engine,
Google Cloud Run, Azure, Kubernetes, Knative, ... or Lithops' localhost backend for tests).

The executor interface is the same as the local one: ``map(tasks)`` runs every task as one
function call and returns the results in order. Tasks move data only through Croupier's storage
layer (any S3-compatible endpoint or the cloud's object store), so Lithops' own storage only
carries the small task metadata. How a batch runs (eager gates, immediate retries, bounded waits,
backup calls for stragglers) is :mod:`croupier.compute.lithops_calls`.

Two-level invocation (Lambada §3): with ``two_level_from`` set and at least that many ungated tasks
in a batch, the driver invokes about sqrt(P) invoker functions, each of which runs its share with
the same loop; gated tasks, retries and backups are invoked by the driver itself. The run report's
stages show when each task was asked for and when it started.

Look-ahead prefetch does not apply: a Lithops call runs exactly one task, so no function knows its
next task; ``Task.inputs`` is ignored.

Configuration
    Lithops' own: a dict, a YAML file path, or (None) its usual lookup (``LITHOPS_CONFIG_FILE``,
    ``.lithops_config``, ``~/.lithops/config``), falling back to its localhost backend. On the
    localhost backend the functions run with this Python interpreter unless ``localhost.runtime``
    says otherwise. An optional ``croupier`` section holds this executor's settings:
    ``start_timeout`` (default 60 s on localhost, 300 s on cloud backends). The concurrency limit
    (``max_workers``, or the localhost ``worker_processes``) and function memory
    (``runtime_memory``, MB) become the run's ``Config.concurrency``/``max_workers``/
    ``function_memory`` via :meth:`LithopsExecutor.tune`, which the selector uses as its search
    range and memory bound.
"""

from __future__ import annotations

import copy
import math
import os
import sys
import threading
import time
from typing import Any, Callable, Sequence

from croupier.compute.base import Executor, Task, TaskResult
from croupier.compute.lithops_calls import (
    DEFAULT_MEMORY_MB,
    Call,
    CallBounds,
    CallLoop,
    CallReport,
    Item,
    Platform,
    send_calls,
)
from croupier.config import Config
from croupier.errors import ConfigError
from croupier.units import parse_duration

__all__ = ["DEFAULT_MEMORY_MB", "LithopsExecutor", "lithops_settings"]

#: How long a call may take to start before it is resubmitted, by default (seconds).
LOCAL_START_TIMEOUT = 60.0
CLOUD_START_TIMEOUT = 300.0
#: How often the localhost backend's monitor looks for finished calls, unless configured (seconds).
LOCAL_MONITORING_INTERVAL = 0.2


def lithops_settings(source: dict[str, Any] | str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Lithops configuration, its ``croupier`` section) from a dict, a YAML file or Lithops' own
    lookup. On the localhost backend the functions run with this interpreter (``sys.executable``,
    where Croupier is importable) unless ``localhost.runtime`` names another; Lithops' log level
    defaults to WARNING (its INFO lines would repeat at every look at the futures)."""
    from lithops.config import load_config

    if isinstance(source, str):
        data = _read_yaml(source)
    elif source is None:
        data = load_config(log=False)
    else:
        data = copy.deepcopy(source)
    own = data.pop("croupier", None) or {}
    common = data["lithops"] = dict(data.get("lithops") or {})
    common.setdefault("log_level", "WARNING")
    if _is_localhost(common):
        local = data["localhost"] = dict(data.get("localhost") or {})
        local.setdefault("runtime", sys.executable)
        common.setdefault("monitoring_interval", LOCAL_MONITORING_INTERVAL)
    return data, own


def _read_yaml(path: str) -> dict[str, Any]:
    import yaml

    file = os.path.expanduser(path)
    try:
        with open(file, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the Lithops configuration {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"the Lithops configuration {path} is not a YAML mapping (sections lithops:, localhost:, aws_lambda:, ...)")
    return data


def _is_localhost(common: dict[str, Any]) -> bool:
    """Whether a Lithops configuration runs on its localhost backend (its default)."""
    backend, mode = common.get("backend"), common.get("mode")
    return backend == "localhost" or (backend is None and mode in (None, "localhost"))


class LithopsExecutor(Executor):
    """Runs tasks as Lithops function calls.

    ``start_timeout`` (seconds): a call not started that long after it was sent is resubmitted;
    None: the Lithops configuration's ``croupier.start_timeout``, else 60 s on the localhost
    backend and 300 s on cloud backends (container cold starts).

    State (what the executor reports beyond the task results):
        failures:     "<call>: <cause>" of the last map's calls that ran and failed (retried unless final)
        resubmitted:  "<call>: <why>" of the last map's calls abandoned because they never started
                      (resubmitted unless the task's attempts were spent)
        backups:      backup calls launched for stragglers, all maps together
        last_invokers: invoker functions of the last map (0: the driver invoked every task itself)
        timeline:     (task id, asked for, started) of every result, all maps together
    """

    def __init__(
        self,
        config: Config,
        lithops_config: dict[str, Any] | str | None = None,
        task_attempts: int = 3,
        two_level_from: int | None = None,
        start_timeout: float | None = None,
    ) -> None:
        try:
            import lithops  # noqa: F401 - fail early with what to install
        except ImportError as exc:
            raise ConfigError("the Lithops executor needs lithops: pip install 'croupier[lithops]'") from exc
        if task_attempts < 1:
            raise ConfigError(f"task_attempts must be at least 1, got {task_attempts}")
        self.config = config
        self.lithops_config, own = lithops_settings(lithops_config)
        self.task_attempts = task_attempts
        self.two_level_from = two_level_from
        self._platform = Platform(self.lithops_config, send=self._send)
        self.start_timeout = self._start_timeout(start_timeout, own)
        self.timeline: list[tuple[str, float, float]] = []
        self.last_invokers = 0
        self.failures: list[str] = []
        self.resubmitted: list[str] = []
        self.backups = 0
        self._orphans: list[Call] = []
        self._lock = threading.Lock()

    def _start_timeout(self, given: float | None, own: dict[str, Any]) -> float:
        if given is not None:
            return float(given)
        if "start_timeout" in own:
            try:
                return parse_duration(own["start_timeout"])
            except ValueError as exc:
                raise ConfigError(f"Lithops configuration, croupier.start_timeout: {exc}") from exc
        return LOCAL_START_TIMEOUT if self.backend == "localhost" else CLOUD_START_TIMEOUT

    # --- the platform's limits -------------------------------------------------------------------
    @property
    def backend(self) -> str:
        """The Lithops compute backend's name ("localhost", "aws_lambda", ...)."""
        return self._platform.backend

    def limits(self) -> tuple[int, int]:
        """(functions at once, bytes of memory per function) from the Lithops configuration."""
        return self._platform.limits()

    def tune(self, config: Config) -> Config:
        """``config`` with the platform's concurrency limit and function memory."""
        workers, memory = self.limits()
        return config.with_(concurrency=workers, max_workers=workers, function_memory=memory)

    # --- running -----------------------------------------------------------------------------------
    def map(self, tasks: Sequence[Task], config: Config | None = None, on_done: Callable[[TaskResult], None] | None = None) -> list[TaskResult]:
        if not tasks:
            return []
        with self._lock:
            report = CallReport()
            bounds = CallBounds(self.start_timeout, self.config.task_timeout, self.task_attempts, self.limits()[0])
            loop = CallLoop(self._platform, bounds, config if config is not None else self.config, report, self._orphans)
            try:
                loop.run(self._items(tasks), on_done)
            except BaseException:
                self._stop_current()
                raise
            finally:
                self.failures, self.resubmitted = report.failures, report.resubmitted
                self.backups += report.backups
            self._platform.clean(loop.finished)
            self._close_idle()
            results = [loop.results[t.id] for t in tasks]
            self.timeline += [(r.task_id, r.requested, r.started) for r in results]
            return results

    def _items(self, tasks: Sequence[Task]) -> list[Item]:
        """One call per task, or (two-level invocation) invoker calls for the ungated tasks."""
        free = [t for t in tasks if t.after is None]
        if not self.two_level_from or len(free) < self.two_level_from:
            self.last_invokers = 0
            return [Item((t,)) for t in tasks]
        groups = max(2, round(math.sqrt(len(free))))
        self.last_invokers = groups
        shares = [Item(tuple(free[g::groups]), invoker=True) for g in range(groups)]
        return shares + [Item((t,)) for t in tasks if t.after is not None]

    def _send(self, fexec: Any, fn: Callable[..., Any], payloads: list[tuple[Any, ...]], timeout: int) -> list[Any]:
        """Submit one Lithops call per payload; return their futures (the seam tests use to make
        a call that never starts: a None future is a call that was not sent)."""
        return send_calls(fexec, fn, payloads, timeout)

    def _close_idle(self) -> None:
        """Stop the Lithops executors retired after a call never started once none of our calls
        runs on them (a stuck one holds threads; stopping it releases them)."""
        closed = {id(f) for f in self._platform.close_idle({id(c.fexec) for c in self._orphans if c.started()})}
        self._orphans[:] = [c for c in self._orphans if id(c.fexec) not in closed]

    def _stop_current(self) -> None:
        """After a failed map: stop the calls still out (the localhost backend kills them; cloud
        backends let them end) and carry on with a fresh Lithops executor."""
        old = self._platform.discard_current()
        self._orphans[:] = [c for c in self._orphans if c.fexec is not old]

    def drain(self, timeout: float = 60.0) -> int:
        """Wait (at most ``timeout`` s) for losing backup copies and abandoned calls that still run;
        return how many still do. Call it before deleting a run's intermediate objects, so that a
        late loser does not write them again."""
        deadline = time.time() + timeout
        while True:
            self._orphans[:] = [c for c in self._orphans if c.started() and not c.ended()]
            if not self._orphans or time.time() >= deadline:
                return len(self._orphans)
            time.sleep(0.1)

    def close(self) -> None:
        """Stop every Lithops executor (and, on localhost, calls still running) and delete
        Lithops' temporary data."""
        self._platform.close()
        self._orphans.clear()
