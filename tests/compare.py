"""Comparing query answers: names, dtypes, nulls and values, floats to a relative tolerance."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

REL_TOL = 1e-9


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-9)
    return bool(a == b)


def _sort_key(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` in a canonical row order (floats rounded for ordering, so tiny differences tie)."""
    keys = [pl.col(c).round(6) if frame.schema[c].is_float() else pl.col(c) for c in frame.columns]
    if not frame.columns:
        return frame
    return frame.with_row_index("__row").sort([k.alias(f"__k{i}") for i, k in enumerate(keys)], nulls_last=True).drop("__row")


def differences(got: pl.DataFrame, expected: pl.DataFrame, ordered: bool, dtypes: bool = True, limit: int = 5) -> list[str]:
    """What differs between ``got`` and ``expected`` (empty when they are the same answer)."""
    problems = []
    if got.columns != expected.columns:
        return [f"columns {got.columns} != {expected.columns}"]
    if dtypes and got.schema != expected.schema:
        problems.append(f"dtypes {dict(got.schema)} != {dict(expected.schema)}")
    if got.height != expected.height:
        return problems + [f"{got.height} rows != {expected.height}"]
    if not ordered:
        got, expected = _sort_key(got), _sort_key(expected)
    for name in got.columns:
        for row, (a, b) in enumerate(zip(got[name].to_list(), expected[name].to_list())):
            if not _close(a, b):
                problems.append(f"{name} row {row}: {a!r} != {b!r}")
                break
        if len(problems) >= limit:
            break
    return problems


def assert_same(got: pl.DataFrame, expected: pl.DataFrame, ordered: bool = False, dtypes: bool = True) -> None:
    problems = differences(got, expected, ordered, dtypes)
    assert not problems, "\n".join(problems) + f"\ngot:\n{got}\nexpected:\n{expected}"
