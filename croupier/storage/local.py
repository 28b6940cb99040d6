"""Local-folder backend: the embedded default object store.

Keys map to files under a root folder, ``/`` separating folders. A put writes a hidden temporary
file in the target folder and renames it into place (``os.replace`` is atomic on POSIX), so a
reader never sees a partial object. Listings skip those temporary files.

Conditional writes:

* ``put_create`` writes the temporary file, then hard-links it to the key: ``link(2)`` fails
  atomically with EEXIST when the name exists, so of several creators exactly one wins.
* ``put_replace`` opens the current file, takes an exclusive ``flock`` on it, checks that the key
  still names that very file and that its version token (``<mtime ns>-<inode>-<size>``) is the
  expected one, then renames the new file into place. Every replacer locks the file it replaces,
  so the check and the rename are atomic among Croupier processes on this machine (``flock`` is
  not reliable across machines on network file systems).
"""

from __future__ import annotations

import errno
import fcntl
import os
import uuid
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from croupier.errors import ObjectExists, ObjectNotFound, StorageError, TransientStorageError, VersionMismatch
from croupier.storage.backend import Backend, Buffer, ObjectInfo
from croupier.storage.location import Location, check_key, parse_location

_TMP_MARK = ".croupier-partial-"
_TRANSIENT_ERRNOS = {errno.EAGAIN, errno.EINTR, errno.EBUSY}
#: What link(2) answers on file systems without hard links.
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV}
#: Times a write retries when a concurrent cleanup removed its (empty) folder under it.
_FOLDER_RACES = 5


class LocalBackend(Backend):
    """Objects as files under ``root`` (a folder path or a ``file://`` location)."""

    def __init__(self, root: str | os.PathLike[str] | Location) -> None:
        location = parse_location(root)
        if not location.is_local:
            raise StorageError(f"{location} is not a local folder")
        self.location = location
        self._root = Path(location.path)

    @property
    def url(self) -> str:
        return str(self.location)

    def _path(self, key: str) -> Path:
        return self._root / check_key(key, self.url)

    def put(self, key: str, parts: Sequence[Buffer]) -> None:
        self._write(key, parts, _replace)

    def put_create(self, key: str, parts: Sequence[Buffer]) -> str:
        return self._write(key, parts, _link)

    def put_replace(self, key: str, parts: Sequence[Buffer], version: str) -> str:
        path = self._path(key)
        try:
            f = open(path, "rb")
        except FileNotFoundError as exc:
            raise VersionMismatch(f"{self.url}/{key}: expected version {version}, but the object is gone") from exc
        except OSError as exc:
            raise _translate(exc, self.url, key) from exc
        with f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # released when f closes
            held = os.fstat(f.fileno())
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            if current is None or current.st_ino != held.st_ino or file_version(held) != version:
                now = "gone" if current is None else f"at version {file_version(current)}"
                raise VersionMismatch(f"{self.url}/{key}: expected version {version}, but the object is {now}")
            return self._write(key, parts, _replace)

    def _write(self, key: str, parts: Sequence[Buffer], place: Callable[[Path, Path], str | None]) -> str:
        """Write ``parts`` to a hidden temporary file beside ``key``, then ``place`` it at the key;
        return the new version. A folder removed under the writer by a concurrent cleanup is
        made again."""
        path = self._path(key)
        tmp = path.with_name(f"{_TMP_MARK}{path.name}.{uuid.uuid4().hex[:12]}")
        for attempt in range(_FOLDER_RACES):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(tmp, "wb") as f:
                    f.writelines(parts)
                    f.flush()
                    version = file_version(os.fstat(f.fileno()))
                return place(tmp, path) or version
            except FileNotFoundError as exc:  # the folder vanished between mkdir and the write
                tmp.unlink(missing_ok=True)
                if attempt == _FOLDER_RACES - 1:
                    raise _translate(exc, self.url, key) from exc
            except FileExistsError as exc:
                raise ObjectExists(f"{self.url}/{key} already exists") from exc
            except OSError as exc:
                raise _translate(exc, self.url, key) from exc
            finally:  # also on Ctrl-C mid-write: no partial file left behind
                tmp.unlink(missing_ok=True)
        raise AssertionError("unreachable")

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

    def open_local(self, key: str) -> int | None:
        try:
            return os.open(self._path(key), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise _translate(exc, self.url, key) from exc

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
        return ObjectInfo(key, st.st_size, file_version(st))

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
                            found.append(ObjectInfo(key, (st := os.stat(full)).st_size, file_version(st)))
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


    def purge_partial(self, prefix: str, contains: str = "") -> None:
        """Remove what writers killed mid-write left under ``prefix`` (partial temp files of
        objects whose name contains ``contains``), and then-empty folders. Listing never shows
        these files, so deleting listed keys cannot."""
        base_dir = self._root / prefix.rpartition("/")[0] if "/" in prefix else self._root
        if not base_dir.is_dir():
            return
        for dirpath, _dirnames, filenames in os.walk(base_dir, topdown=False):
            for name in filenames:
                key = os.path.relpath(os.path.join(dirpath, name), self._root).replace(os.sep, "/")
                if name.startswith(_TMP_MARK) and key.startswith(prefix) and contains in name[len(_TMP_MARK) :]:
                    Path(dirpath, name).unlink(missing_ok=True)
            folder = os.path.relpath(dirpath, self._root).replace(os.sep, "/") + "/"
            if not contains and folder.startswith(prefix) and folder != "./":
                _remove_empty_folders(Path(dirpath), self._root)


    def subfolders(self, prefix: str) -> list[str]:
        """Names of the folders directly under ``prefix`` (which ends in ``/``), empty ones too."""
        folder = self._root / prefix
        try:
            return sorted(e.name for e in os.scandir(folder) if e.is_dir(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return []


def _remove_empty_folders(folder: Path, root: Path) -> None:
    """Remove ``folder`` and its parents up to (not including) ``root`` while they are empty."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def file_version(st: os.stat_result) -> str:
    """A file's version token: modification time (ns), inode and size (what a listing gives as
    :attr:`ObjectInfo.version`; a file replaced by a rename has a new inode)."""
    return f"{st.st_mtime_ns:x}-{st.st_ino:x}-{st.st_size:x}"


def _replace(tmp: Path, path: Path) -> None:
    """Give the finished temporary file the key's name, replacing what is there (atomic)."""
    os.replace(tmp, path)


def _link(tmp: Path, path: Path) -> str | None:
    """Give the finished temporary file the key's name unless that name exists (atomic). On a
    file system without hard links, fall back to an exclusive create (``O_EXCL``) and a copy:
    still exactly one creator wins, though a reader may then see the new file before it is full."""
    try:
        os.link(tmp, path)
        return None  # the temporary file's version: the same file
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as out, open(tmp, "rb") as src:
        out.write(src.read())
        out.flush()
        return file_version(os.fstat(out.fileno()))


def _translate(exc: OSError, url: str, key: str) -> Exception:
    """Map an OSError to Croupier's storage errors, naming the object."""
    where = f"{url}/{key}"
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return ObjectNotFound(where)
    if exc.errno in _TRANSIENT_ERRNOS:
        return TransientStorageError(f"transient error on {where}: {exc.strerror}")
    return StorageError(f"storage error on {where}: {exc}")
