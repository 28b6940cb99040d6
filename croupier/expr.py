"""Column expressions of the lazy frame API, in the style of Polars.

An expression is a small immutable tree (columns, literals, operators, functions, aggregations).
The planner inspects it (which columns it reads, whether a Parquet row group can match it) and
tasks run it by translating it to a Polars expression (:meth:`Expr.to_polars`), so the kernels are
Polars' own. Trees pickle, so they travel to workers inside tasks.

    from croupier.frame import col, lit, when
    (col("price") * (1 - col("discount"))).sum().alias("revenue")
"""

from __future__ import annotations

import datetime as dt
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import polars as pl

from croupier.errors import ConfigError

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "&": operator.and_,
    "|": operator.or_,
}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
AGGREGATIONS = ("sum", "count", "mean", "min", "max", "n_unique", "len")

_DTYPES: dict[str, Any] = {
    "int8": pl.Int8, "int16": pl.Int16, "int32": pl.Int32, "int64": pl.Int64,
    "uint8": pl.UInt8, "uint16": pl.UInt16, "uint32": pl.UInt32, "uint64": pl.UInt64,
    "float32": pl.Float32, "float64": pl.Float64, "bool": pl.Boolean, "str": pl.String,
    "string": pl.String, "utf8": pl.String, "date": pl.Date, "datetime": pl.Datetime,
}  # fmt: skip


def dtype_name(dtype: Any) -> str:
    """Normalise a dtype given as a Polars dtype, a Python type or a name to a name."""
    if isinstance(dtype, str):
        name = dtype.lower()
    elif dtype in (int, float, str, bool):
        name = {int: "int64", float: "float64", str: "str", bool: "bool"}[dtype]
    else:
        name = str(dtype).lower().split("(")[0]
        name = {"string": "str", "boolean": "bool"}.get(name, name)
    if name not in _DTYPES:
        raise ConfigError(f"cannot cast to {dtype!r}; use one of {sorted(_DTYPES)}")
    return name


class Expr:
    """Base of every expression node; operators build bigger trees."""

    # --- building -------------------------------------------------------------------------
    def _bin(self, op: str, other: Any, swap: bool = False) -> Expr:
        other = wrap(other)
        return Binary(op, other, self) if swap else Binary(op, self, other)

    def __add__(self, o: Any) -> Expr: return self._bin("+", o)
    def __radd__(self, o: Any) -> Expr: return self._bin("+", o, True)
    def __sub__(self, o: Any) -> Expr: return self._bin("-", o)
    def __rsub__(self, o: Any) -> Expr: return self._bin("-", o, True)
    def __mul__(self, o: Any) -> Expr: return self._bin("*", o)
    def __rmul__(self, o: Any) -> Expr: return self._bin("*", o, True)
    def __truediv__(self, o: Any) -> Expr: return self._bin("/", o)
    def __rtruediv__(self, o: Any) -> Expr: return self._bin("/", o, True)
    def __floordiv__(self, o: Any) -> Expr: return self._bin("//", o)
    def __mod__(self, o: Any) -> Expr: return self._bin("%", o)
    def __eq__(self, o: Any) -> Expr: return self._bin("==", o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Expr: return self._bin("!=", o)  # type: ignore[override]
    def __lt__(self, o: Any) -> Expr: return self._bin("<", o)
    def __le__(self, o: Any) -> Expr: return self._bin("<=", o)
    def __gt__(self, o: Any) -> Expr: return self._bin(">", o)
    def __ge__(self, o: Any) -> Expr: return self._bin(">=", o)
    def __and__(self, o: Any) -> Expr: return self._bin("&", o)
    def __rand__(self, o: Any) -> Expr: return self._bin("&", o, True)
    def __or__(self, o: Any) -> Expr: return self._bin("|", o)
    def __ror__(self, o: Any) -> Expr: return self._bin("|", o, True)
    def __invert__(self) -> Expr: return Unary("not", self)
    def __neg__(self) -> Expr: return Unary("neg", self)
    __hash__ = object.__hash__  # fmt: skip

    def __bool__(self) -> bool:
        raise TypeError("an expression has no truth value; combine conditions with & and |, not 'and'/'or'")

    def alias(self, name: str) -> Expr:
        """Name the result column."""
        return Alias(self, name)

    def cast(self, dtype: Any) -> Expr:
        """Convert to ``dtype`` (a Polars dtype, int/float/str/bool, or a name such as "float64")."""
        return Call("cast", self, (dtype_name(dtype),))

    def is_in(self, values: Iterable[Any]) -> Expr:
        """True where the value is one of ``values``."""
        return IsIn(self, tuple(values))

    def is_null(self) -> Expr:
        return Unary("is_null", self)

    def is_not_null(self) -> Expr:
        return Unary("is_not_null", self)

    def is_between(self, low: Any, high: Any) -> Expr:
        """low <= value <= high (both ends included, like SQL BETWEEN)."""
        return (self >= low) & (self <= high)

    def abs(self) -> Expr:
        return Call("abs", self, ())

    def round(self, decimals: int = 0) -> Expr:
        return Call("round", self, (decimals,))

    # --- aggregations -----------------------------------------------------------------------
    def sum(self) -> Expr: return Agg("sum", self)
    def count(self) -> Expr: return Agg("count", self)
    def mean(self) -> Expr: return Agg("mean", self)
    def min(self) -> Expr: return Agg("min", self)
    def max(self) -> Expr: return Agg("max", self)
    def n_unique(self) -> Expr: return Agg("n_unique", self)

    # --- namespaces -------------------------------------------------------------------------
    @property
    def str(self) -> StrNamespace:
        return StrNamespace(self)

    @property
    def dt(self) -> DtNamespace:
        return DtNamespace(self)

    # --- inspection, implemented by the nodes -------------------------------------------------
    def children(self) -> tuple[Expr, ...]:
        return ()

    def columns(self) -> set[str]:
        """Names of the input columns this expression reads."""
        out: set[str] = set()
        for child in self.children():
            out |= child.columns()
        return out

    def output_name(self) -> str:
        """Name of the column this expression produces (Polars' rule: the leftmost column)."""
        for child in self.children():
            return child.output_name()
        raise ConfigError(f"expression {self} has no column name; give it one with .alias(...)")

    def has_agg(self) -> bool:
        return any(c.has_agg() for c in self.children())

    def to_polars(self) -> pl.Expr:  # pragma: no cover - every node overrides it
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.show()

    def show(self) -> str:  # pragma: no cover - every node overrides it
        raise NotImplementedError


def wrap(value: Any) -> Expr:
    """An expression as is; anything else as a literal."""
    return value if isinstance(value, Expr) else Lit(value)


def col(name: str) -> Expr:
    """The column ``name``."""
    return Col(name)


def lit(value: Any) -> Expr:
    """A constant (number, string, bool, date, datetime, timedelta or None)."""
    return Lit(value)


def count() -> Expr:
    """Number of rows (SQL count(*)); an aggregation."""
    return Agg("len", None)


len_ = count


@dataclass(frozen=True, eq=False, repr=False)
class Col(Expr):
    name: str

    def columns(self) -> set[str]:
        return {self.name}

    def output_name(self) -> str:
        return self.name

    def to_polars(self) -> pl.Expr:
        return pl.col(self.name)

    def show(self) -> str:
        return f"col({self.name!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Lit(Expr):
    value: Any

    def output_name(self) -> str:
        return "literal"

    def to_polars(self) -> pl.Expr:
        return pl.lit(self.value)

    def show(self) -> str:
        return repr(self.value) if not isinstance(self.value, (dt.date, dt.timedelta)) else str(self.value)


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    op: str
    left: Expr
    right: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def output_name(self) -> str:
        return self.right.output_name() if isinstance(self.left, Lit) else self.left.output_name()

    def to_polars(self) -> pl.Expr:
        left, right = self.left.to_polars(), self.right.to_polars()
        return _BINARY[self.op](left, right)  # type: ignore[no-any-return]

    def show(self) -> str:
        return f"({self.left.show()} {self.op} {self.right.show()})"


@dataclass(frozen=True, eq=False, repr=False)
class Unary(Expr):
    op: str
    operand: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def to_polars(self) -> pl.Expr:
        e = self.operand.to_polars()
        return {"not": lambda: ~e, "neg": lambda: -e, "is_null": e.is_null, "is_not_null": e.is_not_null}[self.op]()

    def show(self) -> str:
        return {"not": "~", "neg": "-"}.get(self.op, "") + self.operand.show() + ("" if self.op in ("not", "neg") else f".{self.op}()")


@dataclass(frozen=True, eq=False, repr=False)
class IsIn(Expr):
    operand: Expr
    values: tuple[Any, ...]

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def to_polars(self) -> pl.Expr:
        return self.operand.to_polars().is_in(list(self.values))

    def show(self) -> str:
        return f"{self.operand.show()}.is_in({list(self.values)!r})"


def _like_regex(pattern: str) -> str:
    """SQL LIKE pattern (% any run, _ one character) as an anchored regular expression."""
    out = []
    for ch in pattern:
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
    return "(?s)^" + "".join(out) + "$"


_CALLS: dict[str, Callable[..., pl.Expr]] = {
    "cast": lambda e, name: e.cast(_DTYPES[name]),
    "abs": lambda e: e.abs(),
    "round": lambda e, d: e.round(d),
    "contains": lambda e, s, literal: e.str.contains(s, literal=literal),
    "starts_with": lambda e, s: e.str.starts_with(s),
    "ends_with": lambda e, s: e.str.ends_with(s),
    "like": lambda e, pattern: e.str.contains(_like_regex(pattern)),
    "slice": lambda e, offset, length: e.str.slice(offset, length),
    "to_uppercase": lambda e: e.str.to_uppercase(),
    "to_lowercase": lambda e: e.str.to_lowercase(),
    "len_chars": lambda e: e.str.len_chars(),
    "year": lambda e: e.dt.year(),
    "month": lambda e: e.dt.month(),
    "day": lambda e: e.dt.day(),
    "quarter": lambda e: e.dt.quarter(),
    "weekday": lambda e: e.dt.weekday(),
    "offset_by": lambda e, by: e.dt.offset_by(by),
}


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A named function of one expression with constant arguments (see ``_CALLS``)."""

    fn: str
    operand: Expr
    args: tuple[Any, ...]

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def to_polars(self) -> pl.Expr:
        return _CALLS[self.fn](self.operand.to_polars(), *self.args)

    def show(self) -> str:
        args = ", ".join(repr(a) for a in self.args)
        return f"{self.operand.show()}.{self.fn}({args})"


@dataclass(frozen=True, eq=False, repr=False)
class When(Expr):
    """when(c1).then(v1).when(c2).then(v2).otherwise(v)."""

    cases: tuple[tuple[Expr, Expr], ...]
    default: Expr

    def children(self) -> tuple[Expr, ...]:
        return tuple(e for case in self.cases for e in case) + (self.default,)

    def output_name(self) -> str:
        return self.cases[0][1].output_name() if not isinstance(self.cases[0][1], Lit) else "literal"

    def to_polars(self) -> pl.Expr:
        (cond, value), *rest = self.cases
        chain: Any = pl.when(cond.to_polars()).then(value.to_polars())
        for cond, value in rest:
            chain = chain.when(cond.to_polars()).then(value.to_polars())
        return chain.otherwise(self.default.to_polars())  # type: ignore[no-any-return]

    def show(self) -> str:
        cases = "".join(f".when({c.show()}).then({v.show()})" for c, v in self.cases)
        return cases[1:] + f".otherwise({self.default.show()})"


class _WhenBuilder:
    def __init__(self, cases: tuple[tuple[Expr, Expr], ...], cond: Expr) -> None:
        self._cases, self._cond = cases, cond

    def then(self, value: Any) -> _Then:
        return _Then(self._cases + ((self._cond, wrap(value)),))


class _Then(When):
    def __init__(self, cases: tuple[tuple[Expr, Expr], ...]) -> None:
        super().__init__(cases, Lit(None))

    def when(self, cond: Any) -> _WhenBuilder:
        return _WhenBuilder(self.cases, wrap(cond))

    def otherwise(self, value: Any) -> Expr:
        return When(self.cases, wrap(value))


def when(cond: Any) -> _WhenBuilder:
    """Start a conditional: ``when(c).then(v).otherwise(w)`` (null where nothing matches)."""
    return _WhenBuilder((), wrap(cond))


@dataclass(frozen=True, eq=False, repr=False)
class Alias(Expr):
    operand: Expr
    name: str

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def output_name(self) -> str:
        return self.name

    def to_polars(self) -> pl.Expr:
        return self.operand.to_polars().alias(self.name)

    def show(self) -> str:
        return f"{self.operand.show()}.alias({self.name!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Agg(Expr):
    """An aggregation over a group: sum, count (non-null), mean, min, max, n_unique, len (rows)."""

    fn: str
    operand: Expr | None

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,) if self.operand is not None else ()

    def output_name(self) -> str:
        return self.operand.output_name() if self.operand is not None else "len"

    def has_agg(self) -> bool:
        return True

    def to_polars(self) -> pl.Expr:
        if self.operand is None:
            return pl.len()
        return getattr(self.operand.to_polars(), self.fn)()  # type: ignore[no-any-return]

    def show(self) -> str:
        return f"{self.operand.show()}.{self.fn}()" if self.operand is not None else "count()"


class StrNamespace:
    """String functions: ``col("s").str.contains("x")``."""

    def __init__(self, expr: Expr) -> None:
        self._e = expr

    def contains(self, pattern: str, literal: bool = True) -> Expr:
        """Substring test (a regular expression when ``literal=False``)."""
        return Call("contains", self._e, (pattern, literal))

    def starts_with(self, prefix: str) -> Expr:
        return Call("starts_with", self._e, (prefix,))

    def ends_with(self, suffix: str) -> Expr:
        return Call("ends_with", self._e, (suffix,))

    def like(self, pattern: str) -> Expr:
        """SQL LIKE: ``%`` matches any run of characters, ``_`` one character."""
        return Call("like", self._e, (pattern,))

    def slice(self, offset: int, length: int | None = None) -> Expr:
        """Substring from 0-based ``offset`` of ``length`` characters (Polars' ``str.slice``)."""
        return Call("slice", self._e, (offset, length))

    def substr(self, start: int, length: int | None = None) -> Expr:
        """SQL SUBSTRING: 1-based ``start``."""
        return self.slice(start - 1, length)

    def to_uppercase(self) -> Expr:
        return Call("to_uppercase", self._e, ())

    def to_lowercase(self) -> Expr:
        return Call("to_lowercase", self._e, ())

    def len_chars(self) -> Expr:
        return Call("len_chars", self._e, ())


class DtNamespace:
    """Date parts and calendar arithmetic: ``col("d").dt.year()``, ``.dt.offset_by("3mo")``."""

    def __init__(self, expr: Expr) -> None:
        self._e = expr

    def year(self) -> Expr: return Call("year", self._e, ())
    def month(self) -> Expr: return Call("month", self._e, ())
    def day(self) -> Expr: return Call("day", self._e, ())
    def quarter(self) -> Expr: return Call("quarter", self._e, ())
    def weekday(self) -> Expr: return Call("weekday", self._e, ())

    def offset_by(self, by: str) -> Expr:
        """Shift by a calendar interval in Polars' syntax, e.g. "1y", "3mo", "-90d"."""
        return Call("offset_by", self._e, (by,))


# --- analysis used by the planner ------------------------------------------------------------


def conjuncts(expr: Expr) -> list[Expr]:
    """Split ``a & b & c`` into [a, b, c]."""
    if isinstance(expr, Binary) and expr.op == "&":
        return conjuncts(expr.left) + conjuncts(expr.right)
    return [expr]


def conjoin(parts: list[Expr]) -> Expr | None:
    """The AND of ``parts`` (None when empty)."""
    out: Expr | None = None
    for part in parts:
        out = part if out is None else Binary("&", out, part)
    return out


def fold(expr: Expr) -> Any:
    """Python value of a constant expression (literals and operators on them), else raise LookupError."""
    if isinstance(expr, Lit):
        return expr.value
    if isinstance(expr, Binary) and expr.op in ("+", "-", "*", "/"):
        return _BINARY[expr.op](fold(expr.left), fold(expr.right))
    raise LookupError(expr)


Stats = dict[str, tuple[Any, Any]]


def may_match(expr: Expr, stats: Stats) -> bool:
    """False only when no row whose columns lie in ``stats`` [min, max] ranges can satisfy ``expr``.

    Used to prune Parquet row groups: conjunctions and disjunctions of comparisons between a
    column and a constant, ``is_in`` and ``is_between``; anything else may match.
    """
    try:
        return _may_match(expr, stats)
    except (TypeError, LookupError, ValueError, ArithmeticError):
        return True


def _may_match(expr: Expr, stats: Stats) -> bool:
    if isinstance(expr, Binary):
        if expr.op == "&":
            return _may_match(expr.left, stats) and _may_match(expr.right, stats)
        if expr.op == "|":
            return _may_match(expr.left, stats) or _may_match(expr.right, stats)
        if expr.op in _FLIP:
            op, column, value = expr.op, expr.left, expr.right
            if not isinstance(column, Col):
                op, column, value = _FLIP[op], expr.right, expr.left
            if not isinstance(column, Col) or column.name not in stats:
                return True
            low, high = stats[column.name]
            v = fold(value)
            if low is None or high is None or v is None:
                return True
            return {
                "==": lambda: low <= v <= high,
                "!=": lambda: not (low == high == v),
                "<": lambda: low < v,
                "<=": lambda: low <= v,
                ">": lambda: high > v,
                ">=": lambda: high >= v,
            }[op]()
    if isinstance(expr, IsIn) and isinstance(expr.operand, Col) and expr.operand.name in stats:
        low, high = stats[expr.operand.name]
        if low is None or high is None:
            return True
        return any(v is not None and low <= v <= high for v in expr.values)
    return True
