"""``croupier calibrate``: measure a store, or refit a profile from stored run reports.

Measuring runs what a run's self-calibration runs (:mod:`croupier.dag.calibration`: a grid of
requests, then the standard workload of stages with forced plans), with larger sizes unless
``quick``; the fit (:mod:`croupier.model.fit`) gives every coefficient with its standard error.
``from_reports`` refits a profile's coefficients to the stages of run reports written with
``--report`` (the grid's curves stay the base profile's: reports hold no isolated requests).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from croupier.config import Config
from croupier.dag.calibration import FULL, QUICK, QUICK_BOOTSTRAP, Calibration, Sizes, calibrate_store, describe_grid
from croupier.dag.run import make_executor
from croupier.errors import ConfigError
from croupier.model.cache import Entry, ProfileCache, machine_id, store_key
from croupier.model.fit import FitResult, Observation, fit, observations_from_report, warm_only
from croupier.model.profile import EXPRESSIONS_PER_CALL, SIGNATURE, StorageProfile, base_kind
from croupier.storage.location import parse_location


#: Seconds a calibration may take: quick (what a first run does: the default of
#: :func:`croupier.dag.calibration.calibrate_store`) and full.
QUICK_BUDGET, FULL_BUDGET = 15.0, 90.0


def calibrate(url: str, config: Config, quick: bool = True, name: str | None = None, sizes: Sizes | None = None, cache: bool = False) -> Calibration:
    """Measure the store at ``url`` (objects under it are deleted afterwards) and fit its profile;
    with ``cache``, also store it as this machine's profile of that store (runs then use it)."""
    chosen = sizes or (QUICK if quick else FULL)
    with make_executor(config) as executor:
        outcome = calibrate_store(executor, config, str(parse_location(url)), name or url, chosen, bootstrap=QUICK_BOOTSTRAP if quick else 100, budget=QUICK_BUDGET if quick else FULL_BUDGET)  # quick: as a first run
    machine, store = machine_id(), store_key(url, config.s3.endpoint)
    profile = replace(outcome.profile, machine=machine, store=store)
    outcome = replace(outcome, result=replace(outcome.result, profile=profile))
    if cache:
        ProfileCache(config.profile_cache).save(Entry(profile, outcome.observations), machine, store, config.concurrency)
    return outcome


def from_reports(paths: Iterable[str | Path], base: StorageProfile, concurrency: int) -> FitResult:
    """Refit ``base`` to the stages of the run reports (JSON files from ``--report``); a report's
    stages say the concurrency they ran with (``concurrency`` for older reports)."""
    observations: list[Observation] = []
    for path in paths:
        try:
            report: dict[str, Any] = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read run report {path}: {exc}") from exc
        ran = next((s["predicted"]["concurrency"] for s in report.get("stages", []) if s.get("predicted", {}).get("concurrency")), concurrency)
        observations += observations_from_report(report, int(ran), str(report.get("run_id", path)))
    if not observations:
        raise ConfigError("the reports hold no stages to fit (write them with --report from runs of this version)")
    result = fit(warm_only(observations), base)
    return replace(result, profile=replace(result.profile, revision=base.revision + 1, source=base.source + f"; refitted from {len(observations)} stages of run reports"))


def describe(profile: StorageProfile) -> str:
    """Human-readable summary of a profile: curves, bandwidths, every coefficient with its error."""
    lines = [f"profile {profile.label} ({profile.source})"]
    lines += describe_grid(profile)
    lines.append(f"  bandwidth per stream: read {profile.read_bandwidth / 1e6:.1f} MB/s, write {profile.write_bandwidth / 1e6:.1f} MB/s; grid up to {profile.max_streams or '?'} in flight")

    def pm(key: str, value: float, factor: float, unit: str) -> str:
        if value == 0:
            return "not identified (0)"
        e = profile.relative_error(key) * value
        return f"{value * factor:.3g} +- {e * factor:.2g} {unit}"

    lines.append(
        f"  stage start-up {pm('t0', profile.startup_seconds, 1e3, 'ms')} + {pm('t1', profile.wave_seconds, 1e3, 'ms')} per wave; "
        + (f"first touch {pm('first_touch', profile.first_touch_seconds_per_byte, 1e12, 'ms/GB')} of one task's data (stated, not fitted)" if profile.first_touch_seconds_per_byte else "no first-touch cost (warm functions)")
    )
    if profile.imbalance:
        lines.append(f"  unequal tasks end a stage {pm('imbalance', profile.imbalance, 1e2, '%')} of a task's work later than evenly packed ones would")
    else:
        lines.append("  no imbalance term (every stage's tasks taken as equal)")
    lines.append(f"  storage terms: read x{pm('read_scale', profile.read_scale, 1, '')}, write x{pm('write_scale', profile.write_scale, 1, '')} of the grid's")
    lines.append(f"  compute per phase kind on one core: ns per byte, and ms per call (a phase's fixed cost in each task; an operator's call weighs 1 + its expressions / {EXPRESSIONS_PER_CALL:g}):")
    kinds = set(profile.compute) | set(profile.call_seconds)
    for kind in sorted(k for k in kinds if SIGNATURE not in k):
        per_byte = pm("compute:" + kind, profile.compute[kind], 1e9, "ns/B") if kind in profile.compute else "-"
        per_call = pm("call:" + kind, profile.call_seconds[kind], 1e3, "ms/call") if kind in profile.call_seconds else "-"
        lines.append(f"    {kind or '(other operators)':<48} {per_byte:<22} {per_call}")
    signed = sorted(k for k in kinds if SIGNATURE in k)
    if signed:
        lines.append(f"    and {len(signed)} operators priced by their own runs (kind#signature: {', '.join(sorted({base_kind(k) for k in signed}))})")
    lines.append(f"  unexplained spread of stage times: {100 * profile.residual:.1f}% (1 sd); fit: {profile.fit}")
    return "\n".join(lines)


def _exchange_seconds(report: Any) -> float:
    """Wall time of the stages that move a sort's data: map, levels, reduce."""
    return sum(s.wall_seconds for s in report.stages if s.name in ("map", "reduce") or s.name.startswith("reduce level"))


def relative_errors(observations: Iterable[Observation], profile: StorageProfile) -> list[float]:
    """Predicted / measured - 1 of each observation under ``profile``."""
    from croupier.model.stage import predict_stage

    return [predict_stage(o.facts, profile, o.concurrency).seconds / o.wall - 1 for o in observations if o.wall > 0 and not math.isnan(o.wall)]
