"""S3-compatible backend through obstore (AWS S3, SeaweedFS, MinIO, IBM COS, ...).

obstore's own retries are switched off: :class:`croupier.storage.Store` retries transient failures
itself, in one place, so that every attempt is counted and every backend behaves alike.

Conditional writes are S3's: ``put_create`` sends ``If-None-Match: *`` (obstore's ``mode="create"``;
AWS S3 since August 2024, SeaweedFS 4.48 and MinIO answer 412 when the key exists) and
``put_replace`` sends ``If-Match: <etag>`` (obstore's update mode; 412 when the ETag differs, 404
or 412 when the object is gone). A version is the object's ETag.
"""

from __future__ import annotations

import math
import os
import threading
from datetime import timedelta
from typing import Sequence

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.exceptions import BaseError as ObstoreError
from obstore.store import S3Store

from croupier.config import S3Options
from croupier.redact import redact
from croupier.errors import (
    ConfigError,
    ObjectExists,
    ObjectNotFound,
    StorageError,
    TransientStorageError,
    VersionMismatch,
)
from croupier.storage.backend import Backend, Buffer, ObjectInfo
from croupier.storage.location import MAX_S3_KEY_BYTES, Location, check_key, check_prefix

_TRANSIENT_MARKERS = (
    "status code: 5",
    "slowdown",
    "slow down",
    "timed out",
    "timeout",
    "connection",
    "reset by peer",
    "broken pipe",
    "error sending request",
    "incomplete",
)


class S3Backend(Backend):
    """Objects under ``prefix`` in ``bucket`` of an S3-compatible endpoint."""

    def __init__(self, location: Location, options: S3Options, request_timeout: float) -> None:
        if not location.is_s3:
            raise StorageError(f"{location} is not an S3 location")
        self.location = location
        self._prefix = location.path
        self._root = f"{self._prefix}/" if self._prefix else ""  # prepended to keys: one client serves every prefix
        self._endpoint = options.endpoint
        self._store = _client(location.bucket, options, request_timeout)

    @property
    def url(self) -> str:
        root = str(self.location)
        return f"{root} (endpoint {redact(self._endpoint)})" if self._endpoint else root

    def _key(self, key: str) -> str:
        """``key``, checked like every store checks keys, and within S3's key length."""
        check_key(key, str(self.location))
        if len(self._prefix.encode()) + 1 + len(key.encode()) > MAX_S3_KEY_BYTES:
            raise ConfigError(f"{self.location}/{key}: S3 keys are at most {MAX_S3_KEY_BYTES} bytes")
        return key

    def _path(self, key: str) -> str:
        """``key``'s path in the bucket."""
        return self._root + self._key(key)

    def put(self, key: str, parts: Sequence[Buffer]) -> None:
        data = _joined(parts)
        path = self._path(key)
        self._call(key, lambda: obstore.put(self._store, path, data))

    def put_create(self, key: str, parts: Sequence[Buffer]) -> str:
        data = _joined(parts)
        try:
            path = self._path(key)
            result = self._call(key, lambda: obstore.put(self._store, path, data, mode="create"))
        except _Conditional as exc:
            raise ObjectExists(f"{self.url}/{key} already exists") from exc.__cause__
        return str(result["e_tag"])

    def put_replace(self, key: str, parts: Sequence[Buffer], version: str) -> str:
        data = _joined(parts)
        try:
            path = self._path(key)
            result = self._call(key, lambda: obstore.put(self._store, path, data, mode={"e_tag": version}))
        except (_Conditional, ObjectNotFound) as exc:
            raise VersionMismatch(f"{self.url}/{key}: expected version {version}, but the object changed or is gone") from exc
        return str(result["e_tag"])

    def get(self, key: str) -> Buffer:
        path = self._path(key)
        return self._call(key, lambda: obstore.get(self._store, path).bytes())  # type: ignore[no-any-return]

    def get_range(self, key: str, start: int, end: int) -> Buffer:
        if end <= start:
            self.head(key)  # a zero-length range still fails for a missing object
            return b""
        path = self._path(key)
        return self._call(key, lambda: obstore.get_range(self._store, path, start=start, end=end))  # type: ignore[no-any-return]

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        meta = self._call(key, lambda: obstore.head(self._store, path))
        return ObjectInfo(key, int(meta["size"]), meta.get("e_tag"))

    def list_pages(self, prefix: str) -> list[list[ObjectInfo]]:
        check_prefix(prefix, str(self.location))

        def run() -> list[list[ObjectInfo]]:
            folder = (self._root + prefix.rpartition("/")[0]).rstrip("/") or None
            stream = obstore.list(self._store, prefix=folder, chunk_size=1000)
            cut = len(self._root)
            pages = [[ObjectInfo(m["path"][cut:], int(m["size"]), m.get("e_tag")) for m in chunk] for chunk in stream]
            return [sorted(p, key=lambda o: o.key) for p in pages] or [[]]

        pages = self._call(prefix, run)
        # obstore lists by folder; keep S3's plain string-prefix meaning by filtering the folder.
        return [[o for o in page if o.key.startswith(prefix)] for page in pages]

    def rename(self, src: str, dst: str) -> None:
        """Server-side copy, then delete of the source (S3 has no rename)."""
        source, target = self._path(src), self._path(dst)
        self._call(src, lambda: obstore.copy(self._store, source, target, overwrite=True))
        self.delete([src])

    def delete(self, keys: Sequence[str]) -> None:
        if keys:
            paths = [self._path(key) for key in keys]
            self._call(keys[0], lambda: obstore.delete(self._store, paths))

    def _call(self, key: str, fn):  # type: ignore[no-untyped-def]
        """Run one obstore call, translating its errors into Croupier's, naming the object."""
        try:
            return fn()
        except FileNotFoundError as exc:
            raise ObjectNotFound(f"{self.url}/{key}") from exc
        except (AlreadyExistsError, PreconditionError) as exc:
            raise _Conditional(f"{self.url}/{key}: precondition failed") from exc
        except (ObstoreError, OSError, RuntimeError) as exc:
            text = redact(str(exc).split("\n\nDebug source:")[0])
            if "169.254.169.254" in text or "latest/api/token" in text:
                raise StorageError(
                    f"no S3 credentials for {self.url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                    "(or use --s3-anonymous for an endpoint without authentication)"
                ) from exc
            if any(marker in text.lower() for marker in _TRANSIENT_MARKERS):
                raise TransientStorageError(f"transient error on {self.url}/{key}: {text}") from exc
            raise StorageError(f"storage error on {self.url}/{key}: {text}") from exc


class _Conditional(StorageError):
    """A conditional write's condition did not hold (HTTP 412); the caller names the meaning."""


def _joined(parts: Sequence[Buffer]) -> Buffer:
    return parts[0] if len(parts) == 1 else b"".join(parts)


#: obstore clients of this process, one per bucket and settings (endpoint, credentials, timeouts):
#: making one takes about 6 ms (its HTTP client and TLS set-up), which every store of a new prefix
#: paid — a run's temporaries, each output, in the driver and in every worker — and it kept its own
#: connections. Keyed by process too: a forked child must not use its parent's connections.
_CLIENTS: dict[tuple[int, str, str], S3Store] = {}
_CLIENTS_LOCK = threading.Lock()


def _client(bucket: str, options: S3Options, request_timeout: float) -> S3Store:
    kwargs = _store_kwargs(options, request_timeout)
    key = (os.getpid(), bucket, repr(sorted(kwargs.items())))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = S3Store(bucket, **kwargs)
        return client


def _store_kwargs(options: S3Options, request_timeout: float) -> dict[str, object]:
    """Keyword arguments for obstore's S3Store: credentials, endpoint, timeouts, no retries (no
    prefix: the backend prepends its own)."""
    kwargs: dict[str, object] = {
        "region": options.region,
        "virtual_hosted_style_request": options.virtual_hosted_style,
        "client_options": {
            "allow_http": options.allow_http,
            "timeout": f"{max(1, math.ceil(request_timeout))}s",
            "connect_timeout": f"{max(1, math.ceil(min(request_timeout, 10)))}s",
        },
        "retry_config": {"max_retries": 0, "retry_timeout": timedelta(seconds=1)},
    }
    if options.endpoint:
        kwargs["endpoint"] = options.endpoint
    if options.access_key_id is not None:
        kwargs["access_key_id"] = options.access_key_id.reveal()
    if options.secret_access_key is not None:
        kwargs["secret_access_key"] = options.secret_access_key.reveal()
    if options.session_token is not None:
        kwargs["token"] = options.session_token.reveal()
    if options.anonymous:
        kwargs["skip_signature"] = True
    return kwargs
