"""Storage profiles: the fitted performance of one store, saved as versioned JSON.

A profile holds, per operation (read, write), a throughput curve q(s, P) in requests/second for
objects of s bytes with P workers at once, fitted from measurements as (SEER §2.2):

    q(s, P) = min(a(s) * P, qmax(s))      linear at low P, flat from P* = qmax(s) / a(s)

with a(s) and qmax(s) measured at a few sizes and interpolated log-log in between; plus per-worker
bandwidths b_r, b_w (bytes/s), stage start-up time t0 + t1 * waves, in-function compute per byte
(partition, sort), the concurrency the platform allows, and prices (Eq. 4). Calibration finally
runs a few real exchanges and fits, by least squares, a multiplier of the storage terms, one of
the compute terms and the fixed cost of a stage (t0), so the model matches whole exchanges on this
store rather than only isolated requests.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from croupier.errors import ConfigError

PROFILE_VERSION = 2
#: Seconds per byte on one core of a phase kind the profile does not know (a plain copy's order).
DEFAULT_COMPUTE = 1.5e-9


@dataclass(frozen=True)
class Curve:
    """Throughput q(s, P) for one operation: a(s) and qmax(s) at measured sizes."""

    sizes: tuple[float, ...]
    per_worker: tuple[float, ...]  # a(s): requests/s one worker achieves
    ceiling: tuple[float, ...]  # qmax(s): requests/s all workers together achieve at most

    def _interp(self, values: tuple[float, ...], s: float) -> float:
        if s <= self.sizes[0]:
            return values[0]
        if s >= self.sizes[-1]:
            return values[-1] * (self.sizes[-1] / s) if len(self.sizes) > 1 else values[-1]
        for i in range(1, len(self.sizes)):
            if s <= self.sizes[i]:
                x0, x1 = math.log(self.sizes[i - 1]), math.log(self.sizes[i])
                y0, y1 = math.log(values[i - 1]), math.log(values[i])
                return math.exp(y0 + (y1 - y0) * (math.log(s) - x0) / (x1 - x0))
        return values[-1]

    def q(self, size: float, workers: float) -> float:
        """Aggregate requests/s for objects of ``size`` bytes with ``workers`` at once."""
        a = self._interp(self.per_worker, max(size, 1.0))
        qmax = self._interp(self.ceiling, max(size, 1.0))
        return max(1e-9, min(a * workers, qmax))


@dataclass(frozen=True)
class Prices:
    """Prices for the cost model (SEER Eq. 4): USD per unit."""

    function_gb_second: float = 0.0
    invocation: float = 0.0
    read_request: float = 0.0
    write_request: float = 0.0
    storage_gb_second: float = 0.0
    source: str = ""


@dataclass(frozen=True)
class StorageProfile:
    """Everything the models need to know about one store and the functions that use it."""

    name: str
    source: str
    read: Curve
    write: Curve
    read_bandwidth: float  # b_r, bytes/s per worker
    write_bandwidth: float  # b_w
    startup_seconds: float = 0.05  # t0: fixed cost of one stage
    wave_seconds: float = 0.01  # t1: per wave of tasks (P / concurrency, rounded up)
    #: seconds per byte on one core, per phase kind (longest matching prefix wins, see compute_cost)
    compute: dict[str, float] = field(default_factory=dict)
    io_scale: float = 1.0  # fitted from real exchanges: multiplier of the storage terms
    compute_scale: float = 1.0  # fitted: multiplier of the compute terms
    first_touch_seconds_per_byte: float = 0.0  # fitted: fresh memory a function's first task touches, per byte of that task
    concurrency: int = 1000  # functions the platform runs at once
    function_memory: int = 2 << 30
    prices: Prices = field(default_factory=Prices)
    fit: dict[str, float] = field(default_factory=dict)  # goodness of fit (mean abs % error per curve)
    version: int = PROFILE_VERSION

    def compute_cost(self, kind: str) -> float:
        """Seconds per byte on one core of phase ``kind``: the longest key of ``compute`` that
        prefixes it (``write:exchange-records`` covers ``write:exchange-records-raw-recordsrange``),
        else :data:`DEFAULT_COMPUTE`."""
        best = ""
        for key in self.compute:
            if kind.startswith(key) and len(key) > len(best):
                best = key
        return self.compute[best] if best else DEFAULT_COMPUTE

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StorageProfile:
        data = _migrate(dict(data))
        if data.get("version") != PROFILE_VERSION:
            raise ConfigError(f"profile {data.get('name')!r} has version {data.get('version')}, expected {PROFILE_VERSION}; recalibrate with `croupier calibrate`")
        data["read"] = Curve(**{k: tuple(v) for k, v in data["read"].items()})
        data["write"] = Curve(**{k: tuple(v) for k, v in data["write"].items()})
        data["prices"] = Prices(**data.get("prices", {}))
        return cls(**data)

    @classmethod
    def load(cls, path_or_name: str | Path) -> StorageProfile:
        """Load a profile file, or a shipped profile by name (aws-s3, ibm-cos, local, seaweedfs)."""
        path = Path(path_or_name)
        if path.exists():
            text = path.read_text()
        else:
            shipped = resources.files("croupier.model") / "profiles" / f"{path_or_name}.json"
            if not shipped.is_file():
                raise ConfigError(f"no profile file {path_or_name!r} and no shipped profile of that name; shipped: {', '.join(shipped_names())}")
            text = shipped.read_text()
        try:
            return cls.from_dict(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"profile {path_or_name}: not a valid Croupier profile ({exc})") from exc


def shipped_names() -> list[str]:
    """Names of the profiles that ship with Croupier."""
    folder = resources.files("croupier.model") / "profiles"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def _migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Read a version-1 profile: its three TeraSort compute figures become phase kinds."""
    if data.get("version") != 1:
        return data
    compute = {
        "write:exchange-records": data.pop("partition_seconds_per_byte", 0.0),
        "records_sort": data.pop("sort_seconds_per_byte", 0.0),
        "regroup": data.pop("regroup_seconds_per_byte", 0.0),
    }
    data["compute"] = {k: v for k, v in compute.items() if v}
    data["version"] = PROFILE_VERSION
    return data


def profile_for(config: Any, shuffle_url: str) -> StorageProfile:
    """The profile for exchanges through ``shuffle_url`` under ``config`` (its ``profile`` or the
    shipped one for the store kind), with the run's function memory: it bounds the selector's
    smallest P and prices GB-seconds."""
    from dataclasses import replace

    from croupier.config import default_profile_name

    profile = StorageProfile.load(config.profile or default_profile_name(shuffle_url, config.s3))
    return replace(profile, function_memory=config.function_memory)
