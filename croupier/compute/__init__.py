"""Executors run tasks as functions; the local executor is the embedded default."""

from croupier.compute.base import Executor, Task, TaskResult
from croupier.compute.context import TaskContext
from croupier.compute.local import LocalExecutor
from croupier.compute.session import Session, current_session

__all__ = ["Executor", "LocalExecutor", "Session", "Task", "TaskContext", "TaskResult", "current_session"]
