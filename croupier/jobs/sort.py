"""The sort job (TeraSort): sampled range partitioning and a direct exchange through storage.

::

    input objects ──> [sample] ──splitters──> [map: partition] ──> [level 2..k] ──> [reduce: sort] ──> part-*
                       P tasks   (driver)      P tasks              P tasks each     P tasks

* sample: each mapper's share of the input is sampled with a few ranged reads; the driver picks
  P-1 splitters on the composite (key, row position), robust to skew and duplicate keys.
* map: reads its share, assigns each record to a reducer, writes the first level of the exchange
  plan (direct: one object per reducer; k-level: one per group member; write combining: one).
* level 2..k (multi-level plans only): each worker passes its data on to the next level's group.
* reduce: receives its partition (in mapper order, whatever the plan), sorts stably by key, writes
  ``part-{r}``; the concatenation of the parts in name order is globally sorted.
* commit: reducers write their parts under the run's staging prefix in the output store; only when
  all succeeded are they moved to their final names and ``_SUCCESS`` (listing them) written, so a
  failed or running sort never shows parts under the output. Intermediate objects live under a
  run-scoped prefix and are deleted on success and on failure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from croupier.compute.base import Executor, Task
from croupier.compute.context import TaskContext
from croupier.config import Config
from croupier.errors import ConfigError, InputError
from croupier.exchange.plan import ExchangePlan
from croupier.jobs.common import STAGING, commit, list_inputs, prepare_output
from croupier.jobs.runtime import Run
from croupier.jobs.shuffle import Blocks, Ranges, ranges_for, read_level, write_level
from croupier.ops import partition
from croupier.ops.formats import FORMATS, detect_format, key_bytes, output_name, read_records, write_records
from croupier.ops.records import KEY_SIZE, RECORD_SIZE, key_columns, sort_order, take
from croupier.report import RunReport
from croupier.storage import ObjectInfo, Store
from croupier.storage.rangefile import RangeFile

#: Sampled keys per reducer; ~100 per reducer keeps partitions within a few % of even.
SAMPLES_PER_REDUCER = 128
MIN_SAMPLES = 1024
SAMPLE_RUNS = 8  # ranged reads per piece when sampling gensort data


@dataclass(frozen=True)
class Piece:
    """Part of one input object a mapper reads: rows [start, stop) of ``key``; stop=-1 = to the end."""

    key: str
    fmt: str
    start: int
    stop: int
    first_row: int = 0  # global row position of row ``start`` (filled in after sampling)


def input_format(objects: list[ObjectInfo]) -> str:
    """The one format of the input objects; gensort sizes must be whole records."""
    formats = {detect_format(o.key) for o in objects}
    if len(formats) > 1:
        raise InputError(f"input mixes gensort and Parquet objects ({objects[0].key}, ...); use one format")
    fmt = formats.pop()
    if fmt == "gensort":
        for o in objects:
            if o.size % RECORD_SIZE:
                raise InputError(
                    f"{o.key}: size {o.size} bytes is not a multiple of the {RECORD_SIZE}-byte record size; "
                    "the object is truncated or not gensort data"
                )
    return fmt


def plan_pieces(objects: list[ObjectInfo], mappers: int, rows: list[int] | None = None) -> list[list[Piece]]:
    """Split the input into ``mappers`` shares of about equal size.

    gensort objects are cut at record boundaries so every mapper gets the same number of records;
    Parquet objects are read whole, grouped greedily by bytes in name order. ``rows`` (records per
    object, known after the probe) sets each piece's global first row; without it Parquet pieces
    are open-ended and rows are numbered per object.
    """
    fmt = input_format(objects)
    if fmt == "parquet":
        return _group_whole(objects, mappers, rows)
    counts = [o.size // RECORD_SIZE for o in objects]
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    total = int(starts[-1])
    shares: list[list[Piece]] = []
    for m in range(mappers):
        lo, hi = total * m // mappers, total * (m + 1) // mappers
        share = []
        for i, o in enumerate(objects):
            a, b = max(lo, int(starts[i])), min(hi, int(starts[i + 1]))
            if a < b:
                share.append(Piece(o.key, "gensort", a - int(starts[i]), b - int(starts[i]), a))
        shares.append(share)
    return shares


def _group_whole(objects: list[ObjectInfo], groups: int, rows: list[int] | None) -> list[list[Piece]]:
    total = sum(o.size for o in objects) or 1
    bases = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64) if rows is not None else None
    shares: list[list[Piece]] = [[] for _ in range(groups)]
    seen = 0
    for i, o in enumerate(objects):
        stop = rows[i] if rows is not None else -1
        first = int(bases[i]) if bases is not None else 0
        shares[min(groups - 1, seen * groups // total)].append(Piece(o.key, "parquet", 0, stop, first))
        seen += o.size
    return shares


def sample_share(ctx: TaskContext, url: str, share: list[Piece], samples: int, seed: int) -> list[tuple[int, bytes, bytes]]:
    """Task: per piece of a share, (rows in the piece, sampled A keys, sampled B keys).

    B carries the sampled record's row number within its object; the driver adds the object's
    global first row once every object's size is known.
    """
    store = ctx.store(url)
    rng = np.random.default_rng(seed)
    per_piece = max(1, samples // max(1, len(share)))
    out = []
    for piece in share:
        keys, positions, n = _sample_piece(store, piece, per_piece, rng)
        hi, lo = key_columns(keys)
        b = (lo.astype(np.uint64) << np.uint64(partition.ROWPOS_BITS)) | positions.astype(np.uint64)
        out.append((n, hi.tobytes(), b.tobytes()))
    return out


def _sample_piece(store: Store, piece: Piece, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """(sampled records, their row numbers within the object, rows in the piece).

    Parquet: only the footer and the ``key`` column chunks are fetched. gensort: a few runs of
    consecutive records at random offsets, fetched together as several ranges of one object.
    """
    if piece.fmt == "parquet":
        keys = _read_parquet_keys(store, piece.key)
        n = len(keys)
        picks = np.sort(rng.choice(n, size=min(k, n), replace=False)) if n else np.empty(0, np.int64)
        rows = np.zeros((len(picks), RECORD_SIZE), np.uint8)
        rows[:, :KEY_SIZE] = keys[picks]
        return rows, picks, n
    n = piece.stop - piece.start
    if n == 0:
        return np.empty((0, RECORD_SIZE), np.uint8), np.empty(0, np.int64), 0
    run = max(1, -(-k // SAMPLE_RUNS))
    starts = np.unique(rng.integers(0, max(1, n - run + 1), size=min(SAMPLE_RUNS, n)))
    stops = np.minimum(starts + run, n)
    ranges = [((piece.start + int(a)) * RECORD_SIZE, (piece.start + int(b)) * RECORD_SIZE) for a, b in zip(starts, stops)]
    chunks = store.get_ranges(piece.key, ranges)
    records = np.concatenate([np.frombuffer(c, np.uint8).reshape(-1, RECORD_SIZE) for c in chunks])
    positions = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)]) + piece.start
    return records, positions, n


def _read_parquet_keys(store: Store, key: str) -> np.ndarray:
    """Keys of a Parquet object as (n, 10) uint8, fetching only its footer and key column chunks."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = f"{store.url}/{key}"
    try:
        table = pq.read_table(RangeFile(store, key), columns=["key"])
    except (pa.ArrowInvalid, OSError, KeyError) as exc:
        raise InputError(f"{where}: cannot read column 'key' as Parquet ({exc}); is it truncated or corrupt?") from exc
    return key_bytes(table, where)


def map_share(
    ctx: TaskContext, url: str, share: list[Piece], splitters: tuple[bytes, bytes], shuffle_url: str, plan: ExchangePlan, worker: int, fmt: str
) -> tuple[Ranges, int]:
    """Task: partition a mapper's share by the splitters; write its level-1 exchange objects.

    Pieces are partitioned one at a time and objects are written from the pieces' slices (several
    buffers, one PUT): the share is never concatenated, which would copy it once more. Returns the
    segment byte ranges (write combining) and the bytes written.
    """
    store = ctx.store(url)
    split = (np.frombuffer(splitters[0], np.uint64), np.frombuffer(splitters[1], np.uint64))
    blocks: Blocks = {}
    for piece in share:
        grouped, bounds = _partition_piece(_read_piece(store, piece), piece.first_row, split, plan.workers)
        for r in np.flatnonzero(np.diff(bounds)):
            blocks.setdefault(int(r), []).append(grouped[bounds[r] : bounds[r + 1]])
    return write_level(ctx.store(shuffle_url, "exchange"), plan, 0, worker, blocks, fmt)


def exchange_level(ctx: TaskContext, shuffle_url: str, plan: ExchangePlan, level: int, worker: int, ranges: list[tuple[int, int]] | None, fmt: str) -> tuple[Ranges, int]:
    """Task: an intermediate level: receive level ``level - 1``'s data, pass it on at ``level``."""
    store = ctx.store(shuffle_url, "exchange")
    blocks = read_level(store, plan, level - 1, worker, ranges, fmt, ctx.config.request_timeout)
    return write_level(store, plan, level, worker, blocks, fmt)


def _partition_piece(records: np.ndarray, first_row: int, split: tuple[np.ndarray, np.ndarray], reducers: int) -> tuple[np.ndarray, np.ndarray]:
    """Group one piece's records by reducer (stable); return (grouped records, P+1 offsets)."""
    if not len(records):
        return records, np.zeros(reducers + 1, np.int64)
    hi, lo = key_columns(records)
    a, b = partition.composite_keys(hi, lo, first_row)
    order, bounds = partition.group_by_partition(partition.assign(a, b, *split), reducers)
    return take(records, order), bounds


def _read_piece(store: Store, piece: Piece) -> np.ndarray:
    """The records of one piece; checks it still has the rows sampling saw."""
    where = f"{store.url}/{piece.key}"
    if piece.fmt == "gensort":
        buf = store.get_range(piece.key, piece.start * RECORD_SIZE, piece.stop * RECORD_SIZE)
    else:
        buf = store.get(piece.key)
    records = read_records(buf, piece.fmt, where)
    if len(records) != piece.stop - piece.start:
        raise InputError(
            f"{where}: has {len(records)} records now but {piece.stop - piece.start} when sampled; "
            "was the input changed during the sort?"
        )
    return records


def reduce_partition(
    ctx: TaskContext, shuffle_url: str, plan: ExchangePlan, worker: int, ranges: list[tuple[int, int]] | None, fmt: str, out_url: str, out_key: str, out_fmt: str
) -> tuple[int, int]:
    """Task: receive this partition's records, sort them by key, write one output object; return (records, bytes)."""
    store = ctx.store(shuffle_url, "exchange")
    # eager reducers start before every mapper has written: they may wait as long as a task may run
    wait = ctx.config.task_timeout if ctx.config.reducers == "eager" else ctx.config.request_timeout
    blocks = read_level(store, plan, plan.levels - 1, worker, ranges, fmt, wait)
    stray = set(blocks) - {worker}
    if stray:
        raise RuntimeError(f"reducer {worker} received records of partitions {sorted(stray)}: exchange plan {plan.name} is inconsistent")
    parts = blocks.get(worker, [])
    records = np.concatenate(parts) if parts else np.empty((0, RECORD_SIZE), np.uint8)
    del blocks, parts
    if len(records):
        records = take(records, sort_order(*key_columns(records)))
    blob = write_records(records, out_fmt)
    ctx.store(out_url).put(out_key, blob)
    return len(records), memoryview(blob).nbytes


def sort(
    input_url: str,
    output_url: str,
    workers: int | None,
    config: Config,
    out_format: str = "gensort",
    overwrite: bool = False,
    seed: int = 0,
    executor: Executor | None = None,
    plan: ExchangePlan | None = None,
    objective: str = "time",
    budget: float | None = None,
    algorithm: str | None = None,
) -> RunReport:
    """Sort the records under ``input_url`` into P output objects under ``output_url``.

    Late binding: a probe stage measures the shuffle volume D (records x 100 bytes) and samples
    keys; then P and the exchange plan are chosen by the selector from D and the store's profile,
    unless given (``workers`` fixes P and leaves only the algorithm to choose; ``algorithm``, e.g.
    "direct+wc" or "2-level", fixes the family and leaves P and the topology; ``plan`` fixes both).
    Any plan gives the same output.
    """
    if workers is not None and workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    if out_format not in FORMATS:
        raise ConfigError(f"output format must be one of {FORMATS}, got {out_format!r}")
    if plan is not None and workers is not None and plan.workers != workers:
        raise ConfigError(f"exchange topology {plan.topology} has {plan.workers} workers, not {workers}")
    run = Run("sort", config, executor)
    config = run.config  # the executor's platform limits (e.g. Lithops) included
    shuffle_url = run.tmp_url(output_url)
    out = run.store(output_url)
    encoding = config.shuffle_encoding(shuffle_url)
    out_keys: list[str] = []
    staging = f"{STAGING}/{run.run_id}/out/"
    try:
        objects = list_inputs(run.store(input_url))
        replaces = prepare_output(out, overwrite)
        probe = plan.workers if plan else workers or max(1, min(len(objects), 4 * config.concurrency))
        rows, samples = _probe(run, input_url, objects, probe, plan.workers if plan else workers, seed)
        data_bytes = sum(rows) * RECORD_SIZE
        plan, prediction = _bind(plan, workers, data_bytes, shuffle_url, config, objective, budget, run, algorithm)
        p = plan.workers
        out_keys = [output_name(r, out_format) for r in range(p)]
        shares = plan_pieces(objects, p, rows)
        split_a, split_b = partition.choose_splitters(samples[0], samples[1], p)
        splitters = (split_a.tobytes(), split_b.tobytes())
        map_tasks = [Task(f"map-{m}", map_share, (input_url, shares[m], splitters, shuffle_url, plan, m, encoding), inputs=_share_inputs(input_url, shares[m])) for m in range(p)]
        if config.reducers == "eager" and plan.levels == 1 and not plan.combine:
            reduce_tasks = [
                Task(f"reduce-{r}", reduce_partition, (shuffle_url, plan, r, None, encoding, output_url, staging + out_keys[r], out_format), after=(tuple(t.id for t in map_tasks), config.eager_after))
                for r in range(p)
            ]
            results = run.stage("map+reduce", map_tasks + reduce_tasks)
            written, reduce_results = results[:p], results[p:]
            run.report.summary["reducers"] = f"eager: started once {config.eager_after:.0%} of the mappers finished"
        else:
            written = run.stage("map", map_tasks)
            reduce_results = []
            run.report.summary["reducers"] = "lazy: started after every mapper finished"
            if config.reducers == "eager":
                run.report.summary["reducers"] = f"lazy: eager reducers need the direct exchange without write combining, not {plan.name}"
        shuffle_bytes = sum(r.value[1] for r in written)
        for level in range(1, plan.levels):
            ranges = [r.value[0] for r in written]
            tasks = [
                Task(f"level{level + 1}-{w}", exchange_level, (shuffle_url, plan, level, w, ranges_for(plan, level - 1, w, ranges), encoding), inputs=_level_inputs(shuffle_url, plan, level - 1, w, ranges_for(plan, level - 1, w, ranges)))
                for w in range(p)
            ]
            written = run.stage(f"level-{level + 1}", tasks)
        ranges = [r.value[0] for r in written]
        if not reduce_results:
            reduce_results = run.stage(
                "reduce",
                [
                    Task(
                        f"reduce-{r}",
                        reduce_partition,
                        (shuffle_url, plan, r, ranges_for(plan, plan.levels - 1, r, ranges), encoding, output_url, staging + out_keys[r], out_format),
                        inputs=_level_inputs(shuffle_url, plan, plan.levels - 1, r, ranges_for(plan, plan.levels - 1, r, ranges)),
                    )
                    for r in range(p)
                ],
            )
        records = sum(r.value[0] for r in reduce_results)
        parts = [{"key": k, "records": r.value[0], "bytes": r.value[1]} for k, r in zip(out_keys, reduce_results)]
        commit(out, staging, out_keys, {"job": "sort", "run_id": run.run_id, "format": out_format, "records": records, "parts": parts}, replaces)
        run.report.summary.update(
            records=records,
            workers=p,
            exchange=plan.name,
            shuffle_bytes=shuffle_bytes,
            measured_data_bytes=data_bytes,
            intermediate_format=encoding,
            output_format=out_format,
        )
        _compare_prediction(run, prediction)
    finally:
        run.store(shuffle_url).delete_prefix()
        out.delete_prefix(staging)  # parts of a failed run never left the staging prefix
        report = run.finish()
    return report


def _share_inputs(url: str, share: list[Piece]) -> tuple[tuple[str, str, int | None, int | None], ...]:
    """What a map task reads (for look-ahead prefetch): gensort byte ranges, whole Parquet objects."""
    return tuple((url, p.key, p.start * RECORD_SIZE, p.stop * RECORD_SIZE) if p.fmt == "gensort" else (url, p.key, None, None) for p in share)


def _level_inputs(url: str, plan: ExchangePlan, level: int, worker: int, ranges: list[tuple[int, int]] | None) -> tuple[tuple[str, str, int | None, int | None], ...]:
    """What a receiver at ``level`` reads (for look-ahead prefetch)."""
    out = []
    for i, read in enumerate(plan.reads(level, worker)):
        start, end = ranges[i] if read.ranged and ranges is not None else (None, None)
        out.append((url, read.key, start, end))
    return tuple(out)


def _bind(plan: ExchangePlan | None, workers: int | None, data_bytes: int, shuffle_url: str, config: Config, objective: str, budget: float | None, run: Run, algorithm: str | None = None):  # type: ignore[no-untyped-def]
    """Late binding: choose P and the plan from the measured D (unless given); record the choice."""
    from croupier.model.perf import predict
    from croupier.model.selector import choose

    profile = config.load_profile(shuffle_url)
    if plan is not None:
        prediction = predict(plan, data_bytes, profile, config.concurrency)
        run.report.summary["selector"] = f"plan given: {plan.name}, P={plan.workers}"
        return plan, prediction
    choice = choose(data_bytes, profile, objective, budget, workers=workers, concurrency=config.concurrency, max_workers=config.max_workers, algorithm=algorithm)
    run.report.summary["selector"] = choice.explain(rows=8)
    return choice.best.plan, choice.best


def _compare_prediction(run: Run, prediction) -> None:  # type: ignore[no-untyped-def]
    """Put predicted beside measured seconds per stage into the report."""
    measured = {s.name: s.wall_seconds for s in run.report.stages}
    rows = [f"{s.name} {s.seconds:.3f}/{measured.get(s.name, float('nan')):.3f}" for s in prediction.stages]
    total = sum(measured.get(s.name, 0.0) for s in prediction.stages)
    run.report.summary["predicted/measured s"] = ", ".join(rows) + f"; exchange {prediction.seconds:.3f}/{total:.3f}"


def _probe(run: Run, url: str, objects: list[ObjectInfo], tasks_n: int, workers: int | None, seed: int) -> tuple[list[int], tuple[np.ndarray, np.ndarray]]:
    """Probe stage: records per input object (hence D) and sampled composite keys with global rows.

    Samples enough keys for the largest P the selector may choose (~128 per reducer).
    """
    shares = plan_pieces(objects, tasks_n)
    target = max(MIN_SAMPLES, SAMPLES_PER_REDUCER * (workers or 256))
    per_task = target // tasks_n + 1
    results = run.stage("sample", [Task(f"sample-{m}", sample_share, (url, share, per_task, seed + m)) for m, share in enumerate(shares)])
    index = {o.key: i for i, o in enumerate(objects)}
    rows = [o.size // RECORD_SIZE for o in objects]
    found: list[tuple[int, np.ndarray, np.ndarray]] = []
    for share, result in zip(shares, results):
        for piece, (n, a, b) in zip(share, result.value):
            if piece.fmt == "parquet":
                rows[index[piece.key]] = n
            found.append((index[piece.key], np.frombuffer(a, np.uint64), np.frombuffer(b, np.uint64)))
    bases = np.concatenate([[0], np.cumsum(rows)]).astype(np.uint64)
    if int(bases[-1]) >= partition.MAX_ROWS:
        raise InputError(f"{url}: {int(bases[-1])} records exceed the supported 2**{partition.ROWPOS_BITS}")
    empty = np.empty(0, np.uint64)
    a = np.concatenate([f[1] for f in found]) if found else empty
    b = np.concatenate([f[2] + bases[f[0]] for f in found]) if found else empty
    return rows, (a, b)
