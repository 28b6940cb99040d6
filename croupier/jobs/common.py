"""Helpers the jobs share: finding input objects (a Croupier output is read by its manifest)."""

from __future__ import annotations

from croupier.errors import InputError
from croupier.storage import ObjectInfo, Store
from croupier.storage.commit import MANIFEST, read_manifest, read_parts

__all__ = ["MANIFEST", "list_inputs", "read_manifest"]


def list_inputs(store: Store) -> list[ObjectInfo]:
    """The data objects under ``store``, in order: a Croupier output's parts as its ``_SUCCESS``
    manifest lists them, else every object not marked as metadata (``_*``, ``.*``) by name."""
    objects = read_parts(store)
    if not objects:
        raise InputError(f"no input objects under {store.url}; check the path (and the endpoint for s3:// URLs)")
    return objects
