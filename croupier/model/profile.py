"""Storage profiles: the fitted performance of one store and the machine that uses it, as versioned JSON.

A profile holds, per operation (read, write), a throughput curve q(s, P) in requests/second for
objects of s bytes with P requests in flight at once, fitted from measurements as (SEER §2.2):

    q(s, P) = min(a(s) * P, qmax(s))      linear at low P, flat from P* = qmax(s) / a(s)

with a(s) and qmax(s) measured at a few sizes and interpolated log-log in between; plus per-worker
bandwidths b_r, b_w (bytes/s); compute seconds per byte on one core per phase kind (``compute``);
stage start-up t0 + t1 * waves; the imbalance g of unequal tasks (a stage ends g times one task's
work later than evenly packed tasks would); a first-touch term (fresh memory a cold function's first task
pulls in: stated by a platform's profile, never fitted, as warm functions do not pay it); multipliers of
the read and write terms (what the grid of isolated requests misses about real stages); the
concurrency the platform allows; and prices (Eq. 4). Every fitted coefficient carries its relative
standard error (``uncertainty``, from a bootstrap), and ``residual`` is the relative spread of stage
times the terms leave unexplained: together they give every prediction its range.

``revision`` counts refinements: each run's measured stages refine a self-calibrated profile
(:mod:`croupier.model.fit`, :mod:`croupier.model.cache`), so a report names the profile by
``label`` (``name@rN``).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from croupier import shipped
from croupier.errors import ConfigError

PROFILE_VERSION = 3
#: Seconds per byte on one core of a phase kind the profile does not know (a plain copy's order).
DEFAULT_COMPUTE = 1.5e-9
#: Relative standard error assumed for a coefficient no fit measured (published figures, defaults).
DEFAULT_UNCERTAINTY = 0.25
#: (size, workers) pairs a curve remembers q of (:meth:`Curve.q`); past that it forgets them all.
Q_MEMO = 4096


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
        """Aggregate requests/s for objects of ``size`` bytes with ``workers`` at once, remembered
        for the last (at most :data:`Q_MEMO`) pairs asked: a selector asks many candidates' stages
        the same ones (every stage without data reads asks for size 0)."""
        known = self.__dict__.setdefault("_q", {})
        try:
            return known[size, workers]
        except KeyError:
            if len(known) >= Q_MEMO:  # sizes follow the data: bound what a long run keeps
                known.clear()
            a = self._interp(self.per_worker, max(size, 1.0))
            qmax = self._interp(self.ceiling, max(size, 1.0))
            q = known[size, workers] = max(1e-9, min(a * workers, qmax))
            return q


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
    #: seconds per call of a phase kind (one task runs each of its phases once): fixed costs such as
    #: a Parquet footer or an empty exchange object, same key lookup as ``compute``
    call_seconds: dict[str, float] = field(default_factory=dict)
    #: fitted: bytes stored per byte of data of an exchange write kind (its codec's compression: a
    #: zstd exchange of TeraSort records stores about a third), by kind; unknown kinds store 1:1
    stored: dict[str, float] = field(default_factory=dict)
    read_scale: float = 1.0  # fitted: multiplier of the read terms (real stages against the request grid)
    write_scale: float = 1.0  # fitted: multiplier of the write terms
    first_touch_seconds_per_byte: float = 0.0  # stated, not fitted: fresh memory a cold function's first task touches, per byte of that task
    #: fitted: how much later than evenly packed tasks a stage ends because its tasks are unequal
    #: (the last one sets the end), as a fraction of one task's compute and storage time
    imbalance: float = 0.0
    concurrency: int = 1000  # functions the platform runs at once
    function_memory: int = 2 << 30
    prices: Prices = field(default_factory=Prices)
    fit: dict[str, float] = field(default_factory=dict)  # goodness of fit (mean abs % errors, observations)
    #: relative standard error per coefficient: "t0", "t1", "imbalance", "first_touch", "read_scale", "write_scale",
    #: "compute:<kind>"; a coefficient not named has :data:`DEFAULT_UNCERTAINTY`
    uncertainty: dict[str, float] = field(default_factory=dict)
    residual: float = 0.15  # relative spread (one sd) of stage times the terms leave unexplained
    revision: int = 0  # refinements since calibration (learning from runs)
    machine: str = ""  # the machine it was calibrated on ("" for published figures)
    store: str = ""  # the store key it was calibrated on (see croupier.model.cache.store_key)
    max_streams: int = 0  # most requests in flight the grid measured (0: unknown); beyond it q is extrapolated
    #: the bandwidths are a function's whole network (a cloud function's token bucket, shared by its
    #: streams); False: per stream, as a grid calibrates them (a task's fetches in flight add up)
    network_per_function: bool = False
    version: int = PROFILE_VERSION

    @property
    def label(self) -> str:
        """The profile's name and revision, as reports show it (``local-dev-shm@r3``)."""
        return f"{self.name}@r{self.revision}"

    def relative_error(self, coefficient: str) -> float:
        """Relative standard error of ``coefficient`` (per-kind ones by the key that prices the kind)."""
        for table, prefix in (("compute", "compute:"), ("call_seconds", "call:")):
            if coefficient.startswith(prefix):
                key = self._key(table, coefficient.removeprefix(prefix))
                return self.uncertainty.get(f"{prefix}{key}", DEFAULT_UNCERTAINTY) if key is not None else DEFAULT_UNCERTAINTY
        return self.uncertainty.get(coefficient, DEFAULT_UNCERTAINTY)

    def compute_key(self, kind: str) -> str | None:
        """The key of ``compute`` that prices phase ``kind`` (see :func:`lookup_key`)."""
        return self._key("compute", kind)

    def call_cost(self, kind: str) -> float:
        """Seconds per call of phase ``kind`` (0 when the profile does not know its kind),
        remembered per profile (see :meth:`memo`)."""
        known = self.memo("call_cost")
        try:
            return known[kind]
        except KeyError:
            key = self._key("call_seconds", kind)
            cost = known[kind] = self.call_seconds[key] if key is not None else 0.0
            return cost

    def stored_ratio(self, kind: str, default: float = 1.0) -> float:
        """Bytes an exchange write of ``kind`` stores per byte of data (``default`` when not measured)."""
        key = self._key("stored", kind)
        return self.stored[key] if key is not None else default

    def memo(self, name: str) -> dict[Any, Any]:
        """A dict kept with this profile under ``name``, for values derived from the profile alone
        (the selector predicts dozens of candidates per exchange, each asking the same per-kind
        costs and coefficient errors). Safe because a profile's tables are never changed in place:
        :func:`dataclasses.replace` makes a new profile, which starts with no memo."""
        return self.__dict__.setdefault(f"_memo:{name}", {})

    def _key(self, table: str, kind: str) -> str | None:
        """:func:`lookup_key` in the table named ``table``, remembered per profile: a refit predicts
        every stage it learns from, thousands of lookups that each scanned the table (a profile's
        tables are never changed in place; :func:`dataclasses.replace` makes a new profile)."""
        known = self.memo("keys")
        try:
            return known[table, kind]
        except KeyError:
            key = known[table, kind] = lookup_key(getattr(self, table), kind)
            return key

    def compute_cost(self, kind: str) -> float:
        """Seconds per byte on one core of phase ``kind``: the longest key of ``compute`` that
        prefixes it (``write:exchange-records`` covers ``write:exchange-records-raw-recordsrange``),
        else :data:`DEFAULT_COMPUTE`; remembered per profile (see :meth:`memo`)."""
        known = self.memo("compute_cost")
        try:
            return known[kind]
        except KeyError:
            key = self.compute_key(kind)
            cost = known[kind] = self.compute[key] if key is not None else DEFAULT_COMPUTE
            return cost

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
        return shipped.load_shipped(path_or_name, "croupier.model", "profiles", "profile", cls.from_dict)


#: Separates a phase kind from its operator signature (``hash_aggregate#1f0c9a2e``): what exactly
#: the operator computes (its expressions, keys, columns), so that a profile learns what that
#: operator costs from every run of it, beside what its kind costs on average (issue 13).
SIGNATURE = "#"


#: Separates an operator's signed kind from how many expressions it runs (``...#1f0c9a2e~52``).
WIDTH = "~"
#: Expressions whose planning and set-up cost Polars about as much as the rest of a call: a
#: group-by of 1 aggregate took 0.45 ms on a small frame, of 16 aggregates 1.06 ms, a select of 1
#: computed column 0.43 ms and of 16 0.90 ms (0.03-0.04 ms per expression beside about 0.4 ms);
#: TPC-H's final aggregations, fused with their casts and renames (about 50 expressions), took
#: 2-4 ms per task where an operator's per-call cost calibrated on a few expressions said 0.9.
EXPRESSIONS_PER_CALL = 11.0


def widened(kind: str, expressions: int) -> str:
    """``kind`` (signed) marked with the ``expressions`` its operator runs, when more than one."""
    return f"{kind}{WIDTH}{expressions}" if expressions > 1 else kind


def call_weight(kind: str) -> float:
    """What one call of phase ``kind`` counts for in its kind's per-call cost: 1 + expressions /
    EXPRESSIONS_PER_CALL for an operator marked with its expressions (:func:`widened`), else 1
    (reads and writes: their fixed costs do not depend on expressions). A per-call cost is then
    the cost of a call of (next to) no expressions, and a wide operator pays more per call."""
    signed, mark, width = kind.rpartition(WIDTH)
    if not mark or SIGNATURE not in signed:
        return 1.0
    try:
        return 1.0 + int(width) / EXPRESSIONS_PER_CALL
    except ValueError:
        return 1.0


def base_kind(kind: str) -> str:
    """A phase kind without its operator signature (``hash_aggregate#1f0c9a2e`` -> ``hash_aggregate``)."""
    return kind.split(SIGNATURE, 1)[0]


def signed_kind(kind: str, what: str) -> str:
    """``kind`` with the signature of ``what`` (a stable text naming what the operator computes):
    8 hex digits of its BLAKE2 digest, the same in every process (unlike ``hash``)."""
    return f"{kind}{SIGNATURE}{hashlib.blake2b(what.encode(), digest_size=4).hexdigest()}"


#: Kinds only their own measurements price: no family stands for them. A broadcast side that a
#: function kept (``read:cached``) decodes nothing and takes next to no time; priced as a read
#: (the ``read:`` family's cost per call) it added about half a millisecond per task, 0.17 s over
#: a TPC-H grid whose cached reads took none.
OWN_PRICE_ONLY = frozenset({"read:cached"})


def lookup_key(table: dict[str, float], kind: str) -> str | None:
    """The key of a per-kind ``table`` for phase ``kind``: the kind itself; else the shortest key
    it is a generic name of (``write:exchange-records`` for ``write:exchange-records-raw-recordsrange``);
    else the longest key that prefixes it (a family: ``read:``, ``write:``, or ``""`` for operators),
    except for the kinds of :data:`OWN_PRICE_ONLY`."""
    if kind in table:
        return kind
    if kind in OWN_PRICE_ONLY:
        return None
    specific = sorted((k for k in table if k.startswith(kind)), key=lambda k: (len(k), k))
    if kind and specific:
        return specific[0]
    best: str | None = None
    for key in table:
        if kind.startswith(key) and (best is None or len(key) > len(best)):
            best = key
    return best


def shipped_names() -> list[str]:
    """Names of the profiles that ship with Croupier."""
    return shipped.shipped_names("croupier.model", "profiles")


def _migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Read older profiles faithfully: version 1's three TeraSort compute figures become phase kinds;
    version 2's single storage multiplier becomes the read and write multipliers, and its compute
    multiplier is folded into the per-kind costs (so a migrated profile predicts what it did)."""
    if data.get("version") == 1:
        compute = {
            "write:exchange-records": data.pop("partition_seconds_per_byte", 0.0),
            "records_sort": data.pop("sort_seconds_per_byte", 0.0),
            "regroup": data.pop("regroup_seconds_per_byte", 0.0),
        }
        data["compute"] = {k: v for k, v in compute.items() if v}
        data["version"] = 2
    if data.get("version") == 2:
        scale = float(data.pop("compute_scale", 1.0))
        io = float(data.pop("io_scale", 1.0))
        data["compute"] = {k: v * scale for k, v in data.get("compute", {}).items()}
        data["read_scale"] = data["write_scale"] = io
        data["version"] = 3
    return data


def profile_for(config: Any, shuffle_url: str) -> StorageProfile:
    """The profile for exchanges through ``shuffle_url`` under ``config``: its ``profile``; else
    (calibration "auto") the one calibrated for this machine and store, if cached; else the
    shipped one for the store kind. With the run's function memory: it bounds the selector's
    smallest P and prices GB-seconds. Read only: calibrating and learning are the DAG runner's
    (:mod:`croupier.dag.profiles`)."""
    from dataclasses import replace

    from croupier.config import default_profile_name

    if config.profile:
        profile = StorageProfile.load(config.profile)
    else:
        profile = _cached(config, shuffle_url) or StorageProfile.load(default_profile_name(shuffle_url, config.s3))
    return replace(profile, function_memory=config.function_memory)


def _cached(config: Any, shuffle_url: str) -> StorageProfile | None:
    if config.calibration == "off":
        return None
    from croupier.model.cache import ProfileCache, machine_id, store_key

    entry = ProfileCache(config.profile_cache).load(machine_id(), store_key(shuffle_url, config.s3.endpoint), config.concurrency)
    return None if entry is None else entry.profile
