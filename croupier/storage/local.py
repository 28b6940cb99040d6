"""Local-folder backend: the embedded default object store.

Keys map to files under a root folder, ``/`` separating folders. A put writes a hidden temporary
file in the target folder and renames it into place (``os.replace`` is atomic on POSIX), so a
reader never sees a partial object. Listings skip those temporary files.
"""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path
from typing import Sequence

import numpy as np

from croupier.errors import ObjectNotFound, StorageError, TransientStorageError
from croupier.storage.backend import Backend, Buffer, ObjectInfo

_TMP_MARK = ".croupier-partial-"
_TRANSIENT_ERRNOS = {errno.EAGAIN, errno.EINTR, errno.EBUSY}


class LocalBackend(Backend):
    """Objects as files under ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root).resolve()

    @property
    def url(self) -> str:
        return self._root.as_uri()

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise StorageError(f"invalid object key {key!r} under {self.url}: keys are relative and must not contain '..'")
        return self._root / key

    def put(self, key: str, parts: Sequence[Buffer]) -> None:
        path = self._path(key)
        tmp = path.with_name(f"{_TMP_MARK}{path.name}.{uuid.uuid4().hex[:12]}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                for part in parts:
                    f.write(part)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise _translate(exc, self.url, key) from exc
        except BaseException:  # Ctrl-C mid-write: no partial file left behind
            tmp.unlink(missing_ok=True)
            raise

    def rename(self, src: str, dst: str) -> None:
        """Atomic move within the folder (``os.replace``)."""
        target = self._path(dst)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._path(src), target)
        except OSError as exc:
            raise _translate(exc, self.url, src) from exc

    def get(self, key: str) -> Buffer:
        return self._read(key, 0, None)

    def get_range(self, key: str, start: int, end: int) -> Buffer:
        return self._read(key, start, end)

    def _read(self, key: str, start: int, end: int | None) -> Buffer:
        """Read [start, end) (end=None: to the end) into fresh, non-zeroed memory.

        numpy's ``empty`` neither zeroes the buffer (as ``bytearray`` does) nor copies it again
        (as ``os.pread`` into ``bytes`` does): one pass over the memory instead of two.
        """
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                stop = size if end is None else min(end, size)
                buf = np.empty(max(0, stop - start), dtype=np.uint8)
                read = os.preadv(f.fileno(), [buf], start) if len(buf) else 0
        except OSError as exc:
            raise _translate(exc, self.url, key) from exc
        return memoryview(buf[:read])

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = path.stat()
        except OSError as exc:
            raise _translate(exc, self.url, key) from exc
        if not path.is_file():
            raise ObjectNotFound(f"{self.url}/{key}")
        return ObjectInfo(key, st.st_size)

    def list_pages(self, prefix: str) -> list[list[ObjectInfo]]:
        base_dir = self._root / prefix.rpartition("/")[0] if "/" in prefix else self._root
        found: list[ObjectInfo] = []
        if base_dir.is_dir():
            for dirpath, _dirnames, filenames in os.walk(base_dir):
                for name in filenames:
                    if name.startswith(_TMP_MARK):
                        continue
                    full = os.path.join(dirpath, name)
                    key = os.path.relpath(full, self._root).replace(os.sep, "/")
                    if key.startswith(prefix):
                        try:
                            found.append(ObjectInfo(key, os.path.getsize(full)))
                        except FileNotFoundError:
                            continue  # deleted while listing
        found.sort(key=lambda o: o.key)
        return [found[i : i + 1000] for i in range(0, len(found), 1000)] or [[]]

    def delete(self, keys: Sequence[str]) -> None:
        folders: set[Path] = set()
        for key in keys:
            path = self._path(key)
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise _translate(exc, self.url, key) from exc
            folders.add(path.parent)
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            _remove_empty_folders(folder, self._root)


    def purge_partial(self, prefix: str) -> None:
        """Remove what writers killed mid-write left under ``prefix`` (partial temp files), and
        then-empty folders. Listing never shows these files, so deleting listed keys cannot."""
        base_dir = self._root / prefix.rpartition("/")[0] if "/" in prefix else self._root
        if not base_dir.is_dir():
            return
        for dirpath, _dirnames, filenames in os.walk(base_dir, topdown=False):
            for name in filenames:
                key = os.path.relpath(os.path.join(dirpath, name), self._root).replace(os.sep, "/")
                if name.startswith(_TMP_MARK) and key.startswith(prefix):
                    Path(dirpath, name).unlink(missing_ok=True)
            _remove_empty_folders(Path(dirpath), self._root)


def _remove_empty_folders(folder: Path, root: Path) -> None:
    """Remove ``folder`` and its parents up to (not including) ``root`` while they are empty."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _translate(exc: OSError, url: str, key: str) -> Exception:
    """Map an OSError to Croupier's storage errors, naming the object."""
    where = f"{url}/{key}"
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return ObjectNotFound(where)
    if exc.errno in _TRANSIENT_ERRNOS:
        return TransientStorageError(f"transient error on {where}: {exc.strerror}")
    return StorageError(f"storage error on {where}: {exc}")
