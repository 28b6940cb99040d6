"""One frozen configuration object, built once by the caller and passed down explicitly.

Nothing deep inside Croupier reads environment variables or globals: ``Config.from_env`` is the one
place that looks at the environment, and the resulting object travels (pickled) to every worker.

Credentials are wrapped in :class:`Secret`, whose ``repr``/``str`` never show the value, so a config
can be logged, put in a report or an error message without leaking keys.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from croupier.errors import ConfigError
from croupier.units import parse_duration, parse_size


class Secret:
    """A credential string that never prints itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """Return the secret value; call only where it is handed to a client library."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (Secret, (self._value,))


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3-compatible endpoint. Empty fields fall back to the client's defaults."""

    endpoint: str | None = None
    region: str = "us-east-1"
    access_key_id: Secret | None = None
    secret_access_key: Secret | None = None
    session_token: Secret | None = None
    allow_http: bool = False
    virtual_hosted_style: bool = False
    anonymous: bool = False

    def __post_init__(self) -> None:
        """Credentials in the endpoint URL (``http://key:secret@host``) become Secrets (unless
        given separately), and the endpoint keeps only the address, so nothing prints them."""
        if self.endpoint and "@" in self.endpoint:
            from croupier.redact import split_userinfo

            endpoint, user, password = split_userinfo(self.endpoint)
            object.__setattr__(self, "endpoint", endpoint)
            if user and self.access_key_id is None:
                object.__setattr__(self, "access_key_id", Secret(user))
            if password and self.secret_access_key is None:
                object.__setattr__(self, "secret_access_key", Secret(password))

    def __repr__(self) -> str:
        from croupier.redact import redact

        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
        return redact(f"S3Options({fields})")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> S3Options:
        """Read the usual AWS variables (AWS_ENDPOINT_URL[_S3], AWS_REGION, AWS_ACCESS_KEY_ID, ...)."""
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None

        def secret(name: str) -> Secret | None:
            return Secret(env[name]) if env.get(name) else None

        return cls(
            endpoint=endpoint,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            access_key_id=secret("AWS_ACCESS_KEY_ID"),
            secret_access_key=secret("AWS_SECRET_ACCESS_KEY"),
            session_token=secret("AWS_SESSION_TOKEN"),
            allow_http=bool(endpoint and endpoint.startswith("http://")),
            anonymous=env.get("CROUPIER_S3_ANONYMOUS", "").lower() in ("1", "true", "yes"),
        )


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of transient storage failures: exponential backoff with full jitter.

    attempts:   total tries of one request (1 = no retry)
    base_delay: delay before the first retry, seconds; doubles each time
    max_delay:  cap on one delay, seconds
    """

    attempts: int = 6
    base_delay: float = 0.05
    max_delay: float = 5.0


@dataclass(frozen=True)
class SpeculationPolicy:
    """When and how much to speculate (the policy itself: :mod:`croupier.compute.speculation`)."""

    after: float = 0.75
    slowness: float = 1.5
    budget: float = 0.10
    min_seconds: float = 0.5

    def __post_init__(self) -> None:
        if not (0.0 < self.after <= 1.0 and self.slowness >= 1.0 and 0.0 <= self.budget <= 1.0 and self.min_seconds >= 0):
            raise ConfigError("speculation: need 0 < after <= 1, slowness >= 1, 0 <= budget <= 1, min_seconds >= 0")

    def allowance(self, total: int) -> int:
        """Backups a stage of ``total`` tasks may launch in all."""
        return 0 if self.budget == 0 or total <= 1 else max(1, math.floor(self.budget * total))



#: The smallest function memory that runs: a worker uses about 110 MiB before it holds any data.
MIN_FUNCTION_MEMORY = parse_size("256MiB")

#: What ``Config.calibration`` may be; see there.
CALIBRATION_MODES = ("auto", "off")
#: The default of ``Config.calibration``, read when a Config is built (the test suite sets "off" so
#: that tests never calibrate or touch the user's profile cache unless they ask to).
DEFAULT_CALIBRATION = "auto"


@dataclass(frozen=True)
class Config:
    """Everything a Croupier run needs to know, in one place.

    concurrency:         how many functions (worker processes) run at once
    function_memory:     memory budget of one function, bytes; a worker above it is stopped
    task_timeout:        seconds one task may run before it is failed
    request_timeout:     seconds one storage request may take before it is retried
    retry:               backoff policy for transient storage failures
    intermediate_format: encoding of shuffle objects: "raw", "arrow", "arrow-lz4", "arrow-zstd", or
                         "auto": raw on a local folder, arrow-zstd on S3 (what measured fastest on
                         each, see bench/intermediate_format.py)
    tmp_url:             where intermediate objects go (``<tmp_url>/_croupier_tmp/<run id>``); default:
                         the output location (else the first scan's bucket, else the system's
                         temporary folder). Stored as a canonical URL (relative paths resolved)
    s3:                  endpoint and credentials for ``s3://`` URLs
    progress:            show progress bars; None = only when stderr is a terminal
    profile:             storage profile (file or shipped name) the selector uses; None: the shipped
                         profile for the store kind (local, seaweedfs-loopback, aws-s3)
    max_workers:         largest P the selector may choose; None: from the profile
    broadcast_limit:     queries: a join is a broadcast join (no shuffle of the probe side) when its
                         build side, measured at run time, times the probe side's tasks (each
                         reads all of it) is at most this many bytes, or less than a shuffle of
                         the probe side (a table scan) would move; else a shuffle hash join.
                         0: never broadcast
    gather_limit:        queries: a sort whose input measures at most this many bytes runs in one
                         task; above it, sampled range partitioning over P tasks
    workers:             force P for every partitioned exchange of a job (None: the selector's
                         choice, bound when the producers have reported their bytes)
    algorithm:           force the exchange algorithm family of every partitioned exchange:
                         "direct", "direct+wc", "2-level", "2-level+wc", "3-level", "3-level+wc",
                         and "3-level+mem", "3-level+wc+mem" (level 2 in the tasks' memory, MinFlow;
                         see croupier.exchange.levels) — the names explain prints; the selector
                         still picks P and the topology
    topology:            force the exact topology ("4x3": P=12 in two levels) of every
                         partitioned exchange
    objective:           what the selector minimises: "time" or "cost"
    budget:              with objective "time": the most a run's exchange may cost, USD
    speculation:         backup copies of straggling tasks (see croupier.compute.speculation);
                         None turns speculation off
    faults:              inject storage faults into every store of the run (tests, chaos runs);
                         see croupier.storage.faults.FaultSpec
    executor:            "local" (worker processes on this machine) or "lithops" (serverless
                         functions through Lithops, see croupier.compute.lithops_executor)
    lithops_config:      Lithops configuration: a file path, or None for Lithops' own lookup
                         (LITHOPS_CONFIG_FILE, ~/.lithops/config)
    prefetch:            look-ahead prefetch: a function fetches its next task's inputs while it
                         runs the current one (see croupier.storage.prefetch)
    lease:               seconds a run's lease (on its temporaries and its output's writer lock)
                         lasts unless renewed; renewed every third of it while the run lives.
                         ``croupier clean`` removes a run's leftovers only once it has expired
    reducers:            "lazy": a sort's reducers start after all mappers; "eager": once
                         ``eager_after`` of the mappers finished, polling for their inputs (SEER
                         §5.1; direct exchange without write combining only)
    calibration:         "auto": with no ``profile`` given, a run uses the profile calibrated for
                         this machine and its intermediate store (cached under ``profile_cache``),
                         calibrates one on its first job if there is none (10-15 s, once; local
                         executor only), and refines it from every run's measured stages; "off":
                         the shipped profile of the store kind, no cache read or written. Default:
                         :data:`DEFAULT_CALIBRATION` ("auto"; the test suite sets "off"), or
                         ``CROUPIER_CALIBRATION`` when set (as ``CROUPIER_PROFILE_CACHE`` for the cache)
    profile_cache:       folder of the self-calibrated profiles (default ~/.cache/croupier/profiles)
    fast_tier:           a small fast store beside the slow one (``redis://host:port[/db]/prefix``)
                         for exchange objects (Locus §3.3); None: none. Canonical URL once parsed
    tier:                where exchanges put their intermediate objects: "slow" (the run's
                         temporaries, as without a fast tier), "fast" (every exchange on
                         ``fast_tier``; falls back to the slow tier if the fast one fills up or
                         dies), "hybrid" (Locus' multi-round exchange: rounds of r bytes through
                         ``fast_tier``, runs on the slow tier; see croupier.exchange.hybrid),
                         or
                         "auto" (the default: per exchange, the tier the model predicts best,
                         the fast one also when only part of the exchange fits it and the rest
                         spills, see croupier.model.tier)
    fast_profile:        the fast tier's profile for the tier model (a file from ``croupier calibrate
                         --store redis://...`` or a shipped name: redis-loopback, aws-elasticache,
                         s3-express); None: the shipped one for its kind
    pipelined:           a hybrid exchange's rounds: True pipelined (each round's combiners beside
                         its producers, plain fast objects), False not (combined fast objects,
                         combiners after the round's last producer); None (the default): the
                         variant the model predicts better (croupier.model.tier; the variants:
                         croupier.exchange.hybrid)
    """

    concurrency: int = field(default_factory=lambda: os.cpu_count() or 1)
    function_memory: int = parse_size("4GiB")
    task_timeout: float = parse_duration("15m")
    request_timeout: float = parse_duration("60s")
    retry: RetryPolicy = RetryPolicy()
    intermediate_format: str = "auto"
    tmp_url: str | None = None
    s3: S3Options = field(default_factory=lambda: S3Options.from_env(os.environ))  # as the CLI: the AWS_* variables
    progress: bool | None = None
    profile: str | None = None
    max_workers: int | None = None
    broadcast_limit: int = parse_size("64MiB")
    gather_limit: int = parse_size("256MiB")
    workers: int | None = None
    algorithm: str | None = None
    topology: str | None = None
    objective: str = "time"
    budget: float | None = None
    speculation: SpeculationPolicy | None = field(default_factory=SpeculationPolicy)
    faults: Any = None
    executor: str = "local"
    lithops_config: Any = None
    prefetch: bool = True
    reducers: str = "lazy"
    eager_after: float = 0.25
    lease: float = parse_duration("120s")
    calibration: str = field(default_factory=lambda: os.environ.get("CROUPIER_CALIBRATION") or DEFAULT_CALIBRATION)
    profile_cache: str = field(default_factory=lambda: os.environ.get("CROUPIER_PROFILE_CACHE") or str(Path.home() / ".cache" / "croupier" / "profiles"))
    fast_tier: str | None = None
    tier: str = "auto"
    fast_profile: str | None = None
    pipelined: bool | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.lease, (int, float)) and math.isfinite(self.lease) and self.lease > 0):
            raise ConfigError(f"lease must be a positive number of seconds, got {self.lease!r}")
        if self.tmp_url is not None:
            from croupier.storage.location import parse_location  # storage imports config

            object.__setattr__(self, "tmp_url", str(parse_location(self.tmp_url)))
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.function_memory < MIN_FUNCTION_MEMORY:
            raise ConfigError(f"function_memory must be at least 256 MiB (a function needs about 110 MiB before it holds any data), got {self.function_memory} bytes")
        if self.reducers not in ("lazy", "eager") or not 0.0 <= self.eager_after <= 1.0:
            raise ConfigError(f"reducers must be 'lazy' or 'eager' and eager_after in [0, 1], got {self.reducers!r}, {self.eager_after}")
        if self.calibration not in CALIBRATION_MODES:
            raise ConfigError(f"calibration must be one of {', '.join(CALIBRATION_MODES)}, got {self.calibration!r}")
        if self.executor not in ("local", "lithops"):
            raise ConfigError(f"executor must be 'local' or 'lithops', got {self.executor!r}")
        self._check_forcing()
        self._check_tier()
        if self.intermediate_format not in ("auto", "raw", "arrow-lz4", "arrow-zstd", "arrow"):
            raise ConfigError(
                f"intermediate_format must be auto, raw, arrow, arrow-lz4 or arrow-zstd, got {self.intermediate_format!r}"
            )

    def _check_tier(self) -> None:
        """``tier`` must be known, and a forced fast tier or hybrid variant needs ``fast_tier``
        (checked before any work)."""
        if self.tier not in TIERS:
            raise ConfigError(f"tier must be one of {', '.join(TIERS)}, got {self.tier!r}")
        if self.fast_tier is not None:
            from croupier.storage.location import parse_location  # storage imports config

            location = parse_location(self.fast_tier)
            if location.is_local:
                raise ConfigError(f"fast_tier must be a Redis store (redis://host:port[/db]/prefix), got {self.fast_tier!r}")
            object.__setattr__(self, "fast_tier", str(location))
        elif self.tier in ("fast", "hybrid"):
            raise ConfigError(f"tier {self.tier!r} needs a fast tier: pass --fast-tier redis://host:port/prefix (Config(fast_tier=...))")
        elif self.pipelined is not None:
            raise ConfigError("pipelined (--pipelined/--no-pipelined) picks how a hybrid exchange runs its rounds through a fast tier, and there is none: pass --fast-tier redis://host:port/prefix (Config(fast_tier=...)) or leave it out")

    def _check_forcing(self) -> None:
        """The forcing fields must name something that exists (checked before any work)."""
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"workers must be at least 1, got {self.workers}")
        if self.algorithm is not None and self.algorithm not in ALGORITHMS:
            raise ConfigError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        if self.objective not in ("time", "cost"):
            raise ConfigError(f"objective must be 'time' or 'cost', got {self.objective!r}")
        if self.budget is not None and self.budget <= 0:
            raise ConfigError(f"budget must be a positive amount of USD, got {self.budget}")
        if self.topology is not None:
            workers = _topology_workers(self.topology)
            if self.workers is not None and workers != self.workers:
                raise ConfigError(f"topology {self.topology} has {workers} workers but workers is {self.workers}")
            levels = self.topology.count("x") + 1
            if self.algorithm is not None and not self.algorithm.startswith("direct" if levels == 1 else f"{levels}-level"):
                raise ConfigError(f"topology {self.topology} has {levels} level(s); it does not fit algorithm {self.algorithm}")

    def shuffle_encoding(self, shuffle_url: str) -> str:
        """The encoding of shuffle objects stored under ``shuffle_url`` ("auto" resolved)."""
        if self.intermediate_format != "auto":
            return self.intermediate_format
        return "arrow-zstd" if shuffle_url.lower().startswith("s3://") else "raw"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Config:
        """Build a config from environment variables (CROUPIER_*, AWS_*) and explicit overrides."""
        env = os.environ if env is None else env
        values: dict[str, object] = {"s3": S3Options.from_env(env)}
        if env.get("CROUPIER_CONCURRENCY"):
            values["concurrency"] = int(env["CROUPIER_CONCURRENCY"])
        if env.get("CROUPIER_FUNCTION_MEMORY"):
            values["function_memory"] = parse_size(env["CROUPIER_FUNCTION_MEMORY"])
        if env.get("CROUPIER_TMP"):
            values["tmp_url"] = env["CROUPIER_TMP"]
        if env.get("CROUPIER_EXECUTOR"):
            values["executor"] = env["CROUPIER_EXECUTOR"]
        if env.get("CROUPIER_LEASE"):
            values["lease"] = parse_duration(env["CROUPIER_LEASE"])
        if env.get("CROUPIER_CALIBRATION"):
            values["calibration"] = env["CROUPIER_CALIBRATION"]
        if env.get("CROUPIER_FAST_TIER"):
            values["fast_tier"] = env["CROUPIER_FAST_TIER"]
        if env.get("CROUPIER_FAST_PROFILE"):
            values["fast_profile"] = env["CROUPIER_FAST_PROFILE"]
        if env.get("CROUPIER_PROFILE_CACHE"):
            values["profile_cache"] = env["CROUPIER_PROFILE_CACHE"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    def with_(self, **changes: object) -> Config:
        """Return a copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]


#: What ``Config.tier`` may be.
TIERS = ("auto", "slow", "fast", "hybrid")

#: Exchange algorithm families, as explain prints them.
ALGORITHMS = ("direct", "direct+wc", "2-level", "2-level+wc", "3-level", "3-level+wc", "3-level+mem", "3-level+wc+mem")


def _topology_workers(text: str) -> int:
    """P of a topology written "4x3" (group sizes >= 2, or one group), with a clear error."""
    try:
        groups = [int(part) for part in text.lower().split("x")]
    except ValueError:
        groups = []
    if not groups or any(g < 1 for g in groups) or (len(groups) > 1 and any(g < 2 for g in groups)):
        raise ConfigError(f"cannot read topology {text!r}; write group sizes like 3x4 or 2x2x3 (each at least 2)")
    return math.prod(groups)


def default_profile_name(url: str, s3: S3Options) -> str:
    """Shipped profile for a store: local folders, SeaweedFS on loopback, else AWS S3."""
    if not url.lower().startswith("s3://"):
        return "local"
    if s3.endpoint and ("127.0.0.1" in s3.endpoint or "localhost" in s3.endpoint):
        return "seaweedfs-loopback"
    return "aws-s3"
