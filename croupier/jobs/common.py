"""Helpers the jobs share: finding input objects, guarding outputs, the success manifest."""

from __future__ import annotations

import json
from typing import Any

from croupier.errors import InputError, ObjectNotFound, OutputExistsError
from croupier.ops.formats import is_hidden
from croupier.storage import ObjectInfo, Store

MANIFEST = "_SUCCESS"
#: Folder (in the output store) under which runs keep objects that are not final yet.
STAGING = "_croupier_tmp"


def list_inputs(store: Store) -> list[ObjectInfo]:
    """Data objects under ``store`` in name order (metadata such as ``_SUCCESS`` skipped)."""
    objects = [o for o in store.list() if not is_hidden(o.key)]
    if not objects:
        raise InputError(f"no input objects under {store.url}; check the path (and the endpoint for s3:// URLs)")
    return objects


def prepare_output(store: Store, overwrite: bool) -> list[str]:
    """Check ``store`` may be written: empty, or ``overwrite`` set. Return the keys it holds now;
    they are replaced only when the new output commits (see :func:`commit`), so a failed job
    leaves the old output as it was."""
    existing = [o for o in store.list() if not o.key.startswith(STAGING + "/")]
    if existing and not overwrite:
        raise OutputExistsError(
            f"output {store.url} already holds {len(existing)} object(s) (e.g. {existing[0].key}); "
            "choose another output or pass --overwrite"
        )
    return [o.key for o in existing]


def write_manifest(store: Store, manifest: dict[str, Any]) -> None:
    """Commit a job's output by writing ``_SUCCESS`` (JSON) last."""
    store.put(MANIFEST, json.dumps(manifest, indent=1).encode())


def read_manifest(store: Store) -> dict[str, Any] | None:
    """The ``_SUCCESS`` manifest of a finished job's output, or None if there is none."""
    try:
        data = store.get(MANIFEST)
    except ObjectNotFound:
        return None
    try:
        return json.loads(bytes(data))  # type: ignore[no-any-return]
    except ValueError as exc:
        raise InputError(f"{store.url}/{MANIFEST}: not a valid manifest ({exc})") from exc


def commit(store: Store, staging: str, keys: list[str], manifest: dict[str, Any], replaces: list[str] = ()) -> None:  # type: ignore[assignment]
    """Make a job's output visible: remove the old ``_SUCCESS``, move ``staging + key`` to ``key``
    for every key, delete what remains of the old output (``replaces``), then write ``_SUCCESS``.
    If a move fails, the parts already moved are deleted again."""
    if MANIFEST in replaces:
        store.delete([MANIFEST])
    moved: list[str] = []
    try:
        for key in keys:
            store.rename(staging + key, key)
            moved.append(key)
        store.delete(sorted(set(replaces) - set(keys) - {MANIFEST}))
        write_manifest(store, manifest)
    except BaseException:
        store.delete(moved)
        raise
