"""The minimal interface a storage backend implements.

Backends do raw I/O only: no retries, no counting, no key prefixes; :class:`croupier.storage.Store`
adds those once for every backend. A backend raises :class:`ObjectNotFound` for missing keys,
:class:`TransientStorageError` for failures worth retrying and :class:`StorageError` otherwise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True)
class ObjectInfo:
    """Name and size of one stored object (key relative to the store's root)."""

    key: str
    size: int


class Backend(ABC):
    """Raw object storage under one root (a folder, or a bucket and prefix).

    ``list`` yields pages so that the caller can count one LIST request per page, as S3 bills.
    """

    #: Largest number of keys one DELETE request removes (S3 DeleteObjects takes 1000).
    delete_batch: int = 1000

    @abstractmethod
    def put(self, key: str, parts: Sequence[Buffer]) -> None:
        """Store the concatenation of ``parts`` at ``key``; readers see all of it or nothing."""

    @abstractmethod
    def get(self, key: str) -> Buffer:
        """Return the whole object."""

    @abstractmethod
    def get_range(self, key: str, start: int, end: int) -> Buffer:
        """Return bytes [start, end) of the object."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Return the object's size without reading it."""

    @abstractmethod
    def list_pages(self, prefix: str) -> list[list[ObjectInfo]]:
        """Return all objects whose key starts with ``prefix``, as the pages the backend fetched."""

    @abstractmethod
    def delete(self, keys: Sequence[str]) -> None:
        """Delete up to ``delete_batch`` keys; keys that do not exist are ignored."""

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` (replacing it); the default copies through the client, then deletes."""
        self.put(dst, [self.get(src)])
        self.delete([src])

    def purge_partial(self, prefix: str) -> None:
        """Remove leftovers of interrupted writes under ``prefix`` that listing does not show; S3
        PUTs are all-or-nothing, so the default has nothing to do."""

    def close(self) -> None:
        """Release connections or handles; the default has none."""

    @property
    @abstractmethod
    def url(self) -> str:
        """URL of the root, without credentials."""
