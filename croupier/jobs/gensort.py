"""The gensort job: write TeraSort input as N objects, generated in parallel by the workers."""

from __future__ import annotations

import math

from croupier.compute.base import Executor, Task
from croupier.compute.context import TaskContext
from croupier.config import Config
from croupier.jobs.common import STAGING, commit, prepare_output
from croupier.jobs.runtime import Run
from croupier.ops.gensort import generate
from croupier.ops.records import RECORD_SIZE
from croupier.report import RunReport
from croupier.units import format_bytes


def generate_part(ctx: TaskContext, url: str, key: str, first: int, count: int, seed: int, ascii_keys: bool) -> int:
    """Task: generate records [first, first+count) and store them at ``key``; return the count."""
    records = generate(first, count, seed, ascii_keys)
    ctx.store(url).put(key, memoryview(records.reshape(-1)))
    return count


def part_name(index: int) -> str:
    """Input object names: ``part-00000.dat`` ... (sorted in record order)."""
    return f"part-{index:05d}.dat"


def gensort(
    output_url: str,
    size: int,
    parts: int,
    config: Config,
    seed: int = 0,
    ascii_keys: bool = False,
    overwrite: bool = False,
    executor: Executor | None = None,
) -> RunReport:
    """Generate ``size`` bytes (rounded down to whole records) of gensort data as ``parts`` objects."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    records = size // RECORD_SIZE
    run = Run("gensort", config, executor)
    config = run.config  # the executor's platform limits (e.g. Lithops) included
    out = run.store(output_url)
    staging = f"{STAGING}/{run.run_id}/out/"
    try:
        replaces = prepare_output(out, overwrite)
        bounds = [records * i // parts for i in range(parts + 1)]
        names = [part_name(i) for i in range(parts)]
        tasks = [
            Task(f"gensort-{i}", generate_part, (output_url, staging + names[i], bounds[i], bounds[i + 1] - bounds[i], seed, ascii_keys))
            for i in range(parts)
        ]
        run.stage("generate", tasks)
        manifest = {"job": "gensort", "run_id": run.run_id, "records": records, "parts": parts, "seed": seed, "ascii": ascii_keys}
        commit(out, staging, names, manifest, replaces)
        run.report.summary.update(records=records, bytes=format_bytes(records * RECORD_SIZE), parts=parts, seed=seed, ascii=ascii_keys)
    finally:
        out.delete_prefix(staging)  # nothing half-written is left as if it were data
        report = run.finish()
    return report


def default_parts(size: int, concurrency: int) -> int:
    """Parts for ``size`` bytes: about 128 MB each, at least one per worker."""
    return max(concurrency, math.ceil(size / 128e6), 1)
