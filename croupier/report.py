"""Run reports: per stage wall time, tasks, bytes and requests by kind; text and JSON forms."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from croupier.storage.stats import KINDS, IOStats
from croupier.units import format_bytes


#: Measured and predicted stage time further apart than this factor (either way) is "far off".
FAR_OFF = 2.0
#: Runs whose predicted stages took less than this are too short to judge the model by.
MIN_JUDGED_SECONDS = 2.0
#: Values per phase kind in a stage's ``phases``: bytes of data, wall seconds, request seconds,
#: calls, and fresh memory bytes (what the phase first touched: see croupier.dag.task.Phases).
PHASE_FIELDS = 5
#: A phase that faulted in fresh memory of at least this share of its bytes, and at least
#: FRESH_FLOOR per call, ran in a cold function (:func:`cold_phase`). Warm tasks touch a few hundred KB per
#: phase whatever their size; a cold one about as much as its data (0.3-1.8 byte per byte), and
#: faulting costs about 2 ns/B here, so at 5% the fresh memory adds about 0.1 ns/B to a kind that
#: costs 0.3-5 ns/B.
FRESH_SHARE, FRESH_FLOOR = 0.05, float(1 << 20)


def cold_phase(values: Sequence[float]) -> bool:
    """Whether a phase's values (PHASE_FIELDS: bytes, wall, request s, calls, fresh bytes, summed
    over a stage's tasks) say it ran in a function still faulting its memory in: the first tasks of fresh workers, or tasks
    larger than any their function ran before. Its time is then partly the memory's, not what its
    kind costs warm (a run's learning leaves its stage out). Values without the fresh bytes
    (reports older than them, synthetic timings) count as warm."""
    fresh = values[4] if len(values) > 4 else 0.0
    return fresh >= FRESH_FLOOR * max(1.0, values[3]) and fresh >= FRESH_SHARE * values[0]


def ran_cold(phases: Mapping[str, Sequence[float]]) -> bool:
    """Whether any phase of a stage's ``phases`` ran cold (:func:`cold_phase`)."""
    return any(cold_phase(v) for v in phases.values())


@dataclass
class StageReport:
    """What one stage did and cost."""

    name: str
    wall_seconds: float = 0.0
    tasks: int = 0
    io: IOStats = field(default_factory=IOStats)
    exchange: IOStats = field(default_factory=IOStats)
    task_seconds: float = 0.0
    slowest_task_seconds: float = 0.0
    peak_rss: int = 0
    retried_tasks: int = 0
    backup_wins: int = 0
    #: (task id, asked for, started), seconds after the first request: serverless invocation timeline
    invocations: list[tuple[str, float, float]] = field(default_factory=list)
    #: requests per exchange channel ("x:<producer stage>"), to hold each exchange to its plan
    channels: dict[str, IOStats] = field(default_factory=dict)
    #: per phase kind (read:parquet, hash_aggregate, write:exchange-...): [bytes, wall s, request s,
    #: calls, fresh memory bytes] (PHASE_FIELDS of them; reports written before fresh memory was
    #: measured have the first four)
    phases: dict[str, list[float]] = field(default_factory=dict)
    #: the model's prediction of this stage (seconds, dominant term, terms), from what it measured
    predicted: dict[str, Any] = field(default_factory=dict)
    #: the stages that ran in the same executor call as this one (their wall time is the call's)
    shared: tuple[str, ...] = ()
    #: per task: [task id, worker, started, finished (epoch seconds), {phase kind: wall seconds}]
    timeline: list[list[Any]] = field(default_factory=list)
    #: reads of exchange objects served from rows a worker kept (broadcast sides): per channel and
    #: request kind, the requests they would have been
    cached: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def cold(self) -> bool:
        """Whether a phase of it ran in a function still faulting its memory in (:func:`cold_phase`)."""
        return ran_cold(self.phases)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "name": self.name,
            "wall_seconds": round(self.wall_seconds, 4),
            "tasks": self.tasks,
            "bytes_read": self.io.bytes_read,
            "bytes_written": self.io.bytes_written,
            "requests": {k: v["requests"] for k, v in self.io.to_dict().items()},
            "io": self.io.to_dict(),
            "exchange_io": self.exchange.to_dict(),
            "task_seconds": round(self.task_seconds, 4),
            "slowest_task_seconds": round(self.slowest_task_seconds, 4),
            "backup_wins": self.backup_wins,
            "invocations": [[t, round(a, 4), round(b, 4)] for t, a, b in self.invocations],
            "phases": {k: [round(x, 6) for x in v] for k, v in self.phases.items()},
            "predicted": self.predicted,
            "shared": list(self.shared),
            "timeline": [[t, w, round(a, 4), round(b, 4), {k: round(v, 4) for k, v in ph.items()}] for t, w, a, b, ph in self.timeline],
            "peak_rss": self.peak_rss,
            "retried_tasks": self.retried_tasks,
            "cached": self.cached,
        }


    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageReport:
        """The stage back from :meth:`to_dict` (a run report read from JSON)."""
        return cls(
            name=data["name"],
            wall_seconds=data.get("wall_seconds", 0.0),
            tasks=data.get("tasks", 0),
            io=IOStats.from_dict(data.get("io", {})),
            exchange=IOStats.from_dict(data.get("exchange_io", {})),
            task_seconds=data.get("task_seconds", 0.0),
            slowest_task_seconds=data.get("slowest_task_seconds", 0.0),
            peak_rss=data.get("peak_rss", 0),
            retried_tasks=data.get("retried_tasks", 0),
            backup_wins=data.get("backup_wins", 0),
            invocations=[tuple(i) for i in data.get("invocations", [])],  # type: ignore[misc]
            phases=data.get("phases", {}),
            predicted=data.get("predicted", {}),
            shared=tuple(data.get("shared", ())),
            timeline=data.get("timeline", []),
            cached=data.get("cached", {}),
        )


@dataclass
class RunReport:
    """Stages of one job run plus a job-specific summary (records, checksums, validity...)."""

    job: str
    run_id: str
    stages: list[StageReport] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float = 0.0
    #: every exchange bound in the run: producer, consumer, bytes, plan, P, why, candidates
    exchanges: list[dict[str, Any]] = field(default_factory=list)

    @property
    def io(self) -> IOStats:
        """Requests and bytes of all stages together."""
        return IOStats.total(stage.io for stage in self.stages)

    def stage(self, name: str) -> StageReport:
        """The stage called ``name``."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"no stage {name!r} in run {self.run_id}; stages: {[s.name for s in self.stages]}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        total = self.io
        return {
            "job": self.job,
            "run_id": self.run_id,
            "wall_seconds": round(self.wall_seconds, 4),
            "summary": self.summary,
            "stages": [s.to_dict() for s in self.stages],
            "exchanges": self.exchanges,
            "totals": {
                "bytes_read": total.bytes_read,
                "bytes_written": total.bytes_written,
                "requests": {k: v["requests"] for k, v in total.to_dict().items()},
                "retries": total.retries,
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunReport:
        """The report back from :meth:`to_dict` (``croupier report run.json``)."""
        stages = [StageReport.from_dict(s) for s in data.get("stages", [])]
        return cls(data["job"], data["run_id"], stages, data.get("summary", {}), data.get("wall_seconds", 0.0), data.get("exchanges", []))

    @classmethod
    def read_json(cls, path: str) -> RunReport:
        """Read a report written by ``--report FILE`` / :meth:`write_json`."""
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    def write_json(self, path: str) -> None:
        """Write :meth:`to_dict` as JSON to a local file."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2, default=str)

    def model_check(self) -> str | None:
        """One line comparing the model's predictions with the measured time of the stages that
        ran alone (stages sharing an executor call share one wall time); when they are more than
        FAR_OFF apart on a run long enough to judge, it says so and what to do."""
        judged = [s for s in self.stages if s.predicted.get("seconds") and not s.shared]
        if not judged:
            return None
        measured, predicted = sum(s.wall_seconds for s in judged), sum(float(s.predicted["seconds"]) for s in judged)
        profile = next((s.predicted["profile"] for s in judged if s.predicted.get("profile")), "the profile")
        line = f"model: stages measured {measured:.2f} s, predicted {predicted:.2f} s with {profile}"
        cold = [s for s in self.stages if s.cold]
        if cold:
            fresh = sum(v[4] for s in cold for v in s.phases.values() if len(v) > 4)
            names = ", ".join(s.name for s in cold[:3]) + (f" and {len(cold) - 3} more" if len(cold) > 3 else "")
            line += (
                f"; {names} ran in functions still faulting their memory in ({format_bytes(int(fresh))} fresh):"
                " slower than the warm functions the model prices, so not learned from"
            )
        # judged on the warm stages: a cold first run is slow for its memory's sake, not the profile's
        warm = [s for s in judged if not s.cold]
        measured, predicted = sum(s.wall_seconds for s in warm), sum(float(s.predicted["seconds"]) for s in warm)
        ratio = measured / max(predicted, 1e-9)
        if measured >= MIN_JUDGED_SECONDS and not 1 / FAR_OFF <= ratio <= FAR_OFF:
            line += (
                f" — {ratio:.1f}x off: {profile} does not describe this machine and store; "
                "run `croupier calibrate --store <a URL on this store>` (or let the next run self-calibrate)"
            )
        return line

    def render(self) -> str:
        """A plain-text table of the stages, the totals and the summary."""
        kinds = [k for k in KINDS if self.io.requests(k) or self.io.kinds.get(k)]
        width = max([10] + [len(s.name) for s in self.stages])
        header = f"{'stage':<{width}} {'wall s':>8} {'tasks':>6} {'read':>11} {'written':>11} " + " ".join(f"{k:>9}" for k in kinds)
        lines = [f"{self.job} run {self.run_id}: {self.wall_seconds:.2f} s", header, "-" * len(header)]
        rows = [(s.name, s.wall_seconds, s.tasks, s.io) for s in self.stages]
        rows.append(("total", self.wall_seconds, sum(s.tasks for s in self.stages), self.io))
        for name, wall, tasks, io in rows:
            lines.append(
                f"{name:<{width}} {wall:>8.2f} {tasks:>6} {format_bytes(io.bytes_read):>11} "
                f"{format_bytes(io.bytes_written):>11} " + " ".join(f"{io.requests(k):>9}" for k in kinds)
            )
        if self.io.retries:
            lines.append(f"retried requests: {self.io.retries}")
        for stage in self.stages:
            if stage.invocations:
                asked = max(a for _, a, _ in stage.invocations)
                started = max(b for _, _, b in stage.invocations)
                delays = sorted(b - a for _, a, b in stage.invocations)
                lines.append(
                    f"invocation of {stage.name}: {len(stage.invocations)} functions asked for within {asked:.2f} s, "
                    f"all started within {started:.2f} s (start delay median {delays[len(delays) // 2]:.2f} s, max {delays[-1]:.2f} s)"
                )
        prefetched = sum(k.prefetched for k in self.io.kinds.values())
        if prefetched:
            ahead = sum(k.prefetched_seconds for k in self.io.kinds.values())
            lines.append(f"look-ahead prefetch: {prefetched} requests served from prefetched bytes ({ahead:.2f} s of requests done while the previous task ran)")
        retried = sum(s.retried_tasks for s in self.stages)
        backups = sum(s.backup_wins for s in self.stages)
        if retried or backups:
            lines.append(f"retried tasks: {retried}; tasks won by a speculative backup copy: {backups}")
        for key, value in self.summary.items():
            lines.append(f"{key}: {value}")
        check = self.model_check()
        if check:
            lines.append(check)
        return "\n".join(lines)


def add_counts(into: dict[str, dict[str, int]], more: Mapping[str, Mapping[str, int]]) -> None:
    """Add request counts per channel and kind (``more``) into ``into``."""
    for channel, kinds in more.items():
        got = into.setdefault(channel, {})
        for kind, n in kinds.items():
            got[kind] = got.get(kind, 0) + n


def served_requests(exchange: dict[str, Any]) -> dict[str, int]:
    """An exchange entry's requests as its plan counts them: those measured plus the reads a
    worker served from rows it kept (broadcast sides read again by its later tasks)."""
    out = dict(exchange.get("measured_requests", {}))
    for kind, n in exchange.get("cached_requests", {}).items():
        out[kind] = out.get(kind, 0) + n
    return out
