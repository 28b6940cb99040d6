"""S3-compatible backend through obstore (AWS S3, SeaweedFS, MinIO, IBM COS, ...).

obstore's own retries are switched off: :class:`croupier.storage.Store` retries transient failures
itself, in one place, so that every attempt is counted and every backend behaves alike.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Sequence

import obstore
from obstore.exceptions import BaseError as ObstoreError
from obstore.store import S3Store

from croupier.config import S3Options
from croupier.errors import ObjectNotFound, StorageError, TransientStorageError
from croupier.storage.backend import Backend, Buffer, ObjectInfo

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

    def __init__(self, bucket: str, prefix: str, options: S3Options, request_timeout: float) -> None:
        self._bucket = bucket
        self._prefix = prefix.strip("/")
        self._endpoint = options.endpoint
        self._store = S3Store(bucket, **_store_kwargs(self._prefix, options, request_timeout))

    @property
    def url(self) -> str:
        root = f"s3://{self._bucket}/{self._prefix}".rstrip("/")
        return f"{root} (endpoint {self._endpoint})" if self._endpoint else root

    def put(self, key: str, parts: Sequence[Buffer]) -> None:
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._call(key, lambda: obstore.put(self._store, key, data))

    def get(self, key: str) -> Buffer:
        return self._call(key, lambda: obstore.get(self._store, key).bytes())  # type: ignore[no-any-return]

    def get_range(self, key: str, start: int, end: int) -> Buffer:
        if end <= start:
            self.head(key)  # a zero-length range still fails for a missing object
            return b""
        return self._call(key, lambda: obstore.get_range(self._store, key, start=start, end=end))  # type: ignore[no-any-return]

    def head(self, key: str) -> ObjectInfo:
        meta = self._call(key, lambda: obstore.head(self._store, key))
        return ObjectInfo(key, int(meta["size"]))

    def list_pages(self, prefix: str) -> list[list[ObjectInfo]]:
        def run() -> list[list[ObjectInfo]]:
            folder = prefix.rpartition("/")[0] or None
            stream = obstore.list(self._store, prefix=folder, chunk_size=1000)
            pages = [[ObjectInfo(m["path"], int(m["size"])) for m in chunk] for chunk in stream]
            return [sorted(p, key=lambda o: o.key) for p in pages] or [[]]

        pages = self._call(prefix, run)
        # obstore lists by folder; keep S3's plain string-prefix meaning by filtering the folder.
        return [[o for o in page if o.key.startswith(prefix)] for page in pages]

    def rename(self, src: str, dst: str) -> None:
        """Server-side copy, then delete of the source (S3 has no rename)."""
        self._call(src, lambda: obstore.copy(self._store, src, dst, overwrite=True))
        self.delete([src])

    def delete(self, keys: Sequence[str]) -> None:
        if keys:
            self._call(keys[0], lambda: obstore.delete(self._store, list(keys)))

    def _call(self, key: str, fn):  # type: ignore[no-untyped-def]
        """Run one obstore call, translating its errors into Croupier's, naming the object."""
        try:
            return fn()
        except FileNotFoundError as exc:
            raise ObjectNotFound(f"{self.url}/{key}") from exc
        except (ObstoreError, OSError, RuntimeError) as exc:
            text = str(exc).split("\n\nDebug source:")[0]
            if "169.254.169.254" in text or "latest/api/token" in text:
                raise StorageError(
                    f"no S3 credentials for {self.url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                    "(or use --s3-anonymous for an endpoint without authentication)"
                ) from exc
            if any(marker in text.lower() for marker in _TRANSIENT_MARKERS):
                raise TransientStorageError(f"transient error on {self.url}/{key}: {text}") from exc
            raise StorageError(f"storage error on {self.url}/{key}: {text}") from exc


def _store_kwargs(prefix: str, options: S3Options, request_timeout: float) -> dict[str, object]:
    """Keyword arguments for obstore's S3Store: credentials, endpoint, timeouts, no retries."""
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
    if prefix:
        kwargs["prefix"] = prefix
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
