"""The valsort job: prove a sort output correct, as the sort benchmark's valsort does.

Checks, over all output objects in name order (or the order ``_SUCCESS`` lists them):
  * global order: keys never decrease inside an object nor across object boundaries;
  * record count: equal to the input's;
  * checksum: the order-independent sum of record hashes equals the input's, so no record was
    lost, duplicated or altered.
Objects are validated in parallel by the workers, gensort objects in chunks of ranged reads so a
worker's memory stays bounded; the driver joins the per-object summaries.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from croupier.compute.base import Executor, Task
from croupier.compute.context import TaskContext
from croupier.config import Config
from croupier.errors import InputError
from croupier.jobs.common import list_inputs, read_manifest
from croupier.jobs.runtime import Run
from croupier.ops.formats import detect_format, read_records, records_from_table
from croupier.ops.records import RECORD_SIZE, add_checksums, checksum, duplicate_count, key_columns, unsorted_count
from croupier.report import RunReport
from croupier.storage import ObjectInfo, Store
from croupier.storage.rangefile import RangeFile

CHUNK_RECORDS = 1 << 19  # 52 MB of records per ranged read


@dataclass
class ObjectSummary:
    """What validating one object found."""

    key: str
    records: int = 0
    checksum: int = 0
    unordered: int = 0
    duplicates: int = 0
    first_key: str = ""  # hex
    last_key: str = ""


@dataclass
class ValsortResult:
    """Verdict over a whole output, with the reasons when it fails."""

    records: int = 0
    checksum: int = 0
    unordered: int = 0
    duplicates: int = 0
    input_records: int | None = None
    input_checksum: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when order, count and checksum all hold."""
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        """JSON-friendly form (checksums as hex)."""
        data = asdict(self)
        data["checksum"] = f"{self.checksum:016x}"
        if self.input_checksum is not None:
            data["input_checksum"] = f"{self.input_checksum:016x}"
        data["ok"] = self.ok
        return data


def iter_chunks(store: Store, info: ObjectInfo) -> Iterator[np.ndarray]:
    """Records of one object in bounded chunks, by ranged reads (gensort: record ranges; Parquet:
    batches of row groups through a ranged-read file), so memory does not grow with object size."""
    where = f"{store.url}/{info.key}"
    fmt = detect_format(info.key)
    if fmt == "parquet":
        yield from _parquet_chunks(store, info, where)
        return
    if info.size % RECORD_SIZE:
        raise InputError(f"{where}: size {info.size} bytes is not a multiple of the {RECORD_SIZE}-byte record size")
    step = CHUNK_RECORDS * RECORD_SIZE
    if info.size <= step:
        yield read_records(store.get(info.key), fmt, where)
        return
    for start in range(0, info.size, step):
        yield read_records(store.get_range(info.key, start, min(info.size, start + step)), fmt, where)


def _parquet_chunks(store: Store, info: ObjectInfo, where: str) -> Iterator[np.ndarray]:
    try:
        parquet = pq.ParquetFile(RangeFile(store, info.key, info.size), buffer_size=8 << 20)
        for batch in parquet.iter_batches(batch_size=CHUNK_RECORDS, columns=["key", "payload"]):
            yield records_from_table(pa.Table.from_batches([batch]), where)
    except (pa.ArrowInvalid, OSError, KeyError) as exc:
        raise InputError(f"{where}: not a readable TeraSort Parquet file ({exc}); is it truncated or corrupt?") from exc


def summarise_object(ctx: TaskContext, url: str, info: ObjectInfo, check_order: bool) -> ObjectSummary:
    """Task: count, checksum and (if asked) order statistics of one object."""
    summary = ObjectSummary(info.key)
    prev: np.ndarray | None = None
    for records in iter_chunks(ctx.store(url), info):
        if not len(records):
            continue
        summary.records += len(records)
        summary.checksum = add_checksums(summary.checksum, checksum(records))
        if check_order:
            joined = records if prev is None else np.concatenate([prev, records])
            hi, lo = key_columns(joined)
            summary.unordered += unsorted_count(hi, lo)
            summary.duplicates += duplicate_count(hi, lo)
            if prev is None:
                summary.first_key = bytes(records[0, :10]).hex()
            prev = records[-1:]
    if prev is not None:
        summary.last_key = bytes(prev[0, :10]).hex()
    return summary


def _output_objects(store: Store) -> list[ObjectInfo]:
    """The output's objects: those ``_SUCCESS`` lists (checked to exist), else all data objects."""
    manifest = read_manifest(store)
    if manifest is None or "parts" not in manifest or not isinstance(manifest["parts"], list):
        return list_inputs(store)
    listed = {o.key: o for o in store.list()}
    objects = []
    for part in manifest["parts"]:
        if part["key"] not in listed:
            raise InputError(f"{store.url}: _SUCCESS lists {part['key']} but it is missing")
        objects.append(listed[part["key"]])
    return objects


def valsort(output_url: str, config: Config, input_url: str | None = None, executor: Executor | None = None) -> tuple[ValsortResult, RunReport]:
    """Validate the sorted output under ``output_url`` (against ``input_url`` when given)."""
    run = Run("valsort", config, executor)
    config = run.config  # the executor's platform limits (e.g. Lithops) included
    try:
        outputs = _output_objects(run.store(output_url))
        tasks = [Task(f"validate-{i}", summarise_object, (output_url, o, True)) for i, o in enumerate(outputs)]
        summaries = [r.value for r in run.stage("validate", tasks)]
        result = _join(summaries)
        if input_url is not None:
            inputs = list_inputs(run.store(input_url))
            tasks = [Task(f"checksum-{i}", summarise_object, (input_url, o, False)) for i, o in enumerate(inputs)]
            _compare(result, [r.value for r in run.stage("checksum", tasks)])
        run.report.summary.update({k: v for k, v in result.to_dict().items() if k != "problems"})
        run.report.summary["problems"] = "; ".join(result.problems) or "none"
    finally:
        report = run.finish()
    return result, report


def _join(summaries: list[ObjectSummary]) -> ValsortResult:
    """Combine per-object summaries; check order across object boundaries."""
    result = ValsortResult()
    last: tuple[str, str] | None = None
    for s in summaries:
        result.records += s.records
        result.checksum = add_checksums(result.checksum, s.checksum)
        result.unordered += s.unordered
        result.duplicates += s.duplicates
        if s.unordered:
            result.problems.append(f"{s.key}: {s.unordered} record(s) out of order")
        if not s.records:
            continue
        if last is not None and bytes.fromhex(s.first_key) < bytes.fromhex(last[1]):
            result.unordered += 1
            result.problems.append(f"{s.key}: first key {s.first_key} is below the last key {last[1]} of {last[0]}")
        last = (s.key, s.last_key)
    return result


def _compare(result: ValsortResult, inputs: list[ObjectSummary]) -> None:
    """Check the output's record count and checksum against the input's."""
    result.input_records = sum(s.records for s in inputs)
    result.input_checksum = 0
    for s in inputs:
        result.input_checksum = add_checksums(result.input_checksum, s.checksum)
    if result.records != result.input_records:
        result.problems.append(f"record count {result.records} differs from the input's {result.input_records}")
    elif result.checksum != result.input_checksum:
        result.problems.append(f"checksum {result.checksum:016x} differs from the input's {result.input_checksum:016x}: records were altered")
