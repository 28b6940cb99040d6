"""The minimal interface a storage backend implements.

Backends do raw I/O only: no retries, no counting, no key prefixes; :class:`croupier.storage.Store`
adds those once for every backend. A backend raises :class:`ObjectNotFound` for missing keys,
:class:`TransientStorageError` for failures worth retrying and :class:`StorageError` otherwise.

Conditional writes (what the output commit protocol and its writer lock stand on):

* ``put_create`` stores an object only if none exists at the key (S3 ``If-None-Match: *``; a
  hard link locally, which fails atomically if the name exists) and raises :class:`ObjectExists`
  otherwise;
* ``put_replace`` replaces an object only if its current version is the one given (S3
  ``If-Match: <etag>``; locally a version token checked and replaced under ``flock``) and raises
  :class:`VersionMismatch` otherwise, also when the object is gone.

Both return the new object's version, which ``head`` also reports. Every key a backend receives
is checked by :func:`croupier.storage.location.check_key`, so every store refuses the same names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from croupier.storage.location import Location

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True)
class ObjectInfo:
    """Name and size of one stored object (key relative to the store's root), and its version
    (an opaque token for :meth:`Backend.put_replace`; ``head`` fills it, listings may not)."""

    key: str
    size: int
    version: str | None = None


class Backend(ABC):
    """Raw object storage under one root (a folder, or a bucket and prefix).

    ``list`` yields pages so that the caller can count one LIST request per page, as S3 bills.
    """

    #: Largest number of keys one DELETE request removes (S3 DeleteObjects takes 1000).
    delete_batch: int = 1000
    #: The store's root.
    location: Location

    @abstractmethod
    def put(self, key: str, parts: Sequence[Buffer]) -> None:
        """Store the concatenation of ``parts`` at ``key``; readers see all of it or nothing."""

    @abstractmethod
    def put_create(self, key: str, parts: Sequence[Buffer]) -> str:
        """Store ``parts`` at ``key`` only if no object is there; return the new version.
        Raise :class:`ObjectExists` if one is."""

    @abstractmethod
    def put_replace(self, key: str, parts: Sequence[Buffer], version: str) -> str:
        """Replace the object at ``key`` only if its current version is ``version``; return the
        new version. Raise :class:`VersionMismatch` if it has another version or is gone."""

    @abstractmethod
    def get(self, key: str) -> Buffer:
        """Return the whole object."""

    @abstractmethod
    def get_range(self, key: str, start: int, end: int) -> Buffer:
        """Return bytes [start, end) of the object."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Return the object's size and version without reading it."""

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

    def purge_partial(self, prefix: str, contains: str = "") -> None:
        """Remove leftovers of interrupted writes under ``prefix`` (only those of objects whose
        name contains ``contains``) that listing does not show; S3 PUTs are all-or-nothing, so
        the default has nothing to do."""

    def subfolders(self, prefix: str) -> list[str]:
        """Names of the folders directly under ``prefix`` (ending in ``/``), also empty ones. Object
        stores have no folders, only keys: the default has none."""
        return []

    def open_local(self, key: str) -> int | None:
        """A read-only file descriptor of the object at ``key`` when it is a file on this machine
        (a decoder then reads the parts it needs in place, with no copy), else None (the default:
        objects are fetched by request). The caller closes it."""
        return None

    def close(self) -> None:
        """Release connections or handles; the default has none."""

    @property
    @abstractmethod
    def url(self) -> str:
        """URL of the root, without credentials."""
