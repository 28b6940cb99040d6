"""The selector's coarse-to-fine search of P against trying every P, on the shipped cloud profiles.

With more than :data:`croupier.model.selector.EVERY_P` values of P to choose from (a cloud platform's
thousand functions), the selector predicts a coarse set of P and then the neighbourhoods of the best
(:func:`croupier.model.selector.search`). This compares it with trying every P on a grid of profiles
(aws-s3, ibm-cos), function memory (1, 3, 10 GiB), exchange sizes (2 GB to 400 GB) and objectives
(time, cost, time within a budget of 1.5x the cheapest): per case whether both pick the same plan,
how much slower (or dearer) the search's best point estimate is, the candidates each predicted, and
the seconds each took. Prints the cases that differ and the totals.

    python bench/selector_search.py
"""

from __future__ import annotations

import time
from dataclasses import replace

from croupier.model import selector
from croupier.model.profile import StorageProfile

PROFILES = ("aws-s3", "ibm-cos")
MEMORY = (1 << 30, 3 << 30, 10 << 30)
SIZES = (2 * 10**9, 2 * 10**10, 10**11, 4 * 10**11)
OBJECTIVES = (("time", False), ("cost", False), ("time", True))


def timed(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - started


def every_p(*args, **kwargs) -> selector.Choice:  # type: ignore[no-untyped-def]
    """The selector trying every P (the search threshold lifted)."""
    threshold, selector.EVERY_P = selector.EVERY_P, 10**9
    try:
        return selector.choose(*args, **kwargs)
    finally:
        selector.EVERY_P = threshold


def main() -> None:
    rows = []
    for name in PROFILES:
        for memory in MEMORY:
            profile = replace(StorageProfile.load(name), function_memory=memory)
            for size in SIZES:
                for objective, within in OBJECTIVES:
                    budget = selector.choose(size, profile, objective="cost").best.cost * 1.5 if within else None
                    searched, fast = timed(selector.choose, size, profile, objective=objective, budget=budget)
                    every, slow = timed(every_p, size, profile, objective=objective, budget=budget)
                    key = selector._key(objective)
                    pool = lambda choice: [c for c in choice.candidates if budget is None or c.cost <= budget]  # noqa: E731
                    a, b = min(pool(searched), key=key), min(pool(every), key=key)
                    rows.append((key(a)[0] / key(b)[0], searched.best.plan == every.best.plan, name, memory >> 30, size, objective + (" in budget" if within else ""), a.workers, b.workers, len(searched.candidates), len(every.candidates), fast, slow))
    print(f"{'profile':<8} {'GiB':>3} {'size GB':>8} {'objective':<15} {'same':>4} {'ratio':>7} {'P found':>7} {'P best':>7} {'candidates':>17} {'seconds':>13}")
    for ratio, same, name, gib, size, objective, pa, pb, na, nb, fast, slow in rows:
        if not same or ratio > 1:
            print(f"{name:<8} {gib:>3} {size / 1e9:>8g} {objective:<15} {'yes' if same else 'no':>4} {ratio:>7.4f} {pa:>7} {pb:>7} {na:>8} of {nb:<6} {fast:>5.2f} of {slow:<5.2f}")
    same = sum(r[1] for r in rows)
    worst = max(r[0] for r in rows)
    candidates = sum(r[8] for r in rows) / sum(r[9] for r in rows)
    seconds = sum(r[10] for r in rows), sum(r[11] for r in rows)
    print(f"same plan in {same} of {len(rows)} cases; worst best point estimate {100 * (worst - 1):.2f}% above trying every P")
    print(f"candidates predicted: {100 * candidates:.0f}% of every P's; seconds {seconds[0]:.1f} against {seconds[1]:.1f} ({seconds[1] / seconds[0]:.1f}x faster)")


if __name__ == "__main__":
    main()
