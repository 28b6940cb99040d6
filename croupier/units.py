"""Parsing and formatting of sizes ("128 MiB", "2GB") and durations ("30s", "5m").

Values with units travel through the config as plain numbers (bytes, seconds); these helpers are the
only place that reads or writes the human spelling, so CLI flags and config files agree.
"""

from __future__ import annotations

import re

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_DURATION_UNITS = {"": 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: str | int | float) -> int:
    """Return a byte count from ``value`` ("2GB", "128 MiB", "1e6", or a number).

    Decimal units (kB, MB, GB) are powers of 1000 as in the sort benchmark's "1 GB = 10^9 bytes";
    binary units (KiB, MiB, GiB) are powers of 1024.
    """
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"size must not be negative, got {value}")
        return int(value)
    match = _NUMBER_UNIT.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise ValueError(f"cannot read {value!r} as a size; write e.g. '2GB', '512MiB' or '1000000'")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_duration(value: str | int | float) -> float:
    """Return seconds from ``value`` ("30s", "250ms", "5m", or a number of seconds)."""
    if isinstance(value, (int, float)):
        return float(value)
    match = _NUMBER_UNIT.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _DURATION_UNITS:
        raise ValueError(f"cannot read {value!r} as a duration; write e.g. '30s', '250ms' or '5m'")
    return float(match.group(1)) * _DURATION_UNITS[unit]


def format_bytes(n: float) -> str:
    """Format a byte count with a binary unit, e.g. 1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
