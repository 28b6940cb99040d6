"""A job's final stage as the parts of its output's commit (:mod:`croupier.storage.commit`).

Tasks of an output stage write their files directly under final, run-unique names
(``part-<task>-<tag>...``); this turns what they reported into the manifest's parts and commits
them. A stage that wrote no file (no task had rows) gets one empty file with the schema, so the
output always has at least one part a reader can take the schema from.
"""

from __future__ import annotations

import io
from typing import Any

import polars as pl

from croupier.storage.commit import OutputCommit, Part


def commit_stage(commit: OutputCommit, out: Any, fields: dict[str, Any]) -> list[str]:
    """Commit the files the output stage ``out`` (a :class:`~croupier.dag.runner.StageOutput`)
    wrote; return the part names in order."""
    sink_fmt = out.stage.sink.fmt
    fmt = sink_fmt.removeprefix("records-")
    files = sorted(out.files)
    if not files:
        name = f"part-00000-{commit.tag}" + ("" if fmt == "gensort" else f".{fmt}")
        schema = out.schema if out.schema is not None or fmt != "parquet" else pl.Schema({"key": pl.Binary, "payload": pl.Binary})
        blob = _empty(schema, fmt)
        commit.store.put(name, blob)
        files = [(name, 0, len(blob))]
    unit = "records" if sink_fmt.startswith("records-") else "rows"
    parts = [Part(name, size, rows) for name, rows, size in files]
    return commit.commit(parts, unit, fmt, fields)


def _empty(schema: pl.Schema | None, fmt: str) -> bytes:
    """An empty file of ``fmt`` with the columns of ``schema`` (gensort: no bytes at all)."""
    if fmt == "gensort":
        return b""
    buf = io.BytesIO()
    frame = pl.DataFrame(schema=schema or {})
    if fmt == "csv":
        frame.write_csv(buf)
    else:
        frame.write_parquet(buf)
    return buf.getvalue()
