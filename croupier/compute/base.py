"""The executor interface: run many small tasks as functions, get back small metadata.

A task is a module-level function ``fn(ctx, *args)`` with picklable arguments; ``ctx`` is a
:class:`croupier.compute.context.TaskContext` giving the task its config and its stores. Tasks move
data only through storage and return only small metadata (keys, sizes, offsets, samples, timings).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from croupier.config import Config
from croupier.storage.stats import IOStats

#: Largest pickled result a task may return; bigger data belongs in storage.
MAX_RESULT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Task:
    """One unit of work: ``fn(ctx, *args)`` run in a function, identified by ``id``.

    ``after`` = (task ids, share) gates the task (eager reducers, SEER §5.1): it starts only once
    that share of those tasks (of the same ``map`` call) has finished and none of them is still
    waiting for a function, so gated tasks never take a function a prerequisite needs.
    ``inputs`` = what the task will read, (store URL, key, start, end): a function about to run it
    next may fetch them ahead (look-ahead prefetch, :mod:`croupier.storage.prefetch`).
    """

    id: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    after: tuple[tuple[str, ...], float] | None = None
    inputs: tuple[tuple[str, str, int | None, int | None], ...] = ()


@dataclass
class TaskResult:
    """What a finished task sends back: its return value and what it cost."""

    task_id: str
    value: Any
    channels: dict[str, IOStats] = field(default_factory=dict)
    seconds: float = 0.0
    peak_rss: int = 0
    worker: int = -1
    attempts: int = 1
    started: float = 0.0
    finished: float = 0.0
    backup: bool = False
    requested: float = 0.0

    @property
    def io(self) -> IOStats:
        """All requests of the task, every channel together."""
        return IOStats.total(self.channels.values())

    @classmethod
    def from_reply(cls, reply: tuple[Any, ...], **fields: Any) -> TaskResult:
        """Decode a function's ``("ok", task id, value, channels, seconds, peak RSS[, retiring])``
        reply (see :mod:`croupier.compute.worker`); ``fields`` are the executor's own (worker,
        times...)."""
        _, task_id, value, channels, seconds, peak, *_ = reply
        io = {name: IOStats.from_dict(stats) for name, stats in channels.items()}
        return cls(task_id, value, io, seconds, peak, **fields)


class Executor(ABC):
    """Runs tasks as functions with a concurrency limit; one executor per run."""

    @abstractmethod
    def map(
        self,
        tasks: Sequence[Task],
        config: Config | None = None,
        on_done: Callable[[TaskResult], None] | None = None,
    ) -> list[TaskResult]:
        """Run all ``tasks``; return their results in task order.

        ``config`` is the run's config handed to each task (stores, formats); the executor's own
        config sets only its limits (concurrency, memory, time). ``on_done`` sees each result as it
        arrives (progress bars).

        Raises :class:`croupier.errors.TaskError` (task id, cause, worker traceback) when a task fails
        for good; other tasks of the call are then cancelled.
        """

    @abstractmethod
    def close(self) -> None:
        """Stop all workers."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
