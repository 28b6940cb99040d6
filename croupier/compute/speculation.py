"""Speculative execution (SEER §5.1, after LATE): which straggling tasks get a backup copy.

A pure function of what the executor sees, so the policy is unit-tested on its own:

* nothing is backed up until ``after`` (default 75%) of the stage's tasks have finished;
* a running task is a straggler when it has run longer than ``slowness`` (default 1.5) times the
  median duration of the finished tasks, and at least ``min_seconds``;
* at most ``budget`` (default 10%, at least one) of the stage's tasks ever get a backup; each task at
  most one; the longest-running stragglers first;
* a backup needs an idle function: the executor asks only when no queued task is waiting.

The first copy to finish wins; the other is stopped. Tasks must therefore be idempotent (they
are: every task writes the same objects under the same keys whichever copy runs).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from croupier.errors import ConfigError


@dataclass(frozen=True)
class SpeculationPolicy:
    """When and how much to speculate."""

    after: float = 0.75
    slowness: float = 1.5
    budget: float = 0.10
    min_seconds: float = 0.5

    def __post_init__(self) -> None:
        if not (0.0 < self.after <= 1.0 and self.slowness >= 1.0 and 0.0 <= self.budget <= 1.0 and self.min_seconds >= 0):
            raise ConfigError("speculation: need 0 < after <= 1, slowness >= 1, 0 <= budget <= 1, min_seconds >= 0")

    def allowance(self, total: int) -> int:
        """Backups a stage of ``total`` tasks may launch in all."""
        return 0 if self.budget == 0 or total <= 1 else max(1, math.floor(self.budget * total))


def choose_backups(
    policy: SpeculationPolicy,
    total: int,
    finished: Sequence[float],
    running: Mapping[str, float],
    backed_up: set[str],
    idle: int,
) -> list[str]:
    """Task ids to launch a backup copy of now.

    total:     tasks in the stage
    finished:  durations (s) of the finished tasks
    running:   task id -> seconds it has been running (first copy)
    backed_up: task ids that already got a backup (they count against the budget)
    idle:      functions free right now
    """
    if idle <= 0 or not finished or len(finished) < policy.after * total:
        return []
    left = policy.allowance(total) - len(backed_up)
    if left <= 0:
        return []
    limit = max(policy.min_seconds, policy.slowness * statistics.median(finished))
    stragglers = sorted((t for t, age in running.items() if age > limit and t not in backed_up), key=lambda t: -running[t])
    return stragglers[: min(left, idle)]
