"""The TeraSort plan: a sort of TeraSort records by key, with numpy kernels, on the one engine.

::

    input objects ──> [probe] ──D, splitters──> [map: range partition] ──> [levels 2..k] ──> [reduce: sort]
                       tasks      (driver)        P tasks (records)          P tasks           P tasks

Chosen for ``scan_gensort(IN).sort("key")`` and for Parquet inputs with exactly the columns ``key``
(10 bytes) and ``payload`` (90 bytes) — whether it comes from ``croupier sort`` or from the frame
API, it is the same plan, so both give byte-identical output.

* probe: a few ranged reads per share (Parquet: only footers and key column chunks) give every
  object's record count, hence D = records x 100 bytes, and a key sample; the driver binds the
  exchange early (every algorithm family is a candidate) and picks P-1 splitters on the composite
  key (key, global row position), so hot keys and all-equal keys still split evenly.
* map: each of P tasks reads its share of records and cuts it by the splitters into level 1 of
  the plan (never concatenating its pieces).
* reduce: each task receives its partition in mapper order, sorts it stably by key, and writes
  its part (or hands it on as rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from croupier.dag.operators import RecordsSort
from croupier.dag.scan import resolve
from croupier.dag.stage import ExchangeInput, ExchangeSink, RecordsRangePartitioning, ResultSink, TaskSource
from croupier.dag.task import PiecesRead, SampleRead
from croupier.expr import Col
from croupier.plan.logical import Node, Scan, Sort
from croupier.ops import terasort
from croupier.ops.records import RECORD_SIZE

if TYPE_CHECKING:
    from croupier.plan.compile import Compiler, Pipeline

TERASORT_COLUMNS = ("key", "payload")


def matches(node: Node) -> bool:
    """Whether ``node`` sorts a TeraSort table by its key, ascending (the TeraSort plan applies)."""
    if not isinstance(node, Sort) or not isinstance(node.input, Scan):
        return False
    if len(node.by) != 1 or not isinstance(node.by[0], Col) or node.by[0].name != "key" or node.descending != (False,):
        return False
    scan = node.input
    if scan.spec.predicate is not None or tuple(scan.schema) != TERASORT_COLUMNS:
        return False
    return scan.spec.format == "gensort" or (scan.spec.format == "parquet" and tuple(scan.file_schema) == TERASORT_COLUMNS)


def compile_sort(compiler: Compiler, node: Sort) -> Pipeline:
    """Submit the probe and map stages; return the reduce pipeline (records, sorted)."""
    from croupier.plan.compile import Pipeline

    scan = node.input
    assert isinstance(scan, Scan)
    if compiler.dry:
        probe = compiler.stage(Pipeline(TaskSource(()), rep="records"), ResultSink(), "probe", name="sample")
        compiler.notes.append(f"{node.label()}: TeraSort plan: a probe samples the input; D and the splitters bind P and the exchange plan before the map runs")
        mapped = compiler.stage(Pipeline(TaskSource(()), rep="records"), ExchangeSink(RecordsRangePartitioning()), "map")
        del probe
        return Pipeline(ExchangeInput(mapped, "partition"), [RecordsSort()], rep="records", final_name="reduce")
    runner = compiler.runner
    assert runner is not None
    config = compiler.config
    base, objects = resolve(scan.spec.url, runner.run.store)
    probe_tasks = config.workers or max(1, min(len(objects), 4 * config.concurrency))
    shares = terasort.plan_pieces(objects, probe_tasks)
    target = max(terasort.MIN_SAMPLES, terasort.SAMPLES_PER_REDUCER * (config.workers or 256))
    reads = tuple(SampleRead(base, tuple(share), target // probe_tasks + 1, m) for m, share in enumerate(shares))
    probe = compiler.stage(Pipeline(TaskSource(reads), rep="records"), ResultSink(), "probe", name="sample")
    out = compiler.wait(probe)
    assert out is not None
    rows, found = _probe_results(objects, shares, out.values)
    data_bytes = sum(rows) * RECORD_SIZE
    decision = runner.binder.early(data_bytes, None, "sampled (records x 100 bytes)")
    plan = decision.plan
    split_a, split_b = terasort.global_splitters(rows, found, plan.workers, base)
    compiler.notes.append(f"{node.label()}: TeraSort plan: {data_bytes:,} bytes sampled -> {decision.how}")
    compiler.decisions.append(decision)
    pieces = terasort.plan_pieces(objects, plan.workers, rows)
    eager = config.reducers == "eager" and plan.levels == 1 and not plan.combine
    if config.reducers == "eager" and not eager:
        compiler.notes.append(f"reducers: lazy: eager reducers need the direct exchange without write combining, not {plan.name}")
    sink = ExchangeSink(RecordsRangePartitioning((split_a.tobytes(), split_b.tobytes())), plan=plan, eager=eager)
    mapped = compiler.stage(Pipeline(TaskSource(tuple(PiecesRead(base, tuple(share)) for share in pieces), bytes=data_bytes), rep="records"), sink, "map", name="map")
    compiler.terasort = {"records": sum(rows), "data_bytes": data_bytes, "workers": plan.workers, "exchange": plan.name, "eager": eager}
    return Pipeline(ExchangeInput(mapped, "partition"), [RecordsSort()], rep="records", final_name="reduce")


def _probe_results(objects: list, shares: list[list[terasort.Piece]], values: list) -> tuple[list[int], list[tuple[int, np.ndarray, np.ndarray]]]:  # type: ignore[type-arg]
    """Records per input object and the sampled composite keys (object index, A, B)."""
    index = {o.key: i for i, o in enumerate(objects)}
    rows = [o.size // RECORD_SIZE for o in objects]
    found: list[tuple[int, np.ndarray, np.ndarray]] = []
    for share, result in zip(shares, values):
        for piece, (n, a, b) in zip(share, result):
            if piece.fmt == "parquet":
                rows[index[piece.key]] = n
            found.append((index[piece.key], np.frombuffer(a, np.uint64), np.frombuffer(b, np.uint64)))
    return rows, found
