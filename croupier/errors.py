"""Croupier's exception hierarchy.

Every message says what went wrong, where (object key, task id, run id) and what the user can change.
"""

from __future__ import annotations


class CroupierError(Exception):
    """Base class of every error Croupier raises on purpose."""


class ConfigError(CroupierError, ValueError):
    """A setting, flag or URL cannot be used as given."""


class StorageError(CroupierError):
    """A storage request failed for good (after any retries)."""


class ObjectNotFound(StorageError, FileNotFoundError):
    """The named object does not exist in the store."""

    def __init__(self, url: str) -> None:
        super().__init__(f"object not found: {url}")
        self.url = url


class ObjectExists(StorageError):
    """A create-only write found an object already stored at the key."""


class VersionMismatch(StorageError):
    """A conditional replace found another version of the object than the one expected, or none."""


class StoreFullError(StorageError):
    """A store refused a write because it is full (a Redis fast tier at its ``maxmemory``).
    Not retried: the exchange falls back to the slow tier instead."""


class TransientStorageError(StorageError):
    """A storage request failed in a way that is worth retrying (5xx, SlowDown, timeout, reset)."""


class InputError(CroupierError):
    """Input data is missing, malformed or of the wrong shape; names the object and the problem."""


class OutputExistsError(CroupierError):
    """The output location already holds objects and overwriting was not asked for, or holds
    objects Croupier did not write (which it never replaces)."""


class OutputBusyError(CroupierError):
    """Another run holds the output's writer lock; the message names it (run id, host, pid, start)."""


class TaskError(CroupierError):
    """A task failed in a worker; carries the task id and the worker's traceback."""

    def __init__(self, task_id: str, cause: str, worker_traceback: str = "") -> None:
        message = f"task {task_id} failed: {cause}"
        if worker_traceback:
            message += "\n--- worker traceback ---\n" + worker_traceback.rstrip()
        super().__init__(message)
        self.task_id = task_id
        self.cause = cause
        self.worker_traceback = worker_traceback


class ValidationError(CroupierError):
    """A sorted output failed validation (order, count or checksum)."""
