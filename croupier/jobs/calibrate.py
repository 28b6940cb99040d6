"""Calibration: measure a store with real concurrent workers and fit a :class:`StorageProfile`.

For each object size and each parallelism P, P workers each PUT ``count`` objects (one stage), then
GET them back (a second stage, so reads never overlap writes). Aggregate requests/s is the total
number of requests over the stage's span; per-worker rate and bandwidth come from P = 1. Then:

* q(s, P) = min(a(s) P, qmax(s)): a(s) = rate at P=1, qmax(s) = best aggregate rate seen;
  goodness of fit = mean absolute % error of the fitted curve over all measured points;
* b_r, b_w = bytes/s of one worker at the largest size;
* stage start-up t0 + t1 * waves, from empty stages of 1 and several waves;
* compute per byte of the partition, regroup and sort kernels, on one core;
* then a few real sorts through the store fit three coefficients of the whole-exchange model
  (storage-term multiplier, compute multiplier, fixed cost per stage) by least squares.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace

import numpy as np

from croupier.compute.base import Task
from croupier.compute.context import TaskContext
from croupier.config import Config
from croupier.dag.run import make_executor
from croupier.model.profile import Curve, Prices, StorageProfile
from croupier.storage import open_store, parse_location
from croupier.units import parse_size

QUICK_SIZES = ("4KiB", "64KiB", "1MiB", "16MiB", "64MiB")
QUICK_WORKERS = (1, 2, 4)
FULL_WORKERS = (1, 2, 4, 8, 16)


def _put_objects(ctx: TaskContext, url: str, prefix: str, size: int, count: int) -> tuple[float, float]:
    store = ctx.store(url)
    data = os.urandom(min(size, 1 << 20)) * max(1, size // (1 << 20))
    data = data[:size] if len(data) >= size else data + os.urandom(size - len(data))
    started = time.time()
    for i in range(count):
        store.put(f"{prefix}/{i:05d}", data)
    return started, time.time()


def _get_objects(ctx: TaskContext, url: str, prefix: str, count: int) -> tuple[float, float]:
    store = ctx.store(url)
    started = time.time()
    for i in range(count):
        store.get(f"{prefix}/{i:05d}")
    return started, time.time()


def _noop(ctx: TaskContext) -> None:
    return None


def _rate(spans: list[tuple[float, float]], requests: int) -> float:
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    return requests / max(end - start, 1e-6)


def measure_io(url: str, config: Config, sizes: list[int], workers: list[int], budget: int) -> dict[str, dict[tuple[int, int], float]]:
    """Aggregate requests/s per (size, P) for "read" and "write"."""
    results: dict[str, dict[tuple[int, int], float]] = {"read": {}, "write": {}}
    store = open_store(url, config)
    for p in workers:
        with make_executor(config.with_(concurrency=p)) as ex:
            ex.map([Task(f"warm-{i}", _noop) for i in range(p)])
            for size in sizes:
                count = max(2, min(200, budget // size))
                prefix = f"_calibrate/{size}-{p}"
                spans = [r.value for r in ex.map([Task(f"put-{w}", _put_objects, (url, f"{prefix}/w{w}", size, count)) for w in range(p)], config)]
                results["write"][(size, p)] = _rate(spans, p * count)
                spans = [r.value for r in ex.map([Task(f"get-{w}", _get_objects, (url, f"{prefix}/w{w}", count)) for w in range(p)], config)]
                results["read"][(size, p)] = _rate(spans, p * count)
                store.delete_prefix(prefix)
    return results


def fit_curve(points: dict[tuple[int, int], float], sizes: list[int]) -> tuple[Curve, float]:
    """Fit min(a P, qmax) per size; return the curve and its mean absolute % error."""
    per_worker, ceiling, errors = [], [], []
    for size in sizes:
        at = {p: q for (s, p), q in points.items() if s == size}
        a = at[min(at)] / min(at)
        qmax = max(at.values())
        per_worker.append(a)
        ceiling.append(max(qmax, a))
        errors += [abs(min(a * p, qmax) - q) / q for p, q in at.items()]
    return Curve(tuple(float(s) for s in sizes), tuple(per_worker), tuple(ceiling)), 100 * float(np.mean(errors))


def measure_startup(config: Config) -> tuple[float, float]:
    """(t0, t1): seconds of a stage of one wave of empty tasks, and per extra wave."""
    c = config.concurrency
    with make_executor(config) as ex:
        ex.map([Task(f"warm-{i}", _noop) for i in range(c)])
        timings = []
        for waves in (1, 8):
            started = time.perf_counter()
            ex.map([Task(f"n{i}", _noop) for i in range(c * waves)])
            timings.append(time.perf_counter() - started)
    t1 = max(0.0, (timings[1] - timings[0]) / 7)
    return max(0.0, timings[0] - t1), t1


def measure_compute(records: int = 400_000, repeats: int = 3) -> tuple[float, float, float]:
    """Seconds per byte, one core, of partitioning, regrouping and sorting: median of ``repeats``."""
    runs = np.array([_compute_once(records) for _ in range(repeats)])
    part, regroup, srt = np.median(runs, axis=0)
    return float(part), float(regroup), float(srt)


def _compute_once(records: int) -> tuple[float, float, float]:
    from croupier.exchange import segments
    from croupier.ops import partition
    from croupier.ops.gensort import generate
    from croupier.ops.payload import RecordsCodec
    from croupier.ops.records import key_columns, sort_order, take

    recs = generate(0, records, seed=1)
    nbytes = recs.nbytes
    started = time.perf_counter()
    hi, lo = key_columns(recs)
    a, b = partition.composite_keys(hi, lo, 0)
    split = partition.choose_splitters(a[::100], b[::100], 16)
    order, bounds = partition.group_by_partition(partition.assign(a, b, *split), 16)
    grouped = take(recs, order)
    t_partition = time.perf_counter() - started
    started = time.perf_counter()
    chunks = RecordsCodec("raw").encode({r: [grouped[bounds[r] : bounds[r + 1]]] for r in range(16)}, 0)
    blob = segments.encode(segments.ordered(segments.decode(b"".join(bytes(x) for x in segments.encode(chunks)), "calibration")))
    RecordsCodec("raw").decode(segments.decode(b"".join(bytes(x) for x in blob), "calibration"))
    t_regroup = time.perf_counter() - started
    started = time.perf_counter()
    take(recs, sort_order(hi, lo))
    t_sort = time.perf_counter() - started
    return t_partition / nbytes, t_regroup / nbytes, t_sort / nbytes


#: Exchanges run to fit the whole-exchange coefficients: (bytes, P, topology, write combining).
FIT_RUNS = (
    (8_000_000, 2, (2,), False),
    (8_000_000, 6, (3, 2), True),
    (8_000_000, 16, (4, 4), True),
    (40_000_000, 4, (4,), True),
    (40_000_000, 4, (2, 2), False),
    (40_000_000, 8, (8,), False),
    (40_000_000, 16, (16,), False),
    # large D/P against small D/P at one D: tells the first-touch term from the storage terms
    (120_000_000, 2, (2,), True),
    (120_000_000, 8, (8,), True),
)


FIT_REPEATS = 2  # runs per fitting exchange; the fastest counts (this machine's timings are noisy)


def _exchange_seconds(report) -> float:  # type: ignore[no-untyped-def]
    """Wall time of the stages that move the data: map, levels, reduce."""
    return sum(s.wall_seconds for s in report.stages if s.name in ("map", "reduce") or s.name.startswith("reduce level"))


def fit_exchanges(url: str, config: Config, profile: StorageProfile) -> StorageProfile:
    """Run a few real sorts; fit io_scale, compute_scale, per-stage t0 and per-wave t1 by least squares.

    Each run's measured exchange time (map + levels + reduce) is modelled as
    io_scale * (storage terms) + compute_scale * (compute terms) + t0 * stages + t1 * waves
    + f * (D/P) * stages (fresh memory of each function's first task); the
    coefficients must be >= 0 (a negative one is dropped and the rest refitted). Compute and
    storage terms both grow with D, so one often absorbs the other.
    """
    from croupier.exchange.plan import ExchangePlan
    from croupier.exchange.topology import Topology
    from croupier.jobs.gensort import gensort
    from croupier.jobs.sort import sort
    from croupier.model.perf import predict

    unit = replace(profile, io_scale=1.0, compute_scale=1.0, startup_seconds=0.0, wave_seconds=0.0)
    rows, measured = [], []
    base = parse_location(url)
    fit_in, fit_out = str(base.child("fit-in")), str(base.child("fit-out"))
    with make_executor(config) as executor:
        for size, p, groups, combine in FIT_RUNS:
            gensort(fit_in, size, 2, config, overwrite=True, executor=executor)
            plan = ExchangePlan(Topology(groups), combine)
            measured.append(min(_exchange_seconds(sort(fit_in, fit_out, p, config, overwrite=True, executor=executor, plan=plan)) for _ in range(FIT_REPEATS)))
            pred = predict(plan, size, unit, config.concurrency)
            terms = [t for stage in pred.stages for t in stage.terms]
            io = sum(t.seconds for t in terms if t.name.startswith(("read", "write")))
            cpu = sum(t.seconds for t in terms if t.name == "compute")
            waves = math.ceil(p / max(1, min(p, config.concurrency))) * len(pred.stages)
            rows.append([io, cpu, len(pred.stages), waves, size / p * len(pred.stages)])
    open_store(url, config).delete_prefix("fit-")
    x, y = np.array(rows, dtype=float), np.array(measured)
    active = [0, 1, 2, 3, 4]
    while True:
        # relative least squares: every run counts by its % error, small ones as much as large
        coef, *_ = np.linalg.lstsq(x[:, active] / y[:, None], np.ones(len(y)), rcond=None)
        if (coef >= 0).all() or len(active) == 1:
            break
        active.pop(int(np.argmin(coef)))
    fitted = dict.fromkeys(range(5), 0.0) | {a: max(0.0, float(c)) for a, c in zip(active, coef)}
    residual = np.abs(x @ np.array([fitted[i] for i in range(5)]) - y) / y
    fit = dict(profile.fit, exchange_fit_mape_percent=round(100 * float(residual.mean()), 2))
    return replace(
        profile, io_scale=fitted[0], compute_scale=fitted[1], startup_seconds=fitted[2], wave_seconds=fitted[3], first_touch_seconds_per_byte=fitted[4], fit=fit
    )


def calibrate(url: str, config: Config, quick: bool = True, name: str | None = None, fit: bool = True) -> StorageProfile:
    """Measure the store at ``url`` and return its fitted profile."""
    sizes = [parse_size(s) for s in QUICK_SIZES]
    workers = [p for p in (QUICK_WORKERS if quick else FULL_WORKERS)]
    budget = parse_size("24MiB" if quick else "128MiB")
    points = measure_io(url, config, sizes, workers, budget)
    read, read_err = fit_curve(points["read"], sizes)
    write, write_err = fit_curve(points["write"], sizes)
    t0, t1 = measure_startup(config)
    part, regroup, srt = measure_compute()
    largest = sizes[-1]
    profile = StorageProfile(
        name=name or url,
        source=f"croupier calibrate {'--quick ' if quick else ''}on {time.strftime('%Y-%m-%d')}, concurrency {config.concurrency}, {os.cpu_count()} cores",
        read=read,
        write=write,
        read_bandwidth=read.per_worker[-1] * largest,
        write_bandwidth=write.per_worker[-1] * largest,
        startup_seconds=t0,
        wave_seconds=t1,
        compute={"write:exchange-records": part, "records_sort": srt, "regroup": regroup},
        concurrency=config.concurrency,
        function_memory=config.function_memory,
        prices=Prices(source="none: a self-hosted store; put prices in the profile to use the cost objective"),
        fit={"read_mape_percent": round(read_err, 2), "write_mape_percent": round(write_err, 2)},
    )
    return fit_exchanges(str(parse_location(url).child("_fit")), config, profile) if fit else profile


def describe(profile: StorageProfile) -> str:
    """Human-readable summary of a profile: fitted curves, bandwidths and fit quality."""
    lines = [f"profile {profile.name} ({profile.source})"]
    for op, curve in (("read", profile.read), ("write", profile.write)):
        for s, a, q in zip(curve.sizes, curve.per_worker, curve.ceiling):
            knee = q / a if a else math.inf
            lines.append(f"  {op:<5} {int(s):>10,} B: {a:9.1f} req/s per worker, ceiling {q:9.1f} req/s (flat from P={knee:.1f})")
    lines.append(f"  bandwidth per worker: read {profile.read_bandwidth / 1e6:.1f} MB/s, write {profile.write_bandwidth / 1e6:.1f} MB/s")
    lines.append(f"  stage start-up {profile.startup_seconds * 1000:.1f} ms + {profile.wave_seconds * 1000:.1f} ms per wave; concurrency {profile.concurrency}")
    lines.append("  compute per MB (one core): " + ", ".join(f"{k} {v * 1e9:.2f} ms" for k, v in sorted(profile.compute.items())))
    lines.append(
        f"  whole-exchange fit: storage terms x{profile.io_scale:.2f}, compute x{profile.compute_scale:.2f}, "
        f"{profile.startup_seconds * 1000:.1f} ms per stage, {profile.wave_seconds * 1000:.1f} ms per wave, "
        f"{profile.first_touch_seconds_per_byte * 1e9:.2f} ms per MB of a function's first task"
    )
    lines.append(f"  fit (mean abs % error): {profile.fit}")
    return "\n".join(lines)
