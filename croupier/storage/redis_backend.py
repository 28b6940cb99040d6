"""Redis backend: a fast tier beside object storage (Locus §3.3), behind the same interface.

A location ``redis://host:port/db/prefix`` names a prefix in one Redis database. Objects of every
prefix of a database share one namespace (as an S3 bucket's keys do), so two stores rooted at
``.../a`` and ``.../a/b`` see the same objects. Per object (full name ``<prefix>/<key>``):

* ``croupier:d:<name>``  a string with the object's bytes (GETRANGE serves ranged reads);
* field ``<name>`` of the hash ``croupier:meta``: the object's version (a counter value);
* member ``<name>`` of the sorted set ``croupier:index`` (all scores 0): listing by prefix is one
  ``ZRANGEBYLEX`` per page of 1000 names, in byte order like S3's.

Writes run as one Lua script, which Redis executes atomically: the data, the version and the index
entry appear together or not at all, and the conditions of ``put_create`` / ``put_replace`` are
checked in the same step. Ranged reads, heads and deletes are scripts too: atomic, and allowed on a
full server (a MULTI/EXEC transaction is refused there, even one that only reads). A server at its ``maxmemory`` (policy ``noeviction``) refuses writes
with an OOM error: that is :class:`~croupier.errors.StoreFullError` (not retried; the exchange
falls back to the slow tier). Connection errors and timeouts are transient (retried by the Store);
redis-py's own retries are off, so every attempt is counted in one place.
"""

from __future__ import annotations

from typing import Sequence

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from croupier.errors import ObjectExists, ObjectNotFound, StorageError, StoreFullError, TransientStorageError, VersionMismatch
from croupier.storage.backend import Backend, Buffer, ObjectInfo
from croupier.storage.location import Location, check_key, check_prefix

_DATA = "croupier:d:"
_META = "croupier:meta"
_INDEX = "croupier:index"
_COUNTER = "croupier:version"
#: Names one listing request returns.
PAGE = 1000

# KEYS: data, meta, index, counter. ARGV: name, bytes, mode ("put" | "create" | "replace"), version.
_PUT = """
local current = redis.call('HGET', KEYS[2], ARGV[1])
if ARGV[3] == 'create' and current then return {err = 'CROUPIER_EXISTS'} end
if ARGV[3] == 'replace' and current ~= ARGV[4] then return {err = 'CROUPIER_MISMATCH'} end
local version = redis.call('INCR', KEYS[4])
redis.call('SET', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], version)
redis.call('ZADD', KEYS[3], 0, ARGV[1])
return version
"""

# KEYS: data, meta. ARGV: name, start, end (inclusive; "" = no bytes). Returns {exists, bytes}.
_RANGE = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return {0, ''} end
if ARGV[3] == '' then return {1, ''} end
return {1, redis.call('GETRANGE', KEYS[1], ARGV[2], ARGV[3])}
"""

# KEYS: data, meta. ARGV: name. Returns {version or false, size}.
_HEAD = """
return {redis.call('HGET', KEYS[2], ARGV[1]), redis.call('STRLEN', KEYS[1])}
"""

# KEYS: meta, index. ARGV: data key prefix, names...
_DELETE = """
for i = 2, #ARGV do
  redis.call('DEL', ARGV[1] .. ARGV[i])
  redis.call('HDEL', KEYS[1], ARGV[i])
  redis.call('ZREM', KEYS[2], ARGV[i])
end
return #ARGV - 1
"""


class RedisBackend(Backend):
    """Objects under one prefix of one Redis database."""

    delete_batch = PAGE

    def __init__(self, location: Location, request_timeout: float) -> None:
        if not location.is_redis:
            raise StorageError(f"{location} is not a Redis location")
        self.location = location
        server, _, db = location.bucket.partition("/")
        host, _, port = server.rpartition(":")
        self._prefix = location.path + "/" if location.path else ""
        self._client = redis.Redis(
            host=host.strip("[]"),
            port=int(port),
            db=int(db),
            socket_timeout=request_timeout,
            socket_connect_timeout=min(request_timeout, 10.0),
            retry=Retry(NoBackoff(), 0),
        )
        self._put_script = self._client.register_script(_PUT)
        # reads and deletes are scripts too: atomic, and (unlike MULTI/EXEC) allowed on a full server
        self._range_script = self._client.register_script(_RANGE)
        self._head_script = self._client.register_script(_HEAD)
        self._delete_script = self._client.register_script(_DELETE)

    @property
    def url(self) -> str:
        return str(self.location)

    def _name(self, key: str) -> str:
        return self._prefix + check_key(key, self.url)

    def put(self, key: str, parts: Sequence[Buffer]) -> None:
        self._write(key, parts, "put", "")

    def put_create(self, key: str, parts: Sequence[Buffer]) -> str:
        return self._write(key, parts, "create", "")

    def put_replace(self, key: str, parts: Sequence[Buffer], version: str) -> str:
        return self._write(key, parts, "replace", version)

    def _write(self, key: str, parts: Sequence[Buffer], mode: str, version: str) -> str:
        name = self._name(key)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        try:
            new = self._call(key, lambda: self._put_script(keys=[_DATA + name, _META, _INDEX, _COUNTER], args=[name, bytes(data) if isinstance(data, memoryview) else data, mode, version]))
        except _Refused as exc:
            if "CROUPIER_EXISTS" in str(exc):
                raise ObjectExists(f"{self.url}/{key} already exists") from exc
            if "CROUPIER_MISMATCH" in str(exc):
                raise VersionMismatch(f"{self.url}/{key}: expected version {version}, but the object changed or is gone") from exc
            raise StorageError(f"storage error on {self.url}/{key}: {exc}") from exc
        return str(new)

    def get(self, key: str) -> Buffer:
        name = self._name(key)
        data = self._call(key, lambda: self._client.get(_DATA + name))
        if data is None:
            raise ObjectNotFound(f"{self.url}/{key}")
        return data  # type: ignore[no-any-return]

    def get_range(self, key: str, start: int, end: int) -> Buffer:
        name = self._name(key)
        last = str(end - 1) if end > start else ""
        found, data = self._call(key, lambda: self._range_script(keys=[_DATA + name, _META], args=[name, start, last]))
        if not found:
            raise ObjectNotFound(f"{self.url}/{key}")
        return data  # type: ignore[no-any-return]

    def head(self, key: str) -> ObjectInfo:
        name = self._name(key)
        version, size = self._call(key, lambda: self._head_script(keys=[_DATA + name, _META], args=[name]))
        if version is None:
            raise ObjectNotFound(f"{self.url}/{key}")
        return ObjectInfo(key, int(size), version.decode())

    def list_pages(self, prefix: str) -> list[list[ObjectInfo]]:
        check_prefix(prefix, self.url)
        full = (self._prefix + prefix).encode()
        pages: list[list[ObjectInfo]] = []
        low = b"[" + full
        while True:
            names: list[bytes] = self._call(prefix, lambda lo=low: self._client.zrangebylex(_INDEX, lo, b"[" + full + b"\xff", start=0, num=PAGE))
            sizes = self._call(prefix, lambda: _strlens(self._client, names)) if names else []
            cut = len(self._prefix)
            pages.append([ObjectInfo(n.decode()[cut:], int(s)) for n, s in zip(names, sizes)])
            if len(names) < PAGE:
                return pages
            low = b"(" + names[-1]

    def delete(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        names = [self._name(k) for k in keys]
        self._call(keys[0], lambda: self._delete_script(keys=[_META, _INDEX], args=[_DATA, *names]))

    def free_memory(self) -> int | None:
        """Bytes the server may still use (``maxmemory`` minus ``used_memory``), or None without a limit."""
        info = self._call("INFO", lambda: self._client.info("memory"))
        limit = int(info.get("maxmemory", 0))
        return max(0, limit - int(info["used_memory"])) if limit else None

    def used_memory(self) -> int:
        """Bytes the server uses now (INFO memory's ``used_memory``: data, indexes, client buffers)."""
        return int(self._call("INFO", lambda: self._client.info("memory"))["used_memory"])

    def max_memory(self) -> int:
        """The server's ``maxmemory`` in bytes (0: no limit)."""
        return int(self._call("CONFIG", lambda: self._client.config_get("maxmemory")).get("maxmemory", 0))

    def close(self) -> None:
        self._client.close()

    def _call(self, key: str, fn):  # type: ignore[no-untyped-def]
        """Run one Redis call, translating its errors into Croupier's, naming the object."""
        try:
            return fn()
        except redis.exceptions.OutOfMemoryError as exc:
            raise StoreFullError(
                f"{self.url} is full (Redis maxmemory reached) writing {key}; use a larger fast tier, "
                "or --tier slow"
            ) from exc
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise TransientStorageError(f"transient error on {self.url}/{key}: {exc}") from exc
        except redis.exceptions.ResponseError as exc:
            if "OOM" in str(exc):  # an OOM raised inside the write script
                raise StoreFullError(f"{self.url} is full (Redis maxmemory reached) writing {key}; use a larger fast tier, or --tier slow") from exc
            raise _Refused(str(exc)) from exc
        except redis.exceptions.RedisError as exc:
            raise StorageError(f"storage error on {self.url}/{key}: {exc}") from exc


class _Refused(StorageError):
    """The server answered with an error (a write condition that did not hold, among others)."""


def _strlens(client: redis.Redis, names: list[bytes]) -> list[int]:
    """Sizes of the objects ``names`` (one pipelined round trip)."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.strlen(_DATA.encode() + name)
    return pipe.execute()  # type: ignore[no-any-return]
