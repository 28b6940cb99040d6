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

from dataclasses import asdict, dataclass, field, replace
from typing import Mapping

from croupier.signals import handles_sigterm
from croupier.compute.base import Executor
from croupier.config import Config
from croupier.dag.operators import Operator
from croupier.dag.runner import DagRunner
from croupier.dag.stage import ResultSink, Stage, TaskSource
from croupier.dag.task import PiecesRead
from croupier.errors import InputError
from croupier.jobs.common import list_inputs
from croupier.dag.run import Run
from croupier.ops.formats import detect_format
from croupier.ops.records import RECORD_SIZE, RecordRuns, add_checksums, checksum, duplicate_count, key_columns, unsorted_count
from croupier.ops.terasort import Piece, row_group_pieces
from croupier.report import RunReport
from croupier.storage import ObjectInfo, Store, parse_location
from croupier.storage.commit import read_parts

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


@dataclass(frozen=True)
class Summarise(Operator):
    """valsort's kernel: count, checksum and (if asked) order statistics of one output piece."""

    check_order: bool = True
    kind = "records_validate"

    def apply(self, data: RecordRuns, sides: Mapping[str, object]) -> ObjectSummary:  # type: ignore[override]
        summary = ObjectSummary("")
        records = data.concatenated()
        if not len(records):
            return summary
        summary.records = len(records)
        summary.checksum = checksum(records)
        if self.check_order:
            hi, lo = key_columns(records)
            summary.unordered = unsorted_count(hi, lo)
            summary.duplicates = duplicate_count(hi, lo)
            summary.first_key = bytes(records[0, :10]).hex()
            summary.last_key = bytes(records[-1, :10]).hex()
        return summary

    def describe(self) -> str:
        return f"valsort: {'order, count and checksum' if self.check_order else 'count and checksum'}"


def _pieces(store: Store, objects: list[ObjectInfo]) -> list[Piece]:
    """Output objects cut into pieces of at most CHUNK_RECORDS records (gensort) or of whole row
    groups (Parquet), in output order, so a function's memory stays bounded."""
    pieces = []
    for o in objects:
        where = f"{store.url}/{o.key}"
        if detect_format(o.key) == "parquet":
            pieces += row_group_pieces(store, o.key, o.size, CHUNK_RECORDS)
            continue
        if o.size % RECORD_SIZE:
            raise InputError(f"{where}: size {o.size} bytes is not a multiple of the {RECORD_SIZE}-byte record size")
        n = o.size // RECORD_SIZE
        pieces += [Piece(o.key, "gensort", a, min(n, a + CHUNK_RECORDS)) for a in range(0, n, CHUNK_RECORDS)] or [Piece(o.key, "gensort", 0, 0)]
    return pieces


def _output_objects(store: Store) -> list[ObjectInfo]:
    """The output's objects: those ``_SUCCESS`` lists (checked to exist), else all data objects."""
    objects = read_parts(store)
    if not objects:
        raise InputError(f"no output objects under {store.url}; check the path (and the endpoint for s3:// URLs)")
    return objects


@handles_sigterm  # SIGTERM cleans up like Ctrl-C (issue 12, promise 6)
def valsort(output_url: str, config: Config, input_url: str | None = None, executor: Executor | None = None) -> tuple[ValsortResult, RunReport]:
    """Validate the sorted output under ``output_url`` (against ``input_url`` when given)."""
    output = parse_location(output_url)
    run = Run("valsort", config, executor)
    runner: DagRunner | None = None
    try:
        runner = DagRunner(run, str(run.open_tmp(output)))
        output_url = str(output)
        input_url = str(parse_location(input_url)) if input_url is not None else None
        out_store = run.store(output_url)
        outputs = _pieces(out_store, _output_objects(out_store))
        stages = [_summary_stage("validate", output_url, outputs, True)]
        if input_url is not None:
            in_store = run.store(input_url)
            stages.append(_summary_stage("checksum", input_url, _pieces(in_store, list_inputs(in_store)), False))
        for s in stages:
            runner.submit(s)  # both stages run side by side
        result = _join(_named(outputs, runner.result(stages[0]).values))
        if input_url is not None:
            _compare(result, list(runner.result(stages[1]).values))
        run.report.summary.update({k: v for k, v in result.to_dict().items() if k != "problems"})
        run.report.summary["problems"] = "; ".join(result.problems) or "none"
    finally:
        if runner is not None:
            runner.close()
        report = run.finish()
    return result, report


def _summary_stage(name: str, url: str, pieces: list[Piece], check_order: bool) -> Stage:
    """A stage of one task per piece, each returning its piece's :class:`ObjectSummary`."""
    reads = tuple(PiecesRead(url, (p,)) for p in pieces)
    return Stage(name, TaskSource(reads), ops=(Summarise(check_order),), sink=ResultSink(), rep="records")


def _named(pieces: list[Piece], summaries: list[ObjectSummary]) -> list[ObjectSummary]:
    return [replace(s, key=p.key) for p, s in zip(pieces, summaries)]


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
