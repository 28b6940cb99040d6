"""Run Croupier's tasks as serverless functions through Lithops (AWS Lambda, IBM Code Engine,
Google Cloud Run, Azure, Kubernetes, Knative, ... or Lithops' localhost backend for tests).

The executor interface is the same as the local one: ``map(tasks)`` runs every task as one
function call and returns the results in order. Tasks move data only through Croupier's storage
layer (any S3-compatible endpoint or the cloud's object store), so Lithops' own storage only
carries the small task metadata. Failed calls are retried alone; input errors are not.

Two-level invocation (Lambada §3): with ``two_level_from`` set and P at least that large, the
driver invokes about sqrt(P) invoker functions, each of which invokes its share of the tasks; the
run report's stages then show when each task was asked for and when it started.

The Lithops configuration is Lithops' own: a dict, a file path, or (None) its usual lookup
(``LITHOPS_CONFIG_FILE``, ``~/.lithops/config``). Its concurrency limit (``max_workers``, or the
localhost ``worker_processes``) and function memory (``runtime_memory``, MB) become the run's
``Config.concurrency``/``max_workers``/``function_memory`` via :meth:`LithopsExecutor.tune`, which
the selector uses as its search range and memory bound.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Sequence

from croupier.compute.base import Executor, Task, TaskResult
from croupier.compute.local import DETERMINISTIC_ERRORS
from croupier.config import Config
from croupier.errors import ConfigError, TaskError

#: Lithops' default function memory when its configuration names none (MB).
DEFAULT_MEMORY_MB = 1769
_BACKENDS: dict[str, Any] = {}


def run_in_function(message: tuple[Any, ...]) -> tuple[Any, ...]:
    """The body of one Lithops function call: run a task, return its reply (never raises)."""
    from croupier.compute.worker import _run_task

    return _run_task(message, None, _BACKENDS)


def invoke_share(lithops_config: Any, messages: list[tuple[Any, ...]]) -> list[tuple[tuple[Any, ...], float, float]]:
    """An invoker function (two-level invocation): call its share of the tasks, return their
    replies with when each was asked for and when it started."""
    import lithops

    fexec = lithops.FunctionExecutor(config=lithops_config)
    futures = fexec.map(run_in_function, [(m,) for m in messages])
    replies = fexec.get_result(futures, throw_except=False)
    return [(reply, f.stats.get("host_submit_tstamp", 0.0), f.stats.get("worker_start_tstamp", 0.0)) for reply, f in zip(replies, futures)]


class LithopsExecutor(Executor):
    """Runs tasks as Lithops function calls."""

    def __init__(self, config: Config, lithops_config: dict[str, Any] | str | None = None, task_attempts: int = 3, two_level_from: int | None = None) -> None:
        try:
            import lithops
        except ImportError as exc:
            raise ConfigError("the Lithops executor needs lithops: pip install 'croupier[lithops]'") from exc
        if isinstance(lithops_config, str):
            from lithops.config import load_yaml_config

            lithops_config = load_yaml_config(lithops_config)
        self.config = config
        self.lithops_config = lithops_config
        self.task_attempts = task_attempts
        self.two_level_from = two_level_from
        self._fexec = lithops.FunctionExecutor(config=lithops_config)
        self.timeline: list[tuple[str, float, float]] = []
        #: invoker functions of the last map (0: the driver invoked every task itself)
        self.last_invokers = 0
        #: causes of the failed calls of the last map (they were retried)
        self.failures: list[str] = []

    # --- the platform's limits -------------------------------------------------------------------
    @property
    def backend(self) -> str:
        return str(self._fexec.config["lithops"].get("backend", "localhost"))

    def limits(self) -> tuple[int, int]:
        """(functions at once, bytes of memory per function) from the Lithops configuration."""
        section = self._fexec.config.get(self.backend, {})
        lithops_section = self._fexec.config.get("lithops", {})
        if self.backend == "localhost":
            workers = int(section.get("worker_processes") or section.get("max_workers") or 1)
        else:
            workers = int(section.get("max_workers") or lithops_section.get("max_workers") or 1000)
        memory_mb = int(section.get("runtime_memory") or lithops_section.get("runtime_memory") or DEFAULT_MEMORY_MB)
        return workers, memory_mb * 2**20

    def tune(self, config: Config) -> Config:
        """``config`` with the platform's concurrency limit and function memory."""
        workers, memory = self.limits()
        return config.with_(concurrency=workers, max_workers=workers, function_memory=memory)

    # --- running -----------------------------------------------------------------------------------
    def map(self, tasks: Sequence[Task], config: Config | None = None, on_done: Callable[[TaskResult], None] | None = None) -> list[TaskResult]:
        if not tasks:
            return []
        task_config = config if config is not None else self.config
        self.last_invokers, self.failures = 0, []
        results: dict[str, TaskResult] = {}
        attempts = dict.fromkeys((t.id for t in tasks), 0)
        todo = list(tasks)
        while todo:
            replies = self._call(todo, task_config)
            retry = []
            for task, (reply, asked, started) in zip(todo, replies):
                attempts[task.id] += 1
                self.timeline.append((task.id, asked, started))
                if isinstance(reply, tuple) and reply and reply[0] == "ok":
                    result = TaskResult.from_reply(reply, attempts=attempts[task.id], started=started, finished=time.time(), requested=asked)
                    results[task.id] = result
                    if on_done is not None:
                        on_done(result)
                    continue
                cause, trace, kind = _failure(reply)
                self.failures.append(f"{task.id}: {cause}")
                if attempts[task.id] < self.task_attempts and kind not in DETERMINISTIC_ERRORS:
                    retry.append(task)
                else:
                    raise TaskError(task.id, f"{cause} (attempt {attempts[task.id]} of {self.task_attempts}, Lithops {self.backend})", trace)
            todo = retry
        return [results[t.id] for t in tasks]

    def _call(self, tasks: Sequence[Task], config: Config) -> list[tuple[Any, float, float]]:
        messages = [(t.id, t.fn, t.args, config) for t in tasks]
        if self.two_level_from and len(tasks) >= self.two_level_from:
            groups = max(2, round(math.sqrt(len(tasks))))
            self.last_invokers = max(self.last_invokers, groups)
            shares = [messages[i::groups] for i in range(groups)]
            futures = self._fexec.map(invoke_share, [(self.lithops_config, share) for share in shares])
            nested = self._fexec.get_result(futures, throw_except=False)
            out: list[tuple[Any, float, float]] = [("error", "", "", "", "")] * len(tasks)  # type: ignore[list-item]
            for g, share_result in enumerate(nested):
                if not isinstance(share_result, list):
                    share_result = [(("error", "", f"invoker function failed: {share_result}", "", "Crash"), 0.0, 0.0)] * len(shares[g])
                for j, item in enumerate(share_result):
                    out[g + j * groups] = item
            return out
        futures = self._fexec.map(run_in_function, [(m,) for m in messages])
        replies = self._fexec.get_result(futures, throw_except=False)
        return [(reply, f.stats.get("host_submit_tstamp", 0.0), f.stats.get("worker_start_tstamp", 0.0)) for reply, f in zip(replies, futures)]

    def close(self) -> None:
        try:
            self._fexec.clean(clean_cloudobjects=True)
        except Exception:  # noqa: BLE001 - cleaning Lithops' own job metadata is best effort
            pass


def _failure(reply: Any) -> tuple[str, str, str]:
    """(cause, traceback, exception type) of a failed call."""
    if isinstance(reply, tuple) and reply and reply[0] == "error":
        return reply[2], reply[3], reply[4]
    return f"the function call failed: {reply!r}", "", "Crash"
