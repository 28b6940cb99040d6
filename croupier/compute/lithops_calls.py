"""Run a batch of tasks as Lithops calls: eager gates, immediate retries, bounded waits, backups.

One :class:`CallLoop` runs one ``map`` call of :class:`croupier.compute.lithops_executor.LithopsExecutor`
(and, with two-level invocation, each invoker function's share of the tasks):

::

    queue ──(gate open, function free)──> call ──(finished)──> result
      ^                                    │ failed: retried at the head of the queue, at once
      │                                    │ not started within start_timeout: resubmitted, on a
      └────────────────────────────────────┤   fresh Lithops executor (the old one may be stuck)
                                           │ running past the time limit: failed, retried
                                           └ straggler (speculation policy): a backup call; the
                                             first result wins, the loser's is ignored

Waiting
    Every wait is a look at the futures' states (the Lithops monitor thread keeps them current;
    ``FunctionExecutor.wait(..., return_when=ALWAYS)`` downloads what has arrived and returns at
    once) followed by a short sleep, and the loop bounds how long a call may take to start and to
    run. Lithops' own ``wait(timeout=...)`` is not used: it arms SIGALRM, which only the main thread
    may do (Croupier's stages call ``map`` from their own threads), and on time-out it marks every
    future it waited on as failed. ``get_result`` is not used either: on the localhost backend
    (version 2) its clean-up stops the worker threads, and a ``map`` right after can find the job
    manager still alive and never restart them (the job never starts).

Functions
    At most ``slots`` calls are out at once (the platform's concurrency limit). A call then starts
    at once unless something is wrong, which is what makes the start bound meaningful, and Lithops
    never queues a gated task ahead of a prerequisite's retry. Losing backup copies and abandoned
    calls that are still running keep their function busy (most backends cannot stop one call),
    so they count against the slots until they end or outlive the time limit.
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from croupier.compute.base import Task, TaskResult
from croupier.compute.local import DETERMINISTIC_ERRORS
from croupier.compute.speculation import choose_backups
from croupier.config import Config
from croupier.errors import ConfigError, TaskError

#: (Lithops executor, function, one argument tuple per call, time limit in s) -> one future per
#: call (None: the call was not sent; see ``LithopsExecutor._send``).
Send = Callable[[Any, Callable[..., Any], list[tuple[Any, ...]], int], list[Any]]

#: Lithops' default function memory when its configuration names none (MB).
DEFAULT_MEMORY_MB = 1769

_BACKENDS: dict[str, Any] = {}


# --- what runs inside the functions -----------------------------------------------------------------
def run_in_function(message: tuple[Any, ...]) -> tuple[Any, ...]:
    """The body of one Lithops function call: run a task, return its reply (never raises)."""
    from croupier.compute.worker import _run_task

    return _run_task(message, None, _BACKENDS)


@dataclass(frozen=True)
class ShareFailure:
    """A task of an invoker's share that failed for good (its retries are spent)."""

    task_id: str
    cause: str
    trace: str
    kind: str


def invoke_share(settings: dict[str, Any], bounds: CallBounds, tasks: tuple[Task, ...], config: Config) -> list[TaskResult | ShareFailure]:
    """An invoker function (two-level invocation): run its share of the tasks with the same loop
    (bounded waits, immediate retries, backups) and return one outcome per task, in order."""
    platform = Platform(settings)
    bounds = replace(bounds, slots=platform.limits()[0])
    loop = CallLoop(platform, bounds, config, CallReport(), raise_failures=False)
    try:
        loop.run([Item((t,)) for t in tasks])
    finally:
        platform.close()
    return [loop.results.get(t.id) or ShareFailure(t.id, *loop.failed[t.id]) for t in tasks]


# --- the driver side --------------------------------------------------------------------------------
@dataclass(frozen=True)
class CallBounds:
    """How long a call may take to start, how often a call is tried, how the loop waits.

    start_timeout: a call not started this many seconds after it was sent is resubmitted
    task_timeout:  a task's time limit once started (Lithops' own limit, plus ``grace``)
    attempts:      calls per task (failures and resubmissions together)
    slots:         calls out at once (the platform's concurrency limit)
    poll:          seconds between two looks at the futures when nothing happened
    grace:         seconds past ``task_timeout`` before the loop gives up on a running call,
                   so that the platform's own time-out, with its message, usually comes first
    """

    start_timeout: float
    task_timeout: float
    attempts: int = 3
    slots: int = 1
    poll: float = 0.05
    grace: float = 30.0

    def __post_init__(self) -> None:
        if self.start_timeout <= 0 or self.task_timeout <= 0 or self.attempts < 1 or self.slots < 1:
            raise ConfigError(f"Lithops call bounds need positive time limits, attempts and slots, got {self}")

    def time_limit(self, item: Item) -> float:
        """Seconds a started call of ``item`` may run (an invoker runs its share, retries included)."""
        if item.invoker:
            return self.attempts * (self.task_timeout + self.start_timeout)
        return self.task_timeout


@dataclass(frozen=True)
class Item:
    """What one Lithops call runs: one task, or (two-level invocation) an invoker's share."""

    tasks: tuple[Task, ...]
    attempt: int = 1
    invoker: bool = False
    backup: bool = False

    @property
    def task(self) -> Task:
        """The task of a one-task call."""
        return self.tasks[0]

    def label(self) -> str:
        """How errors and reports name the call."""
        if self.invoker:
            return f"invoker of {len(self.tasks)} tasks ({self.tasks[0].id}, ...)"
        return self.task.id + (" (backup copy)" if self.backup else "")


@dataclass
class Call:
    """One submitted Lithops call and what the loop saw of it (driver clock, ``time.time()``)."""

    item: Item
    fexec: Any
    future: Any | None
    sent: float
    running_since: float | None = None

    def started(self) -> bool:
        """Whether the function has started (or already ended)."""
        f = self.future
        return f is not None and bool(f.running or f.ready or f.success or f.done)

    def ended(self) -> bool:
        """Whether the function has ended (its result may not be downloaded yet)."""
        f = self.future
        return f is not None and bool(f.ready or f.success or f.done)

    def look(self, now: float) -> None:
        """Note when the call was first seen running."""
        if self.running_since is None and self.started():
            self.running_since = now


@dataclass
class CallReport:
    """What the executor reports beyond the task results (see ``LithopsExecutor``).

    failures:    "<call>: <cause>" of every call that ran and failed (retried unless final)
    resubmitted: "<call>: <why>" of every call abandoned because it never started (resubmitted
                 unless its attempts were spent)
    backups:     backup calls launched for stragglers
    """

    failures: list[str] = field(default_factory=list)
    resubmitted: list[str] = field(default_factory=list)
    backups: int = 0


def send_calls(fexec: Any, fn: Callable[..., Any], payloads: list[tuple[Any, ...]], timeout: int) -> list[Any]:
    """Submit one Lithops call per payload (one Lithops job); return their futures.

    ``include_modules=None`` turns off Lithops' module shipping: by default every ``map`` parses
    the source of every module the function references (Croupier, Polars, pyarrow...) to pickle
    them — over half the driver's time of a small job on the localhost backend, about a second per
    stage — and the runtime already has Croupier and its dependencies (a cloud runtime must be
    built with them; see the README's Lithops section)."""
    return list(fexec.map(fn, payloads, timeout=timeout, include_modules=None))


class Platform:
    """The Lithops executors calls go to: the current one, and those retired after a call of
    theirs never started (a stuck executor would not start its next calls either)."""

    def __init__(self, settings: dict[str, Any], send: Send = send_calls) -> None:
        self.settings = settings
        self.send = send
        self.current = open_function_executor(settings)
        self.retired: list[Any] = []

    @property
    def backend(self) -> str:
        """The Lithops compute backend's name ("localhost", "aws_lambda", ...)."""
        return str(self.current.config["lithops"].get("backend", "localhost"))

    def limits(self) -> tuple[int, int]:
        """(functions at once, bytes of memory per function) from the Lithops configuration."""
        config = self.current.config
        section, common = config.get(self.backend) or {}, config.get("lithops") or {}
        if self.backend == "localhost":
            workers = int(section.get("worker_processes") or section.get("max_workers") or 1)
        else:
            workers = int(section.get("max_workers") or common.get("max_workers") or 1000)
        memory_mb = int(section.get("runtime_memory") or common.get("runtime_memory") or DEFAULT_MEMORY_MB)
        return workers, memory_mb * 2**20

    def renew(self) -> None:
        """Send the next calls to a fresh Lithops executor; the old one stays up for its calls."""
        self.retired.append(self.current)
        self.current = open_function_executor(self.settings)

    def discard_current(self) -> Any:
        """Stop the current executor and every call it still runs (where the backend can: the
        localhost backend kills them), start a fresh one for the next calls; return the old one."""
        old, self.current = self.current, open_function_executor(self.settings)
        _shut(old)
        return old

    def clean(self, calls: Sequence[Call]) -> None:
        """Delete Lithops' temporary data of finished calls (jobs with a call still out are kept)."""
        by_executor: dict[int, tuple[Any, list[Any]]] = {}
        for call in calls:
            by_executor.setdefault(id(call.fexec), (call.fexec, []))[1].append(call.future)
        for fexec, futures in by_executor.values():
            try:
                fexec.clean(fs=futures, clean_cloudobjects=False)
            except OSError:
                pass  # Lithops' temporary data is cleaned again when the executor closes

    def close_idle(self, busy: set[int]) -> list[Any]:
        """Stop the retired executors that run none of our calls (ids in ``busy`` still do);
        return them."""
        idle = [f for f in self.retired if id(f) not in busy]
        self.retired = [f for f in self.retired if id(f) in busy]
        for fexec in idle:
            _shut(fexec)
        return idle

    def close(self) -> None:
        """Stop every Lithops executor and delete their temporary data."""
        for fexec in [*self.retired, self.current]:
            _shut(fexec)
        self.retired = []


def open_function_executor(settings: dict[str, Any]) -> Any:
    """A Lithops ``FunctionExecutor``; a configuration Lithops rejects becomes a ConfigError with
    Lithops' own message and what to change."""
    import lithops

    try:
        return lithops.FunctionExecutor(config=settings)
    except Exception as exc:  # noqa: BLE001 - Lithops raises plain Exception (and ImportError) for bad settings
        backend = (settings.get("lithops") or {}).get("backend", "localhost")
        missing = ""
        if isinstance(exc, ImportError):
            missing = " (install what it names, usually Lithops' extra for the cloud: pip install 'lithops[aws]', 'lithops[gcp]', ...)"
        raise ConfigError(
            f"Lithops could not start its {backend!r} backend: {type(exc).__name__}: {exc}{missing}. Fix the Lithops "
            "configuration (--lithops-config FILE, LITHOPS_CONFIG_FILE or ~/.lithops/config), or use none at all "
            "to run on Lithops' localhost backend with this Python interpreter"
        ) from exc


def _shut(fexec: Any) -> None:
    """Stop one Lithops executor (its context-manager exit is its public shutdown) and delete its
    temporary data; best effort, as at interpreter exit."""
    try:
        fexec.clean(clean_cloudobjects=True, force=True)
        fexec.__exit__(None, None, None)
    except Exception:  # noqa: BLE001 - cleaning up Lithops' own threads and metadata is best effort
        pass


def lithops_error(future: Any) -> str:
    """The exception text of a call that failed inside Lithops (function crashed, timed out, could
    not import its code...), as Lithops re-raises it."""
    hook = sys.excepthook  # Lithops swaps in its own hook for the exception it re-raises
    try:
        future.status(throw_except=True)
    except Exception as exc:  # noqa: BLE001 - the function's own exception, of whatever type it raised
        return f"{type(exc).__name__}: {exc}"
    finally:
        sys.excepthook = hook
    return "the function call ended without a result and without an exception (Lithops lost it)"


class CallLoop:
    """Runs one batch of items to completion (see the module docstring).

    State:
        queue:     items waiting for a function; retries go to the head
        live:      calls out now
        orphans:   calls whose result no longer matters but which may still hold a function
                   (shared across batches: the executor keeps the list)
        results:   task id -> result
        failed:    task id -> (cause, traceback, exception type) of tasks that failed for good
                   (only with ``raise_failures=False``; otherwise a TaskError is raised)
        durations: run times of finished one-task calls (driver clock), for the speculation policy
        backed_up: task ids that got a backup call
        finished:  calls that ended and were settled (their Lithops data can be cleaned)
    """

    def __init__(
        self,
        platform: Platform,
        bounds: CallBounds,
        config: Config,
        report: CallReport,
        orphans: list[Call] | None = None,
        raise_failures: bool = True,
    ) -> None:
        self.platform = platform
        self.bounds = bounds
        self.config = config
        self.report = report
        self.raise_failures = raise_failures
        self.queue: deque[Item] = deque()
        self.live: list[Call] = []
        self.orphans: list[Call] = orphans if orphans is not None else []
        self.results: dict[str, TaskResult] = {}
        self.failed: dict[str, tuple[str, str, str]] = {}
        self.durations: list[float] = []
        self.backed_up: set[str] = set()
        self.finished: list[Call] = []
        self._ids: set[str] = set()
        self._on_done: Callable[[TaskResult], None] | None = None

    def run(self, items: Sequence[Item], on_done: Callable[[TaskResult], None] | None = None) -> None:
        """Run every task of ``items``; return when each has a result (or failed, when collecting)."""
        self.queue.extend(items)
        self._ids = {t.id for item in items for t in item.tasks}
        self._on_done = on_done
        try:
            while len(self.results) + len(self.failed) < len(self._ids):
                busy = self._dispatch()
                busy |= self._speculate()
                busy |= self._collect()
                busy |= self._expire()
                if not busy:
                    time.sleep(self.bounds.poll)
        finally:
            self.orphans.extend(self.live)  # losing copies still running (or everything, on failure)
            self.live = []

    # --- submitting ----------------------------------------------------------------------------
    def _dispatch(self) -> bool:
        """Send queued items whose gate is open to free functions, in queue order."""
        free = self._free_slots()
        queued = {t.id for item in self.queue for t in item.tasks}
        gates: dict[int, bool] = {}  # gated tasks of a stage share one ``after``: judge it once
        chosen: list[Item] = []
        kept: deque[Item] = deque()
        for item in self.queue:
            if all(t.id in self.results for t in item.tasks):
                continue  # a moot retry: another copy won meanwhile
            if len(chosen) < free and all(self._open(t, queued, gates) for t in item.tasks):
                chosen.append(item)
                queued.difference_update(t.id for t in item.tasks)
            else:
                kept.append(item)
        self.queue = kept
        self._submit(chosen)
        return bool(chosen)

    def _open(self, task: Task, queued: set[str], gates: dict[int, bool]) -> bool:
        """Whether a gated task may take a function: its share of prerequisites (those of this
        batch) finished, and none of them still waits for a function. No deadlock: a prerequisite
        that fails is retried at the head of the queue, ahead of any gated task."""
        if task.after is None:
            return True
        if id(task.after) not in gates:
            needed, share = task.after
            ids = [i for i in needed if i in self._ids]
            done = sum(i in self.results for i in ids)
            gates[id(task.after)] = not any(i in queued for i in ids) and done >= share * len(ids)
        return gates[id(task.after)]

    def _free_slots(self) -> int:
        """Functions free now: the limit less live calls and orphans that still hold one."""
        now = time.time()
        kept = []
        for call in self.orphans:
            call.look(now)
            over = call.running_since is not None and now - call.running_since > self.bounds.time_limit(call.item) + self.bounds.grace
            if not call.ended() and not over:
                kept.append(call)
        self.orphans[:] = kept
        holding = sum(1 for c in self.orphans if c.running_since is not None)
        return self.bounds.slots - len(self.live) - holding

    def _submit(self, items: list[Item]) -> None:
        """Send ``items``: one Lithops job for the one-task calls, one for the invoker calls."""
        direct = [i for i in items if not i.invoker]
        invokers = [i for i in items if i.invoker]
        if direct:
            payloads = [((i.task.id, i.task.fn, i.task.args, self.config),) for i in direct]
            self._send(direct, run_in_function, payloads, self.bounds.task_timeout)
        if invokers:
            payloads = [(self.platform.settings, self.bounds, i.tasks, self.config) for i in invokers]
            self._send(invokers, invoke_share, payloads, self.bounds.time_limit(invokers[0]))

    def _send(self, items: list[Item], fn: Callable[..., Any], payloads: list[tuple[Any, ...]], limit: float) -> None:
        fexec = self.platform.current
        futures = self.platform.send(fexec, fn, payloads, math.ceil(limit))
        sent = time.time()
        self.live += [Call(item, fexec, future, sent) for item, future in zip(items, futures)]

    def _speculate(self) -> bool:
        """Launch backup calls of stragglers on free functions (only when nothing is queued)."""
        policy = self.config.speculation
        if policy is None or self.queue:
            return False
        free = self._free_slots()
        if free <= 0:
            return False
        now = time.time()
        originals = {c.item.task.id: c for c in self.live if not c.item.invoker and not c.item.backup and c.running_since is not None}
        running = {tid: now - c.running_since for tid, c in originals.items()}  # type: ignore[operator]
        chosen = choose_backups(policy, len(self._ids), self.durations, running, self.backed_up, free)
        items = [replace(originals[tid].item, backup=True) for tid in chosen]
        self.backed_up.update(chosen)
        self.report.backups += len(items)
        self._submit(items)
        return bool(items)

    # --- results -------------------------------------------------------------------------------
    def _collect(self) -> bool:
        """Download what has arrived and settle every finished call."""
        self._download()
        now = time.time()
        finished = []
        for call in self.live:
            call.look(now)
            if call.future is not None and call.future.done:
                finished.append(call)
        for call in finished:
            self.live.remove(call)
            self.finished.append(call)
            self._settle(call, now)
        return bool(finished)

    def _download(self) -> None:
        """Fetch the results of calls whose status has arrived (one Lithops poll, no waiting)."""
        from lithops.wait import ALWAYS

        ready: dict[int, tuple[Any, list[Any]]] = {}
        for call in self.live:
            f = call.future
            if f is not None and (f.ready or f.success) and not f.done:
                ready.setdefault(id(call.fexec), (call.fexec, []))[1].append(f)
        for fexec, futures in ready.values():
            fexec.wait(futures, throw_except=False, return_when=ALWAYS, download_results=True, show_progressbar=False)

    def _settle(self, call: Call, now: float) -> None:
        """Turn one finished call into results, retries or a final failure."""
        future = call.future
        reply = None if future.error else future.result(throw_except=False)
        if call.item.invoker:
            if isinstance(reply, list):
                self._settle_share(call, reply)
            else:
                self._failed(call, lithops_error(future), "", "Crash")
            return
        if isinstance(reply, tuple) and reply and reply[0] == "ok":
            stats = future.stats
            result = TaskResult.from_reply(
                reply,
                attempts=call.item.attempt,
                backup=call.item.backup,
                requested=stats.get("host_submit_tstamp") or call.sent,
                started=stats.get("worker_start_tstamp") or call.running_since or now,
                finished=stats.get("worker_end_tstamp") or now,
            )
            if call.running_since is not None:
                self.durations.append(now - call.running_since)
            self._succeed(result)
        elif isinstance(reply, tuple) and reply and reply[0] == "error":
            self._failed(call, reply[2], reply[3], reply[4])
        else:
            self._failed(call, lithops_error(future), "", "Crash")

    def _settle_share(self, call: Call, outcomes: list[TaskResult | ShareFailure]) -> None:
        """An invoker's outcomes: its results, and its tasks' final failures."""
        for outcome in outcomes:
            if isinstance(outcome, TaskResult):
                self._succeed(outcome)
            elif outcome.task_id not in self.results:
                self.report.failures.append(f"{outcome.task_id}: {outcome.cause}")
                self._give_up(outcome.task_id, outcome.cause, outcome.trace)

    def _succeed(self, result: TaskResult) -> None:
        """Record a task's first result; other copies still running become orphans."""
        if result.task_id in self.results:
            return  # another copy won
        self.results[result.task_id] = result
        losers = [c for c in self.live if not c.item.invoker and c.item.task.id == result.task_id]
        for call in losers:
            self.live.remove(call)
        self.orphans += losers
        if self._on_done is not None:
            self._on_done(result)

    def _lost(self, call: Call, cause: str, trace: str, kind: str) -> None:
        """A call failed, never started or ran too long: retry its tasks at the head of the queue
        (an invoker's unfinished tasks are then sent one by one), or give up on them."""
        pending = [t for t in call.item.tasks if t.id not in self.results]
        copies = {c.item.task.id for c in self.live if not c.item.invoker}
        for task in reversed(pending):
            if task.id in copies:
                continue  # another copy is still running: let it finish
            if call.item.attempt < self.bounds.attempts and kind not in DETERMINISTIC_ERRORS:
                self.queue.appendleft(Item((task,), call.item.attempt + 1))
            else:
                where = f"attempt {call.item.attempt} of {self.bounds.attempts}, Lithops {self.platform.backend}"
                self._give_up(task.id, f"{cause} ({where})", trace, kind)

    def _failed(self, call: Call, cause: str, trace: str, kind: str) -> None:
        """A call that ran and failed (or ran too long): report it, then retry or give up."""
        self.report.failures.append(f"{call.item.label()}: {cause}")
        self._lost(call, cause, trace, kind)

    def _give_up(self, task_id: str, cause: str, trace: str, kind: str = "") -> None:
        """A task failed for good: raise, or (collecting, in an invoker) record it."""
        if self.raise_failures:
            raise TaskError(task_id, cause, trace)
        self.failed[task_id] = (cause, trace, kind)

    # --- bounds --------------------------------------------------------------------------------
    def _expire(self) -> bool:
        """Resubmit calls that never started; fail calls that ran past their time limit."""
        now = time.time()
        expired = False
        for call in list(self.live):
            if call.running_since is None and now - call.sent > self.bounds.start_timeout:
                self._not_started(call)
                expired = True
            elif call.running_since is not None and now - call.running_since > self.bounds.time_limit(call.item) + self.bounds.grace:
                self.live.remove(call)
                self.orphans.append(call)
                limit = self.bounds.time_limit(call.item)
                self._failed(call, f"exceeded the time limit of {limit:.0f} s; raise task_timeout or use more workers", "", "Timeout")
                expired = True
        return expired

    def _not_started(self, call: Call) -> None:
        """A call that did not start in time: abandon it, move on to a fresh Lithops executor
        (once per executor) and resubmit."""
        self.live.remove(call)
        self.orphans.append(call)
        why = f"did not start within {self.bounds.start_timeout:g} s of being sent"
        self.report.resubmitted.append(f"{call.item.label()}: {why} (attempt {call.item.attempt})")
        if call.fexec is self.platform.current:
            self.platform.renew()
        hint = "; the platform may be out of capacity or stuck: check the backend, or raise croupier.start_timeout in the Lithops configuration"
        self._lost(call, f"the function call {why}{hint}", "", "NotStarted")
