"""Object storage: one small interface (:class:`Store`) over a local folder or S3-compatible storage.

Stores are named by :class:`Location` (parsed from text once, by :func:`parse_location`):
``file:///path`` or a plain path for a local folder, ``s3://bucket/prefix`` for S3-compatible
storage (endpoint and credentials from :class:`croupier.config.S3Options`),
``redis://host:port[/db]/prefix`` for a Redis fast tier. Names are literal; see
:mod:`croupier.storage.location` for the rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from croupier.lazy import exports

if TYPE_CHECKING:
    from croupier.config import Config
    from croupier.storage.backend import Backend, ObjectInfo
    from croupier.storage.location import Location, parse_location
    from croupier.storage.stats import IOStats
    from croupier.storage.store import Store

__all__ = ["Backend", "IOStats", "Location", "ObjectInfo", "Store", "open_backend", "open_store", "parse_location"]

#: re-exported name -> its module, imported on first use (PEP 562): the CLI and ``croupier.report``
#: import :mod:`croupier.storage.stats`, which must not pull in the store's thread pools and retries
_LAZY = {
    "Backend": "croupier.storage.backend",
    "ObjectInfo": "croupier.storage.backend",
    "Location": "croupier.storage.location",
    "parse_location": "croupier.storage.location",
    "IOStats": "croupier.storage.stats",
    "Store": "croupier.storage.store",
}


__getattr__, __dir__ = exports(__name__, _LAZY, __all__, globals())


def open_backend(url: str | Location, config: Config) -> Backend:
    """Create the raw backend for ``url`` (wrapped in a fault injector when ``config.faults`` is set)."""
    from croupier.storage.location import parse_location

    location = parse_location(url)
    backend: Backend
    if location.is_s3:
        from croupier.storage.s3 import S3Backend

        backend = S3Backend(location, config.s3, config.request_timeout)
    elif location.is_redis:
        from croupier.storage.redis_backend import RedisBackend

        backend = RedisBackend(location, config.request_timeout)
    else:
        from croupier.storage.local import LocalBackend

        backend = LocalBackend(location)
    if config.faults is not None:
        from croupier.storage.faults import FaultyBackend

        backend = FaultyBackend(backend, config.faults)
    return backend


def open_store(url: str | Location, config: Config, stats: IOStats | None = None) -> Store:
    """Open the store named by ``url`` with retries and request accounting from ``config``."""
    from croupier.storage.store import Store

    return Store(open_backend(url, config), config.retry, stats)
