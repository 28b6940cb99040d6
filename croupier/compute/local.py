"""Local executor: tasks run in a pool of separate worker processes, like warm serverless functions.

::

    driver ──(pipe: task)──> worker 0 ──> storage
           ──(pipe: task)──> worker 1 ──> storage
           <──(pipe: small metadata | error + traceback)──

The driver keeps at most ``concurrency`` tasks running, one per worker process. It watches each
process: a task that exceeds ``task_timeout`` has its worker killed, a worker that dies (memory
budget, signal) is replaced; either way the task fails with a clear cause. Failed tasks are retried
alone up to ``task_attempts`` times (errors in the input are not retried: they would fail again).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

from croupier.compute.base import Executor, Task, TaskResult
from croupier.compute.worker import MEMORY_EXIT_CODE, worker_main
from croupier.config import Config
from croupier.errors import TaskError
from croupier.storage.stats import IOStats
from croupier.units import format_bytes

#: Exception types raised by tasks that would fail the same way again; never retried.
DETERMINISTIC_ERRORS = frozenset({"InputError", "ValidationError", "ConfigError", "OutputExistsError"})


@dataclass
class _Worker:
    """One worker process and the task it is running (if any)."""

    wid: int
    process: Any
    conn: Connection
    task: Task | None = None
    attempt: int = 0
    started: float = 0.0


class LocalExecutor(Executor):
    """Runs tasks in ``config.concurrency`` worker processes on this machine."""

    def __init__(self, config: Config, task_attempts: int = 3) -> None:
        self.config = config
        self.task_attempts = task_attempts
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(["croupier.compute.worker"])
        self._threads = max(1, (os.cpu_count() or 1) // config.concurrency)
        self._workers: list[_Worker] = []
        self._next_wid = 0

    def _start_worker(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        wid = self._next_wid
        self._next_wid += 1
        proc = self._ctx.Process(
            target=worker_main,
            args=(child, wid, self.config.function_memory, self._threads),
            name=f"croupier-fn-{wid}",
            daemon=True,
        )
        proc.start()
        child.close()
        return _Worker(wid, proc, parent)

    def _ensure_workers(self, n: int) -> None:
        self._workers = [w for w in self._workers if w.process.is_alive()]
        while len(self._workers) < n:
            self._workers.append(self._start_worker())

    def map(
        self,
        tasks: Sequence[Task],
        config: Config | None = None,
        on_done: Callable[[TaskResult], None] | None = None,
    ) -> list[TaskResult]:
        if not tasks:
            return []
        task_config = config if config is not None else self.config
        self._ensure_workers(min(self.config.concurrency, len(tasks)))
        pending: deque[tuple[Task, int]] = deque((t, 1) for t in tasks)
        results: dict[str, TaskResult] = {}
        try:
            while len(results) < len(tasks):
                self._dispatch(pending, task_config)
                for worker, reply in self._collect():
                    outcome = self._settle(worker, reply, pending)
                    if outcome is not None:
                        results[outcome.task_id] = outcome
                        if on_done is not None:
                            on_done(outcome)
        except BaseException:
            self._abort_running()
            raise
        return [results[t.id] for t in tasks]

    def _dispatch(self, pending: deque[tuple[Task, int]], config: Config) -> None:
        """Hand queued tasks to idle workers."""
        for worker in self._workers:
            if not pending:
                return
            if worker.task is None:
                task, attempt = pending.popleft()
                worker.task, worker.attempt, worker.started = task, attempt, time.time()
                worker.conn.send((task.id, task.fn, task.args, config))

    def _collect(self) -> list[tuple[_Worker, tuple[Any, ...] | None]]:
        """Wait for replies, deaths or time-outs; return (worker, reply or None if it died)."""
        busy = [w for w in self._workers if w.task is not None]
        deadline = min(w.started for w in busy) + self.config.task_timeout
        handles = {w.conn: w for w in busy} | {w.process.sentinel: w for w in busy}
        ready = wait(list(handles), timeout=max(0.0, deadline - time.time()) + 0.01)
        out: list[tuple[_Worker, tuple[Any, ...] | None]] = []
        seen: set[int] = set()
        for handle in ready:
            worker = handles[handle]
            if worker.wid in seen:
                continue
            seen.add(worker.wid)
            out.append((worker, self._receive(worker)))
        now = time.time()
        for worker in busy:
            if worker.wid not in seen and now - worker.started > self.config.task_timeout:
                worker.process.kill()
                worker.process.join()
                out.append((worker, ("timeout",)))
        return out

    @staticmethod
    def _receive(worker: _Worker) -> tuple[Any, ...] | None:
        """Read the reply of ``worker``; None if the process died instead."""
        try:
            if worker.conn.poll():
                return worker.conn.recv()
        except (EOFError, OSError):
            pass
        worker.process.join(timeout=5)
        return None

    def _settle(
        self, worker: _Worker, reply: tuple[Any, ...] | None, pending: deque[tuple[Task, int]]
    ) -> TaskResult | None:
        """Turn one reply into a result, a retry, or a :class:`TaskError`."""
        task, attempt, started = worker.task, worker.attempt, worker.started
        assert task is not None
        worker.task = None
        if reply is not None and reply[0] == "ok":
            _, _tid, value, channels, seconds, peak = reply
            io = {name: IOStats.from_dict(stats) for name, stats in channels.items()}
            return TaskResult(task.id, value, io, seconds, peak, worker.wid, attempt, started, time.time())
        cause, trace, kind = self._failure(worker, reply)
        if reply is None or reply[0] == "timeout":
            self._replace(worker)
        if attempt < self.task_attempts and kind not in DETERMINISTIC_ERRORS:
            pending.append((task, attempt + 1))
            return None
        raise TaskError(task.id, f"{cause} (attempt {attempt} of {self.task_attempts})", trace)

    def _failure(self, worker: _Worker, reply: tuple[Any, ...] | None) -> tuple[str, str, str]:
        """Describe why a task failed: (cause, worker traceback, exception type name)."""
        if reply is not None and reply[0] == "error":
            return reply[2], reply[3], reply[4]
        if reply is not None and reply[0] == "timeout":
            return f"exceeded the task time limit of {self.config.task_timeout:.0f}s; raise task_timeout or use more workers", "", "Timeout"
        code = worker.process.exitcode
        if code == MEMORY_EXIT_CODE:
            budget = format_bytes(self.config.function_memory)
            return f"exceeded the function memory budget of {budget}; use more workers or raise function_memory", "", "Memory"
        return f"worker process died (exit code {code})", "", "Crash"

    def _replace(self, worker: _Worker) -> None:
        """Swap a dead or killed worker for a fresh process."""
        worker.conn.close()
        index = self._workers.index(worker)
        self._workers[index] = self._start_worker()

    def _abort_running(self) -> None:
        """Kill workers that are still running tasks (after a failure or Ctrl-C)."""
        for worker in self._workers:
            if worker.task is not None:
                worker.process.kill()
                worker.process.join()
                worker.task = None
        self._workers = [w for w in self._workers if w.process.is_alive()]

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for worker in self._workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()
        self._workers = []
