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
import random
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

from croupier.compute.orphan import ENVIRONMENT_LOCK, environment_set, sigint_ignored, start_forkserver_quietly
from croupier.compute.base import Executor, Task, TaskResult
from croupier.compute.mainguard import main_module_hidden
from croupier.compute.speculation import choose_backups
from croupier.compute.worker import MEMORY_EXIT_CODE, PRELOAD, worker_environment, worker_main
from croupier.config import Config
from croupier.errors import TaskError
from croupier.units import format_bytes

#: Longest a worker process may take to start (imports) beyond a task's own time limit.
STARTUP_SECONDS = 60.0

#: Exception types raised by tasks that would fail the same way again; never retried. A full fast
#: tier is one: a writer that may spill has already spilled (croupier.dag.task.write), and one that
#: may not (a pipelined hybrid round, eager consumers) is run again by its stage on the slow tier.
#: Polars' errors about the data and the query (a string that does not cast, an integer overflow
#: caught by a strict cast, a missing column) are others: the same rows fail again, and a query
#: ran its failing stage three times before it said so. Storage and memory failures reach a task
#: as Croupier's own errors or as a dead worker, never as these.
DETERMINISTIC_ERRORS = frozenset(
    {"InputError", "ValidationError", "ConfigError", "OutputExistsError", "StoreFullError"}
    | {"InvalidOperationError", "ComputeError", "SchemaError", "ColumnNotFoundError", "SchemaFieldNotFoundError", "StructFieldNotFoundError", "DuplicateError", "ShapeError", "OutOfBoundsError"}
)


@dataclass
class _Worker:
    """One worker process and the task it is running (if any)."""

    wid: int
    process: Any
    conn: Connection
    task: Task | None = None
    attempt: int = 0
    started: float = 0.0
    backup: bool = False
    kill_at: float | None = None
    config: Config | None = None  # the config this worker last received (sent again only on change)
    #: whether the process has said it is ready (imports done); until then a task sent to it
    #: waits, and its time limit starts when the process is ready
    ready: bool = False


@dataclass
class _Stage:
    """Book-keeping of one ``map`` call: what is queued, running, finished and backed up."""

    tasks: Sequence[Task]
    config: Config
    pending: deque[tuple[Task, int]]
    results: dict[str, TaskResult] = field(default_factory=dict)
    first_started: dict[str, float] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)
    backed_up: set[str] = field(default_factory=set)
    reserved: dict[str, int] = field(default_factory=dict)


class LocalExecutor(Executor):
    """Runs tasks in ``config.concurrency`` worker processes on this machine.

    ``kill_rate`` (chaos runs and tests only): that share of tasks has its worker killed at a random
    point of its first attempt, or just before its reply if it finishes first; which starts are
    chosen follows ``seed`` alone. ``kills`` counts the kills, ``backups`` the speculative copies
    and ``retired`` the workers replaced because they kept too much memory (see
    :func:`croupier.compute.worker.settle_memory`).
    """

    def __init__(self, config: Config, task_attempts: int = 3, kill_rate: float = 0.0, seed: int | None = None) -> None:
        self.config = config
        self.task_attempts = task_attempts
        self.kill_rate = kill_rate
        self.kills = 0
        self.backups = 0
        self.retired = 0
        self._rng = random.Random(seed)
        # the fork server imports what every task needs (PRELOAD: Polars, PyArrow, the operators),
        # so each forked worker starts with them; ``import croupier.compute.worker`` alone no
        # longer does, as ``import croupier`` imports the engine only on first use
        mp.get_context("forkserver").set_forkserver_preload(["croupier.compute.worker", *PRELOAD])
        self._threads = max(1, (os.cpu_count() or 1) // config.concurrency)
        # Polars sizes its thread pool, and its allocator and Arrow's read their settings, when
        # they are loaded, and the fork server has loaded them (preloading the workers' modules)
        # before any worker runs: the fork server's environment is the one place to set them
        # (issue 12, promise 6: no fork-server traceback on Ctrl-C). One fork server serves the
        # whole process, so an executor of another thread count than the one that started it
        # (concurrency 2 after concurrency 1: one Polars thread per worker where two were due,
        # or twice the cores) spawns its workers instead, each with its own settings: a cold
        # interpreter that imports Polars, about 0.6 s a worker where a fork takes 0.05 s, paid
        # again by each worker that replaces one (a retired or a dead one).
        with ENVIRONMENT_LOCK:  # another executor's workers may be starting with their settings
            self._environment = worker_environment(os.environ, self._threads)
            self._spawned = not start_forkserver_quietly(self._environment)
        self._workers: list[_Worker] = []
        self._next_wid = 0
        self._lock = threading.RLock()  # one map at a time: runs of one session may share the pool

    def warm_up(self) -> None:
        """Start all ``concurrency`` workers now; they import what tasks need while the driver plans."""
        with self._lock:
            self._ensure_workers(self.config.concurrency)

    def _start_worker(self) -> _Worker:
        # the fork server may have died and been restarted (by multiprocessing) without the settings
        self._spawned = self._spawned or not start_forkserver_quietly(self._environment)
        ctx = mp.get_context("spawn" if self._spawned else "forkserver")
        parent, child = ctx.Pipe(duplex=True)
        wid = self._next_wid
        self._next_wid += 1
        proc = ctx.Process(
            target=worker_main,
            args=(child, wid, self.config.function_memory, self._threads, self._spawned),
            name=f"croupier-fn-{wid}",
            daemon=True,
        )
        with main_module_hidden():  # workers never re-run the user's script (no __main__ guard needed)
            if self._spawned:
                with environment_set(self._environment), sigint_ignored():
                    proc.start()
            else:
                proc.start()
        child.close()
        return _Worker(wid, proc, parent)

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (tests and diagnostics)."""
        with self._lock:
            return [w.process.pid for w in self._workers if w.process.is_alive()]

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
        with self._lock:
            return self._map(tasks, config, on_done)

    def _map(self, tasks: Sequence[Task], config: Config | None, on_done: Callable[[TaskResult], None] | None) -> list[TaskResult]:
        stage = _Stage(tasks, config if config is not None else self.config, deque((t, 1) for t in tasks))
        self._ensure_workers(min(self.config.concurrency, len(tasks)))
        try:
            while len(stage.results) < len(tasks):
                self._dispatch(stage)
                self._speculate(stage)
                for worker, reply in self._collect(self._straggler_poll(stage)):
                    outcome = self._settle(worker, reply, stage)
                    if outcome is not None and on_done is not None:
                        on_done(outcome)
        except BaseException:
            self._abort_running()
            raise
        return [stage.results[t.id] for t in tasks]

    def _start(self, worker: _Worker, task: Task, attempt: int, stage: _Stage, backup: bool = False) -> None:
        worker.task, worker.attempt, worker.started, worker.backup = task, attempt, time.time(), backup
        stage.first_started.setdefault(task.id, worker.started)
        worker.kill_at = None
        if self.kill_rate and attempt == 1 and not backup and self._rng.random() < self.kill_rate:
            typical = statistics.median(stage.durations) if stage.durations else 0.2
            worker.kill_at = worker.started + self._rng.uniform(0.0, typical)
        stage.reserved.pop(task.id, None)
        upcoming = None if backup else self._reserve(worker, stage)
        fresh = worker.config is not stage.config and worker.config != stage.config
        worker.config = stage.config
        config = stage.config if fresh else None  # None: "the same as your last task's"
        worker.conn.send((task.id, task.fn, task.args, config, upcoming.id if upcoming else None, upcoming.inputs if upcoming else ()))

    def _dispatch(self, stage: _Stage) -> None:
        """Hand queued tasks whose gate is open to idle workers: a worker's reserved (prefetched)
        task first, then queue order, leaving tasks reserved by busy workers to them if possible."""
        stage.pending = deque(item for item in stage.pending if item[0].id not in stage.results)  # moot retries
        idle = [w for w in self._workers if w.task is None]
        for worker in list(idle):
            index = next((i for i, (t, _) in enumerate(stage.pending) if stage.reserved.get(t.id) == worker.wid and self._open(t, stage)), None)
            if index is not None:
                self._take(worker, index, stage)
                idle.remove(worker)
        busy = {w.wid for w in self._workers if w.task is not None}
        for worker in idle:
            open_ = [i for i, (t, _) in enumerate(stage.pending) if self._open(t, stage)]
            if not open_:
                break
            free = [i for i in open_ if stage.reserved.get(stage.pending[i][0].id) not in busy]
            self._take(worker, (free or open_)[0], stage)
            busy.add(worker.wid)

    def _take(self, worker: _Worker, index: int, stage: _Stage) -> None:
        task, attempt = stage.pending[index]
        del stage.pending[index]
        self._start(worker, task, attempt, stage)

    def _reserve(self, worker: _Worker, stage: _Stage) -> Task | None:
        """The task this worker will run next, to prefetch its inputs (none near a stage's end,
        where tasks should go to whichever worker is free first)."""
        if not stage.config.prefetch or len(stage.pending) < len(self._workers):
            return None
        for task, _ in stage.pending:
            if task.inputs and task.id not in stage.reserved and self._open(task, stage):
                stage.reserved[task.id] = worker.wid
                return task
        return None

    @staticmethod
    def _open(task: Task, stage: _Stage) -> bool:
        """Whether a gated task may start: enough prerequisites done, none of them queued.

        No deadlock: a gated task never takes a function while a prerequisite waits for one, and a
        prerequisite that fails frees its own function for its retry, which outranks gated tasks.
        """
        if task.after is None:
            return True
        needed, share = task.after
        ids = set(needed)
        if any(t.id in ids for t, _ in stage.pending):
            return False
        return sum(i in stage.results for i in ids) >= share * len(ids)

    def _speculate(self, stage: _Stage) -> None:
        """Launch backup copies of stragglers on idle workers (only when nothing is queued)."""
        policy = stage.config.speculation
        if policy is None or stage.pending:
            return
        idle = [w for w in self._workers if w.task is None]
        if not idle:
            return
        now = time.time()
        running = {w.task.id: now - stage.first_started[w.task.id] for w in self._workers if w.task is not None and not w.backup}
        chosen = choose_backups(policy, len(stage.tasks), stage.durations, running, stage.backed_up, len(idle))
        for task_id, worker in zip(chosen, idle):
            original = next(w for w in self._workers if w.task is not None and w.task.id == task_id)
            stage.backed_up.add(task_id)
            self.backups += 1
            self._start(worker, original.task, original.attempt, stage, backup=True)  # type: ignore[arg-type]

    #: How often a stage that could start a backup copy looks at its running tasks again when no
    #: reply comes: a straggler is found while it straggles, not only when another task ends.
    STRAGGLER_POLL = 0.05

    def _straggler_poll(self, stage: _Stage) -> float | None:
        """The longest wait before looking for stragglers again (None: no backup could start)."""
        if stage.config.speculation is None or stage.pending or all(w.task is not None for w in self._workers):
            return None
        return self.STRAGGLER_POLL

    def _collect(self, poll: float | None = None) -> list[tuple[_Worker, tuple[Any, ...] | None]]:
        """Wait for replies, deaths, time-outs or chaos kills (at most ``poll`` seconds); return
        (worker, reply or None if it died), possibly nothing."""
        busy = [w for w in self._workers if w.task is not None]
        deadline = min(w.started + self._limit(w) for w in busy)
        kills = [w.kill_at for w in busy if w.kill_at is not None]
        wake = min([deadline, *kills, *([time.time() + poll] if poll is not None else [])])
        handles = {w.conn: w for w in busy} | {w.process.sentinel: w for w in busy}
        ready = wait(list(handles), timeout=max(0.0, wake - time.time()) + 0.01)
        out: list[tuple[_Worker, tuple[Any, ...] | None]] = []
        seen: set[int] = set()
        for handle in ready:
            worker = handles[handle]
            if worker.wid in seen:
                continue
            if not worker.ready:  # its first message is "ready", unless it died starting
                message = self._receive(worker)
                if message is not None and message[0] == "ready":
                    worker.ready, worker.started = True, time.time()
                    if worker.process.is_alive():
                        continue
                    message = None  # it said so, then died
                seen.add(worker.wid)
                out.append((worker, message))
                continue
            seen.add(worker.wid)
            if worker.kill_at is not None:  # doomed, and done first: it dies just before it reports
                out.append((worker, self._chaos_kill(worker)))
                continue
            out.append((worker, self._receive(worker)))
        now = time.time()
        for worker in busy:
            if worker.wid in seen:
                continue
            if now - worker.started > self._limit(worker):
                worker.process.kill()
                worker.process.join()
                out.append((worker, ("timeout",)))
            elif worker.kill_at is not None and now >= worker.kill_at:
                out.append((worker, self._chaos_kill(worker)))
        return out

    def _chaos_kill(self, worker: _Worker) -> None:
        """Kill a worker chosen by ``kill_rate``. A chosen task always dies on its first attempt:
        mid-way when ``kill_at`` comes first, else after its work and just before its reply counts
        (its writes done, its result lost), so chaos runs kill the same number of tasks every time."""
        self.kills += 1
        worker.process.kill()
        worker.process.join()
        return None

    def _limit(self, worker: _Worker) -> float:
        """Seconds a worker's task may run: ``task_timeout`` from when the worker was ready; a
        process still starting (a fresh one imports Polars: most of a second on a busy machine)
        has :data:`STARTUP_SECONDS` more, so a slow start is never the task's time out, and a
        start that hangs still ends."""
        return self.config.task_timeout + (0.0 if worker.ready else STARTUP_SECONDS)

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

    def _settle(self, worker: _Worker, reply: tuple[Any, ...] | None, stage: _Stage) -> TaskResult | None:
        """Turn one reply into a result, a retry, or a :class:`TaskError`; stop losing copies."""
        task, attempt, started, backup = worker.task, worker.attempt, worker.started, worker.backup
        assert task is not None
        worker.task, worker.backup, worker.kill_at = None, False, None
        died = reply is None or reply[0] == "timeout"
        if task.id in stage.results:  # the other copy already won
            if died:
                self._replace(worker)
            return None
        if reply is not None and reply[0] == "ok":
            result = TaskResult.from_reply(reply, worker=worker.wid, attempts=attempt, started=started, finished=time.time(), backup=backup)
            stage.results[task.id] = result
            stage.durations.append(result.finished - stage.first_started[task.id])
            self._stop_copies(task.id)
            if len(reply) > 6 and reply[6]:  # it kept more memory than it may: it retires
                self.retired += 1
                worker.process.join(timeout=5)
                if worker.process.is_alive():
                    worker.process.kill()
                    worker.process.join()
                self._replace(worker)
            return result
        if died:
            self._replace(worker)
        if any(w.task is not None and w.task.id == task.id for w in self._workers):
            return None  # another copy is still running: let it finish
        cause, trace, kind = self._failure(worker, reply)
        if attempt < self.task_attempts and kind not in DETERMINISTIC_ERRORS:
            stage.pending.append((task, attempt + 1))
            return None
        raise TaskError(task.id, f"{cause} (attempt {attempt} of {self.task_attempts})", trace)

    def _stop_copies(self, task_id: str) -> None:
        """Kill the workers still running another copy of a finished task."""
        for worker in self._workers:
            if worker.task is not None and worker.task.id == task_id:
                worker.process.kill()
                worker.process.join()
                worker.task, worker.backup, worker.kill_at = None, False, None
                self._replace(worker)

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
        with self._lock:
            self._close()

    def _close(self) -> None:
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
