"""Task bodies for the session tests; this module imports nothing heavy on purpose, so what a
worker has imported before its first task shows in ``sys.modules``."""

from __future__ import annotations

import os
import sys
from typing import Any


def loaded(ctx: Any, names: tuple[str, ...]) -> tuple[int, list[str]]:
    """This worker's pid and which of ``names`` it had imported when the task started."""
    return os.getpid(), [n for n in names if n in sys.modules]
