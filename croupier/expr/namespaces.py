"""The ``.str`` and ``.dt`` namespaces of expressions, as in Polars."""

from __future__ import annotations

from typing import Any

from croupier.expr.nodes import Expr, Func, wrap


class StrNamespace:
    """String functions: ``col("s").str.contains("x")``."""

    def __init__(self, expr: Expr) -> None:
        self._e = expr

    def _fn(self, name: str, *args: Any) -> Expr:
        return Func(name, (self._e,), args)

    def contains(self, pattern: str, literal: bool = True) -> Expr:
        """Substring test (a regular expression when ``literal=False``)."""
        return self._fn("contains", pattern, literal)

    def starts_with(self, prefix: str) -> Expr:
        return self._fn("starts_with", prefix)

    def ends_with(self, suffix: str) -> Expr:
        return self._fn("ends_with", suffix)

    def like(self, pattern: str, case_insensitive: bool = False) -> Expr:
        """SQL LIKE (ILIKE with ``case_insensitive``): ``%`` any run of characters, ``_`` one."""
        return self._fn("like", pattern, True) if case_insensitive else self._fn("like", pattern)

    def slice(self, offset: int, length: int | None = None) -> Expr:
        """Substring from 0-based ``offset`` of ``length`` characters (Polars' ``str.slice``)."""
        return self._fn("slice", offset, length)

    def substr(self, start: int, length: int | None = None) -> Expr:
        """SQL SUBSTRING for ``start`` >= 1: 1-based ``start``."""
        return self.slice(start - 1, length)

    def to_uppercase(self) -> Expr:
        return self._fn("to_uppercase")

    def to_lowercase(self) -> Expr:
        return self._fn("to_lowercase")

    def len_chars(self) -> Expr:
        return self._fn("len_chars")

    def len_bytes(self) -> Expr:
        return self._fn("len_bytes")

    def strip_chars(self, characters: str | None = None) -> Expr:
        return self._fn("strip_chars", characters)

    def strip_chars_start(self, characters: str | None = None) -> Expr:
        return self._fn("strip_chars_start", characters)

    def strip_chars_end(self, characters: str | None = None) -> Expr:
        return self._fn("strip_chars_end", characters)

    def replace_all(self, pattern: str, value: str, literal: bool = True) -> Expr:
        return self._fn("replace_all", pattern, value, literal)

    def reverse(self) -> Expr:
        return self._fn("reverse")

    def find(self, pattern: str) -> Expr:
        """0-based position of the first ``pattern`` (null when absent)."""
        return self._fn("find", pattern)

    def concat(self, other: Any, separator: str = "") -> Expr:
        """This string followed by ``other`` (null if either is null)."""
        return Func("concat_str", (self._e, wrap(other)), (separator, False))


class DtNamespace:
    """Date parts and calendar arithmetic: ``col("d").dt.year()``, ``.dt.offset_by("3mo")``."""

    def __init__(self, expr: Expr) -> None:
        self._e = expr

    def _fn(self, name: str, *args: Any) -> Expr:
        return Func(name, (self._e,), args)

    def year(self) -> Expr: return self._fn("year")
    def month(self) -> Expr: return self._fn("month")
    def day(self) -> Expr: return self._fn("day")
    def quarter(self) -> Expr: return self._fn("quarter")
    def weekday(self) -> Expr: return self._fn("weekday")
    def ordinal_day(self) -> Expr: return self._fn("ordinal_day")
    def week(self) -> Expr: return self._fn("week")
    def total_days(self) -> Expr: return self._fn("total_days")

    def offset_by(self, by: str) -> Expr:
        """Shift by a calendar interval in Polars' syntax, e.g. "1y", "3mo", "-90d"."""
        return self._fn("offset_by", by)

    def truncate(self, every: str) -> Expr:
        """Round down to the start of the interval ``every`` ("1y", "1mo", "1d"...)."""
        return self._fn("truncate", every)

    def strftime(self, fmt: str) -> Expr:
        return self._fn("strftime", fmt)
