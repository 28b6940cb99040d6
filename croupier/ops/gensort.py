"""Generate TeraSort input in the gensort layout, deterministically from a seed.

Record ``i`` depends only on (seed, i), never on how the records are split into objects, so the
same seed and size give the same data for any ``--parts``. Layouts (100 bytes each):

    ASCII  (gensort -a): key[10] printable | "  " | row id, 32 hex digits | "  " | 52 filler | "\\r\\n"
    binary (gensort):    key[10] any byte  | 00 11 | row id, 16 bytes big-endian | 88 99 AA BB |
                         64 filler | CC DD EE FF

The field layout follows the sort benchmark's gensort; the random stream is numpy's Philox keyed
by the seed (not gensort's own generator), so files are not byte-identical to gensort's output.
"""

from __future__ import annotations

import numpy as np

from croupier.ops.records import RECORD_SIZE

BLOCK = 1 << 16  # records per independently seeded block
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def _random_words(seed: int, block: int) -> np.ndarray:
    """Two random uint64 per record of one block: (BLOCK, 2)."""
    bits = np.random.Philox(key=[seed & ((1 << 64) - 1), block])
    return bits.random_raw(2 * BLOCK).astype(np.uint64).reshape(BLOCK, 2)


def _template(ascii_keys: bool) -> np.ndarray:
    row = np.zeros(RECORD_SIZE, dtype=np.uint8)
    if ascii_keys:
        row[10:12] = ord(" ")
        row[12:44] = ord("0")
        row[44:46] = ord(" ")
        row[98:100] = np.frombuffer(b"\r\n", dtype=np.uint8)
    else:
        row[10:12] = (0x00, 0x11)
        row[28:32] = (0x88, 0x99, 0xAA, 0xBB)
        row[96:100] = (0xCC, 0xDD, 0xEE, 0xFF)
    return row


def _fill_block(out: np.ndarray, rows: np.ndarray, words: np.ndarray, ascii_keys: bool) -> None:
    """Write records with row ids ``rows`` into ``out`` using their random ``words``."""
    keybytes = words.view(np.uint8).reshape(-1, 16)[:, :10]
    shifts = np.arange(15, -1, -1, dtype=np.uint64) * np.uint64(4)
    nibbles = ((rows[:, None] >> shifts[None, :]) & np.uint64(0xF)).astype(np.uint8)
    filler = ((words[:, 1:2] >> (np.arange(16, dtype=np.uint64) * np.uint64(4))[None, :]) & np.uint64(0xF)).astype(
        np.uint8
    )
    if ascii_keys:
        out[:, :10] = keybytes % 95 + 32
        out[:, 28:44] = _HEX[nibbles]
        out[:, 46:98] = np.repeat(_HEX[filler[:, :13]], 4, axis=1)
    else:
        out[:, :10] = keybytes
        out[:, 20:28] = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
        out[:, 32:96] = np.repeat(filler * 17, 4, axis=1)


def generate(first: int, count: int, seed: int, ascii_keys: bool = False) -> np.ndarray:
    """Return records ``first .. first+count-1`` as a ``(count, 100)`` uint8 array."""
    out = np.empty((count, RECORD_SIZE), dtype=np.uint8)
    out[:] = _template(ascii_keys)
    pos = first
    while pos < first + count:
        block, offset = divmod(pos, BLOCK)
        n = min(BLOCK - offset, first + count - pos)
        words = _random_words(seed, block)[offset : offset + n]
        rows = np.arange(pos, pos + n, dtype=np.uint64)
        _fill_block(out[pos - first : pos - first + n], rows, words, ascii_keys)
        pos += n
    return out
