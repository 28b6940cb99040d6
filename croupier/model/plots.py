"""Plots (optional extra ``plots``: matplotlib): fitted q(s, P) curves, predicted versus measured."""

from __future__ import annotations

from typing import Sequence

from croupier.errors import ConfigError
from croupier.model.profile import StorageProfile


def _pyplot():  # type: ignore[no-untyped-def]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("plots need matplotlib: pip install 'croupier[plots]'") from exc
    return plt


def plot_profile(profile: StorageProfile, path: str, measured: dict[str, dict[tuple[int, int], float]] | None = None) -> None:
    """q(s, P) for reads and writes at each calibrated size, with the measured points if given."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=False)
    for ax, op in zip(axes, ("read", "write")):
        curve = getattr(profile, op)
        top = max(16, max((p for (_, p) in (measured or {}).get(op, {})), default=16))
        ps = list(range(1, top + 1))
        for size in curve.sizes:
            line = ax.plot(ps, [curve.q(size, p) for p in ps], label=f"{int(size):,} B")[0]
            points = [(p, q) for (s, p), q in (measured or {}).get(op, {}).items() if s == size]
            if points:
                ax.scatter(*zip(*points), color=line.get_color(), s=14)
        ax.set(title=f"{profile.name}: {op} throughput q(s, P)", xlabel="P (workers at once)", ylabel="requests/s", yscale="log")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_accuracy(rows: Sequence[tuple[str, float, float]], path: str) -> None:
    """Predicted against measured seconds, one point per (label, predicted, measured)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 5))
    predicted = [r[1] for r in rows]
    measured = [r[2] for r in rows]
    ax.scatter(measured, predicted, s=12)
    top = max(predicted + measured + [0.01])
    ax.plot([0, top], [0, top], color="grey", linewidth=1)
    ax.set(xlabel="measured s", ylabel="predicted s", title="exchange time: predicted vs measured")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
