"""Committing a job's output: parts written under run-unique names, the manifest written last.

Tasks write their parts directly under their final names (``part-<task>-<tag>...``, the tag is
unique to the run), so nothing is renamed or copied; the ``_SUCCESS`` manifest listing them is
the one commit point; parts of the replaced output are deleted after it. A failed run deletes its
own parts and leaves the old output as it was.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import polars as pl

from croupier.errors import OutputExistsError
from croupier.storage import Store

MANIFEST = "_SUCCESS"
TMP = "_croupier_tmp/"


class OutputWriter:
    """One job's output under ``store`` (see the module docstring).

    State:
        tag:      run-unique part-name tag
        replaces: keys of the output being replaced (``overwrite``), deleted after the commit
    """

    def __init__(self, url: str, overwrite: bool, tag: str | None = None) -> None:
        self.url = url
        self.overwrite = overwrite
        self.tag = tag or uuid.uuid4().hex[:8]
        self.replaces: list[str] = []
        self._store: Store | None = None

    def attach(self, store: Store, run_id: str) -> None:
        """Use ``store`` (the run's, so requests are counted) for the output of run ``run_id``."""
        self._store = store
        self.run_id = run_id

    @property
    def store(self) -> Store:
        assert self._store is not None, "OutputWriter used before attach()"
        return self._store

    def begin(self) -> None:
        """Check the output may be written: empty, or ``overwrite`` set."""
        existing = [o for o in self.store.list() if not o.key.startswith(TMP)]
        if existing and not self.overwrite:
            raise OutputExistsError(
                f"output {self.store.url} already holds {len(existing)} object(s) (e.g. {existing[0].key}); choose another output or pass --overwrite"
            )
        self.replaces = [o.key for o in existing]

    def commit(self, out: Any, fields: dict[str, Any]) -> list[str]:
        """Make the output of the final stage ``out`` visible; return its part names in order."""
        files = sorted(out.files)
        if not files:  # no task had rows: one empty file with the schema
            name = f"part-00000-{self.tag}.{out.stage.sink.fmt}"
            self.store.put(name, _empty(out.schema, out.stage.sink.fmt))
            files = [(name, 0, 0)]
        unit = "records" if out.stage.sink.fmt.startswith("records-") else "rows"
        parts = [{"key": name, unit: rows, "bytes": size} for name, rows, size in files]
        fmt = out.stage.sink.fmt.removeprefix("records-")
        manifest = {"croupier_manifest": 1, **fields, "tag": self.tag, "format": fmt, unit: sum(p[unit] for p in parts), "parts": parts}
        self.store.put(MANIFEST, json.dumps(manifest, indent=1).encode())
        names = [p["key"] for p in parts]
        self.store.delete(sorted(set(self.replaces) - set(names) - {MANIFEST}))
        self.replaces = []
        return names

    def abort(self) -> None:
        """Delete this run's parts (the old output is untouched)."""
        if self._store is None:
            return
        mine = [o.key for o in self.store.list() if f"-{self.tag}" in o.key and not o.key.startswith(TMP)]
        self.store.delete(mine)


def _empty(schema: pl.Schema | None, fmt: str) -> bytes:
    import io

    buf = io.BytesIO()
    frame = pl.DataFrame(schema=schema or {})
    if fmt == "csv":
        frame.write_csv(buf)
    else:
        frame.write_parquet(buf)
    return buf.getvalue()
