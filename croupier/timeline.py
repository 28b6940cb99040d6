"""A run drawn as a timeline of functions by phase (Lambada Fig. 13 style), beside the model's
predicted and the measured time of each stage. Needs the optional extra ``plots`` (matplotlib).

Each row is one function (a local worker process; on Lithops, where calls have no stable worker,
rows are packed greedily); each task is a bar from its start to its end, cut into its phases in the
order they ran — reads, operators, writes — with what the phases do not account for (start-up,
waiting for inputs, returning the result) left grey.
"""

from __future__ import annotations

from typing import Any

from croupier.errors import ConfigError
from croupier.report import RunReport

#: Phase colours by what the phase does.
COLOURS = {"read": "#4c78a8", "write": "#f58518", "regroup": "#b279a2", "compute": "#54a24b", "other": "#d0d0d0"}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("timeline plots need matplotlib: pip install 'croupier[plots]'") from exc
    return plt


def phase_group(kind: str) -> str:
    """The colour group of a phase kind (``read:parquet`` -> read, ``hash_aggregate`` -> compute)."""
    head = kind.split(":", 1)[0]
    return head if head in ("read", "write", "regroup") else "compute"


def task_rows(report: RunReport) -> list[tuple[int, str, float, float, dict[str, float]]]:
    """(row, stage, start, end, phases) of every task, times in seconds from the first start."""
    tasks = [(stage.name, int(w), float(a), float(b), dict(ph)) for stage in report.stages for _, w, a, b, ph in stage.timeline]
    if not tasks:
        return []
    zero = min(a for _, _, a, _, _ in tasks)
    rows: list[tuple[int, str, float, float, dict[str, float]]] = []
    busy_until: list[float] = []  # greedy packing for tasks without a worker id
    workers = sorted({w for _, w, _, _, _ in tasks if w >= 0})
    index = {w: i for i, w in enumerate(workers)}
    for name, w, a, b, ph in sorted(tasks, key=lambda t: t[2]):
        if w >= 0:
            row = index[w]
        else:
            free = [i for i, until in enumerate(busy_until) if until <= a]
            if free:
                row = free[0]
                busy_until[row] = b
            else:
                row = len(busy_until)
                busy_until.append(b)
            row += len(workers)
        rows.append((row, name, a - zero, b - zero, ph))
    return rows


def plot_timeline(report: RunReport, path: str) -> int:
    """Draw ``report`` to ``path`` (PNG, SVG, PDF by extension); return the number of tasks drawn."""
    rows = task_rows(report)
    if not rows:
        raise ConfigError(f"run {report.run_id} has no task timeline to draw (reports written before this version have none)")
    plt = _pyplot()
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(11, 7), gridspec_kw={"height_ratios": [3, 1.3]})
    for row, _, start, end, phases in rows:
        ax.barh(row, end - start, left=start, color=COLOURS["other"], height=0.8)
        at, scale = start, min(1.0, (end - start) / max(sum(phases.values()), 1e-9))
        for kind, wall in phases.items():
            width = wall * scale
            ax.barh(row, width, left=at, color=COLOURS[phase_group(kind)], height=0.8)
            at += width
    from matplotlib.patches import Patch

    handles = [Patch(color=colour, label=group if group != "other" else "start-up / waiting") for group, colour in COLOURS.items()]
    functions = max(row for row, *_ in rows) + 1
    ax.set_yticks(range(functions), [str(i) for i in range(functions)] if functions <= 40 else None)
    ax.set_xlabel("seconds since the first task started")
    ax.set_ylabel("function")
    ax.set_title(f"{report.job} run {report.run_id}: {len(rows)} tasks, {report.wall_seconds:.2f} s")
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    stages = [s for s in report.stages if s.predicted.get("seconds") is not None]
    names = [s.name for s in stages]
    bx.bar([i - 0.2 for i in range(len(stages))], [s.wall_seconds for s in stages], width=0.4, label="measured")
    bx.bar([i + 0.2 for i in range(len(stages))], [float(s.predicted["seconds"]) for s in stages], width=0.4, label="predicted")
    bx.set_xticks(range(len(stages)), names, rotation=20, fontsize=7)
    bx.set_ylabel("stage seconds")
    bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return len(rows)
