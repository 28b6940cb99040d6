"""A read-only file object over one stored object, fetching only the byte ranges asked for.

Lets pyarrow read a Parquet footer and just the column chunks it needs with ranged GETs
(Lambada §4) instead of downloading whole objects.
"""

from __future__ import annotations

import io

from croupier.storage.store import Store


class RangeFile(io.RawIOBase):
    """Seekable, readable view of ``store``/``key``; each read is one ranged GET."""

    def __init__(self, store: Store, key: str, size: int | None = None) -> None:
        super().__init__()
        self._store = store
        self._key = key
        self._size = store.head(key).size if size is None else size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        end = min(self._size, self._pos + len(buffer))
        if end <= self._pos:
            return 0
        data = self._store.get_range(self._key, self._pos, end)
        n = len(data)
        memoryview(buffer)[:n] = data
        self._pos += n
        return n

    def size(self) -> int:
        """Size of the object in bytes."""
        return self._size
