"""Module-level task functions for the Lithops executor tests (functions import them by name)."""

from __future__ import annotations

import os
import sys

from croupier.compute.context import TaskContext
from croupier.errors import InputError


def interpreter(ctx: TaskContext) -> str:
    """The Python interpreter the function runs with."""
    return sys.executable


def die(ctx: TaskContext, code: int) -> None:
    """End the function's process without a reply (what a platform kill looks like)."""
    os._exit(code)


def bad_input(ctx: TaskContext, key: str) -> None:
    """Fail the way a task fails on malformed input (never retried)."""
    raise InputError(f"{key}: not a Parquet file")
