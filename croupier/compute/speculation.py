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

import statistics
from typing import Mapping, Sequence

__all__ = ["SpeculationPolicy", "choose_backups"]

from croupier.config import SpeculationPolicy


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
