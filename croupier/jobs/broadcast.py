"""Running a broadcast plan: every worker receives every worker's data, level by level (waves).

Stage i (0-based) has each worker gather what it holds (its own input at stage 0, else the objects
of its group at level i-1) and, before the last stage, write it all as its one level-i object. At
the last stage each worker holds everything; here it reports the record count and checksum it
received, which a broadcast join would instead use as its build side.
"""

from __future__ import annotations

import numpy as np

from croupier.compute.base import Executor, Task
from croupier.compute.context import TaskContext
from croupier.config import Config
from croupier.exchange.broadcast import BroadcastPlan
from croupier.jobs.runtime import Run
from croupier.jobs.shuffle import get_when_ready
from croupier.ops import codec
from croupier.ops.records import RECORD_SIZE, checksum
from croupier.report import RunReport


def broadcast_step(ctx: TaskContext, plan: BroadcastPlan, stage: int, worker: int, input_url: str, input_key: str, work_url: str, fmt: str) -> tuple[int, int]:
    """Task: gather this worker's data for ``stage``; write it on (or, at the end, summarise it)."""
    exchange = ctx.store(work_url, "exchange")
    if stage == 0:
        parts = [np.frombuffer(ctx.store(input_url).get(input_key), np.uint8).reshape(-1, RECORD_SIZE)]
    else:
        blobs = [get_when_ready(exchange, key, ctx.config.request_timeout) for key in plan.reads(stage - 1, worker)]
        parts = [codec.decode(b, fmt) for b in blobs]
    if stage < plan.topology.levels:
        exchange.put(plan.key(stage, worker), codec.encode_parts(parts, fmt))
        return 0, 0
    records = np.concatenate(parts) if parts else np.empty((0, RECORD_SIZE), np.uint8)
    return len(records), checksum(records)


def broadcast(input_url: str, input_keys: list[str], work_url: str, plan: BroadcastPlan, config: Config, executor: Executor | None = None) -> tuple[list[tuple[int, int]], RunReport]:
    """Broadcast worker ``w``'s object ``input_keys[w]`` to all; return each worker's (records, checksum)."""
    if len(input_keys) != plan.topology.workers:
        raise ValueError(f"{len(input_keys)} inputs for a broadcast among {plan.topology.workers} workers")
    run = Run("broadcast", config, executor)
    config = run.config  # the executor's platform limits (e.g. Lithops) included
    fmt = config.shuffle_encoding(work_url)
    try:
        results: list[tuple[int, int]] = []
        for stage in range(plan.topology.levels + 1):
            name = "gather" if stage == plan.topology.levels else f"level-{stage + 1}"
            tasks = [Task(f"{name}-{w}", broadcast_step, (plan, stage, w, input_url, input_keys[w], work_url, fmt)) for w in range(plan.topology.workers)]
            results = [r.value for r in run.stage(name, tasks)]
    finally:
        run.store(work_url).delete_prefix()
        report = run.finish()
    return results, report
