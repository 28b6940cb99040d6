"""Executors run tasks as functions; the local executor is the embedded default.

The names below are imported on first use (PEP 562): a worker, a Lithops function or ``import
croupier.compute.session`` imports only the modules it needs, not every executor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from croupier.lazy import exports

if TYPE_CHECKING:
    from croupier.compute.base import Executor, Task, TaskResult
    from croupier.compute.context import TaskContext
    from croupier.compute.local import LocalExecutor
    from croupier.compute.session import Session, current_session

__all__ = ["Executor", "LocalExecutor", "Session", "Task", "TaskContext", "TaskResult", "current_session"]

_LAZY = {
    "Executor": "croupier.compute.base",
    "Task": "croupier.compute.base",
    "TaskResult": "croupier.compute.base",
    "TaskContext": "croupier.compute.context",
    "LocalExecutor": "croupier.compute.local",
    "Session": "croupier.compute.session",
    "current_session": "croupier.compute.session",
}


__getattr__, __dir__ = exports(__name__, _LAZY, __all__, globals())
