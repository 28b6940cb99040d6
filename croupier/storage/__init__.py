"""Object storage: one small interface (:class:`Store`) over a local folder or S3-compatible storage.

Stores are named by URL: ``file:///path`` or a plain path for a local folder, ``s3://bucket/prefix``
for S3-compatible storage (endpoint and credentials from :class:`croupier.config.S3Options`).
"""

from __future__ import annotations

from urllib.parse import unquote, urlparse

from croupier.config import Config
from croupier.errors import ConfigError
from croupier.storage.backend import Backend, ObjectInfo
from croupier.storage.stats import IOStats
from croupier.storage.store import Store

__all__ = ["Backend", "IOStats", "ObjectInfo", "Store", "open_store", "split_url"]


def split_url(url: str) -> tuple[str, str, str]:
    """Split a store URL into (scheme, location, path): ("s3", bucket, prefix) or ("file", "", folder)."""
    if not url or not url.strip():
        raise ConfigError("empty store URL; use file:///path, a folder path, or s3://bucket/prefix")
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and url[1:3] == ":\\"):
        if scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"bad file URL {url!r}: write file:///absolute/path (three slashes)")
        return "file", "", unquote(parsed.path) if scheme == "file" else url
    if scheme == "s3":
        if not parsed.netloc:
            raise ConfigError(f"bad S3 URL {url!r}: no bucket; write s3://bucket/prefix")
        return "s3", parsed.netloc, parsed.path.strip("/")
    raise ConfigError(f"unsupported store URL scheme {scheme!r} in {url!r}; use file:///path or s3://bucket/prefix")


def open_backend(url: str, config: Config) -> Backend:
    """Create the raw backend for ``url`` (wrapped in a fault injector when ``config.faults`` is set)."""
    scheme, location, path = split_url(url)
    backend: Backend
    if scheme == "s3":
        from croupier.storage.s3 import S3Backend

        backend = S3Backend(location, path, config.s3, config.request_timeout)
    else:
        from croupier.storage.local import LocalBackend

        backend = LocalBackend(path)
    if config.faults is not None:
        from croupier.storage.faults import FaultyBackend

        backend = FaultyBackend(backend, config.faults)
    return backend


def open_store(url: str, config: Config, stats: IOStats | None = None) -> Store:
    """Open the store named by ``url`` with retries and request accounting from ``config``."""
    return Store(open_backend(url, config), config.retry, stats)
