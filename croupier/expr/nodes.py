"""Expression nodes: small immutable trees that translate one to one into Polars expressions.

Every node says which columns it reads, which children it has, and how to rebuild itself with
new children (:meth:`Expr.with_children`), so the planner can rewrite trees (for example
replace each aggregation by a column computed elsewhere). The meaning of every node is the
Polars expression :meth:`Expr.to_polars` returns.

Three properties drive planning:

* :meth:`Expr.has_agg`: contains an aggregation that reduces the frame (or a group) to one
  value. An aggregation under ``over(...)`` does not count: it yields a value per row.
* :meth:`Expr.has_window`: contains ``over(...)`` or a window function (rank, cum_sum, shift,
  int_range): needs a whole partition (or the whole frame) at once.
* :meth:`Expr.is_scalar`: yields one value for the whole frame (a literal, an aggregation, a
  scalar subquery, or an operator over such): in ``select`` a list of only scalars gives one row.
"""

from __future__ import annotations

import datetime as dt
import operator
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import polars as pl

from croupier.errors import ConfigError
from croupier.expr.functions import ABSORBS_AGGREGATIONS, AGG_BUILDERS, FUNCTIONS, WINDOW, polars_agg

BINARY: dict[str, Callable[[Any, Any], Any]] = {
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
    "xor": operator.xor,
}
FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}

#: Aggregations, by name; each is Polars' method of the same name (len: rows of the group).
AGGREGATIONS = ("sum", "count", "mean", "min", "max", "n_unique", "len", "std", "var", "null_count", "median", "first", "last", *AGG_BUILDERS)
RANK_METHODS = ("average", "min", "max", "dense", "ordinal")

_DTYPES: dict[str, Any] = {
    "int8": pl.Int8, "int16": pl.Int16, "int32": pl.Int32, "int64": pl.Int64, "int128": pl.Int128,
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
        raise ConfigError(f"cannot cast to {dtype!r}; use a Polars dtype or one of {sorted(_DTYPES)}")
    return name


def as_dtype(dtype: Any) -> pl.DataType:
    """A Polars dtype from a Polars dtype (class or instance), a Python type or a name."""
    if isinstance(dtype, pl.DataType):
        return dtype
    if isinstance(dtype, type) and issubclass(dtype, pl.DataType):
        return dtype()
    return _DTYPES[dtype_name(dtype)]()  # type: ignore[no-any-return]


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
    def __rfloordiv__(self, o: Any) -> Expr: return self._bin("//", o, True)
    def __mod__(self, o: Any) -> Expr: return self._bin("%", o)
    def __rmod__(self, o: Any) -> Expr: return self._bin("%", o, True)
    def __pow__(self, o: Any) -> Expr: return Func("pow", (self,), (o,))
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
    def __xor__(self, o: Any) -> Expr: return self._bin("xor", o)
    def __invert__(self) -> Expr: return Unary("not", self)
    def __neg__(self) -> Expr: return Unary("neg", self)
    __hash__ = object.__hash__  # fmt: skip

    def __bool__(self) -> bool:
        raise TypeError("an expression has no truth value; combine conditions with & and |, not 'and'/'or'")

    def alias(self, name: str) -> Expr:
        """Name the result column."""
        return Alias(self, name)

    def cast(self, dtype: Any, strict: bool = True) -> Expr:
        """Convert to ``dtype`` (a Polars dtype, int/float/str/bool, or a name such as "float64")."""
        return Cast(self, as_dtype(dtype), strict)

    def is_in(self, values: Any, nulls_equal: bool = False) -> Expr:
        """True where the value is one of ``values``: a list, or a one-column frame (a subquery).

        As in Polars, a null value gives null, unless ``nulls_equal``.
        """
        if hasattr(values, "_node"):  # a LazyFrame: evaluated as a semi/left join by the planner
            return IsInFrame(self, values._node, nulls_equal)
        return IsIn(self, tuple(values), nulls_equal)

    def is_null(self) -> Expr:
        return Unary("is_null", self)

    def is_not_null(self) -> Expr:
        return Unary("is_not_null", self)

    def is_between(self, low: Any, high: Any, closed: str = "both") -> Expr:
        """low <= value <= high (``closed``: "both" like SQL BETWEEN, "left", "right", "none")."""
        lower = self >= low if closed in ("both", "left") else self > low
        upper = self <= high if closed in ("both", "right") else self < high
        return lower & upper

    def _fn(self, name: str, *args: Any) -> Expr:
        return Func(name, (self,), args)

    def abs(self) -> Expr: return self._fn("abs")
    def floor(self) -> Expr: return self._fn("floor")
    def ceil(self) -> Expr: return self._fn("ceil")
    def sqrt(self) -> Expr: return self._fn("sqrt")
    def exp(self) -> Expr: return self._fn("exp")
    def sign(self) -> Expr: return self._fn("sign")
    def is_nan(self) -> Expr: return self._fn("is_nan")

    def round(self, decimals: int = 0, mode: str = "half_to_even") -> Expr:
        """Round to ``decimals`` places (Polars' default mode; "half_away_from_zero" is SQL's)."""
        return self._fn("round", decimals, mode) if mode != "half_to_even" else self._fn("round", decimals)

    def log(self, base: float = 2.718281828459045) -> Expr:
        return self._fn("log", base)

    def pow(self, exponent: Any) -> Expr:
        return self._fn("pow", exponent)

    def fill_null(self, value: Any) -> Expr:
        """Replace nulls by ``value`` (a constant or an expression)."""
        return Func("coalesce", (self, wrap(value)), ())

    def clip(self, lower_bound: Any = None, upper_bound: Any = None) -> Expr:
        """Values below ``lower_bound`` raised to it, above ``upper_bound`` lowered to it (None: no bound)."""
        return self._fn("clip", lower_bound, upper_bound)

    def fill_nan(self, value: Any) -> Expr:
        return self._fn("fill_nan", value)

    # --- aggregations -----------------------------------------------------------------------
    def sum(self) -> Expr: return Agg("sum", self)
    def count(self) -> Expr: return Agg("count", self)
    def mean(self) -> Expr: return Agg("mean", self)
    def min(self) -> Expr: return Agg("min", self)
    def max(self) -> Expr: return Agg("max", self)
    def n_unique(self) -> Expr: return Agg("n_unique", self)
    def null_count(self) -> Expr: return Agg("null_count", self)
    def median(self) -> Expr: return Agg("median", self)
    def quantile(self, quantile: float, interpolation: str = "nearest") -> Expr:
        """The ``quantile`` (0-1) of the values, as Polars' (its interpolations)."""
        if not 0 <= quantile <= 1 or interpolation not in ("nearest", "higher", "lower", "midpoint", "linear", "equiprobable"):
            raise ConfigError(f"quantile needs 0 <= quantile <= 1 and a Polars interpolation, got {quantile!r}, {interpolation!r}")
        return Agg("quantile", self, (float(quantile), interpolation))
    def len(self) -> Expr: return Agg("len", self)
    def first(self) -> Expr: return Agg("first", self)
    def last(self) -> Expr: return Agg("last", self)
    def std(self, ddof: int = 1) -> Expr: return Agg("std", self, (ddof,))
    def var(self, ddof: int = 1) -> Expr: return Agg("var", self, (ddof,))

    # --- windows ------------------------------------------------------------------------------
    def over(self, partition_by: Any = None, *more: Any, order_by: Any = None, descending: bool = False, nulls_last: bool = False) -> Expr:
        """Evaluate per partition (rows with equal ``partition_by`` values), in ``order_by`` order
        within each, and map the results back to the rows: Polars' ``over``."""
        keys = _expr_list(partition_by, *more)
        order = _expr_list(order_by)
        if not keys and not order:
            raise ConfigError("over() needs partition_by keys or order_by")
        return Over(self, keys, order, descending, nulls_last)

    def rank(self, method: str = "average", descending: bool = False) -> Expr:
        """Rank of each value (nulls get null), as Polars' ``rank``."""
        if method not in RANK_METHODS:
            raise ConfigError(f"rank method must be one of {RANK_METHODS}, got {method!r}")
        return self._fn("rank", method, descending)

    def cum_sum(self, reverse: bool = False) -> Expr: return self._fn("cum_sum", reverse)
    def cum_count(self, reverse: bool = False) -> Expr: return self._fn("cum_count", reverse)
    def cum_min(self, reverse: bool = False) -> Expr: return self._fn("cum_min", reverse)
    def cum_max(self, reverse: bool = False) -> Expr: return self._fn("cum_max", reverse)

    def forward_fill(self) -> Expr:
        """Nulls replaced by the last non-null value before them."""
        return self._fn("forward_fill")

    def shift(self, n: int = 1, fill_value: Any = None) -> Expr:
        """The value ``n`` rows earlier (later when negative): SQL's lag/lead."""
        return self._fn("shift", n, fill_value)

    # --- namespaces -------------------------------------------------------------------------
    @property
    def str(self) -> Any:
        from croupier.expr.namespaces import StrNamespace

        return StrNamespace(self)

    @property
    def dt(self) -> Any:
        from croupier.expr.namespaces import DtNamespace

        return DtNamespace(self)

    # --- inspection, implemented by the nodes -------------------------------------------------
    def children(self) -> tuple[Expr, ...]:
        return ()

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        """This node with ``children`` in place of its children (same order as :meth:`children`)."""
        return self

    def columns(self) -> set[str]:
        """Names of the input columns this expression reads."""
        out: set[str] = set()
        for child in self.children():
            out |= child.columns()
        return out

    def output_name(self) -> str:
        """Name of the column this expression produces: Polars' rule (the leftmost input column,
        "literal" when a literal comes first, or the alias)."""
        try:
            return self.to_polars().meta.output_name()
        except pl.exceptions.PolarsError:
            raise ConfigError(f"expression {self.show()} has no column name; give it one with .alias(...)") from None

    def has_agg(self) -> bool:
        return any(c.has_agg() for c in self.children())

    def has_window(self) -> bool:
        return any(c.has_window() for c in self.children())

    def has_subquery(self) -> bool:
        return any(c.has_subquery() for c in self.children())

    def is_scalar(self) -> bool:
        return all(c.is_scalar() for c in self.children())

    def to_polars(self) -> pl.Expr:  # pragma: no cover - every node overrides it
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.show()

    def show(self) -> str:  # pragma: no cover - every node overrides it
        raise NotImplementedError


def wrap(value: Any) -> Expr:
    """An expression as is; anything else as a literal."""
    return value if isinstance(value, Expr) else Lit(value)


def _expr_list(*items: Any) -> tuple[Expr, ...]:
    out: list[Expr] = []
    for item in items:
        if item is None:
            continue
        if isinstance(item, (list, tuple)):
            out += _expr_list(*item)
        else:
            out.append(Col(item) if isinstance(item, str) else wrap(item))
    return tuple(out)


@dataclass(frozen=True, eq=False, repr=False)
class Col(Expr):
    name: str

    def columns(self) -> set[str]:
        return {self.name}

    def output_name(self) -> str:
        return self.name

    def is_scalar(self) -> bool:
        return False

    def to_polars(self) -> pl.Expr:
        return pl.col(self.name)

    def show(self) -> str:
        return f"col({self.name!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Columns(Expr):
    """Several columns at once (``all()``, ``exclude(...)``, ``col("a", "b")``, ``col("*")``):
    an expression over it stands for one expression per column, named by the column, as in
    Polars. ``select``, ``with_columns`` and ``group_by().agg`` expand it against their input's
    columns (:func:`expand`, an aggregation leaving the group keys out); nothing evaluates it."""

    names: tuple[str, ...] | None  # None: every column
    excluded: tuple[str, ...] = ()

    def exclude(self, *names: Any) -> Columns:
        """These columns without ``names``."""
        return Columns(self.names, self.excluded + tuple(n for item in names for n in ([item] if isinstance(item, str) else item)))

    def columns(self) -> set[str]:
        return set(self.names or ())

    def output_name(self) -> str:
        raise self._unexpanded()

    def is_scalar(self) -> bool:
        return False

    def to_polars(self) -> pl.Expr:
        raise self._unexpanded()

    def _unexpanded(self) -> ConfigError:
        return ConfigError(f"{self.show()} stands for several columns: use it in select, with_columns or agg, which expand it")

    def show(self) -> str:
        shown = "all()" if self.names is None else "col(" + ", ".join(repr(n) for n in self.names) + ")"
        return shown + (f".exclude({', '.join(repr(n) for n in self.excluded)})" if self.excluded else "")


def expand(exprs: tuple[Expr, ...], schema: Iterable[str], skip: Iterable[str] = ()) -> tuple[Expr, ...]:
    """``exprs`` with each expression over :class:`Columns` repeated once per column it stands for
    (in the frame's column order; ``skip``: columns ``all()``/``exclude()`` never stand for, a
    group_by's keys, as in Polars), the column in its place; as the operands of a function of
    many (``sum_horizontal(all())``, ``concat_str``, ``coalesce``) it stands for them all."""
    from croupier.expr.analysis import transform, walk

    names, left_out = list(schema), set(skip)

    def chosen(leaf: Columns) -> list[str]:
        missing = [n for n in leaf.names or () if n not in names]
        if missing:
            raise ConfigError(f"{leaf.show()}: no column {missing[0]!r}; the columns are {names}")
        if leaf.names is not None:
            return [n for n in leaf.names if n not in leaf.excluded]
        return [n for n in names if n not in leaf.excluded and n not in left_out]

    def spread(e: Expr) -> Expr:
        if isinstance(e, Func) and FUNCTIONS[e.fn].variadic and any(isinstance(o, Columns) for o in e.operands):
            return Func(e.fn, tuple(c for o in e.operands for c in ([Col(n) for n in chosen(o)] if isinstance(o, Columns) else [o])), e.args)
        return e

    out: list[Expr] = []
    for e in exprs:
        e = transform(e, spread)
        leaves = [n for n in walk(e) if isinstance(n, Columns)]
        if not leaves:
            out.append(e)
            continue
        if len(leaves) > 1:
            raise ConfigError(f"{e.show()}: one all()/exclude()/col(several) per expression")
        leaf = leaves[0]
        out += [transform(e, lambda x, c=c: Col(c) if x is leaf else x) for c in chosen(leaf)]  # type: ignore[misc]
    return tuple(out)


def all_() -> Columns:
    """Every column (Polars ``pl.all()``); ``.exclude(...)`` leaves some out."""
    return Columns(None)


def exclude(*names: Any) -> Columns:
    """Every column but ``names`` (Polars ``pl.exclude``)."""
    return Columns(None).exclude(*names)


@dataclass(frozen=True, eq=False, repr=False)
class Lit(Expr):
    """A constant; ``dtype`` fixes its type (as ``pl.lit(value, dtype)``)."""

    value: Any
    dtype: pl.DataType | None = None

    def output_name(self) -> str:
        return "literal"

    def to_polars(self) -> pl.Expr:
        return pl.lit(self.value, dtype=self.dtype)

    def show(self) -> str:
        text = repr(self.value) if not isinstance(self.value, (dt.date, dt.timedelta)) else str(self.value)
        return text if self.dtype is None else f"lit({text}, {self.dtype})"


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    op: str
    left: Expr
    right: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        return Binary(self.op, children[0], children[1])

    def to_polars(self) -> pl.Expr:
        left, right = self.left.to_polars(), self.right.to_polars()
        return BINARY[self.op](left, right)  # type: ignore[no-any-return]

    def show(self) -> str:
        return f"({self.left.show()} {self.op} {self.right.show()})"


_UNARY: dict[str, Callable[[pl.Expr], pl.Expr]] = {
    "not": lambda e: ~e,
    "neg": lambda e: -e,
    "is_null": lambda e: e.is_null(),
    "is_not_null": lambda e: e.is_not_null(),
}


@dataclass(frozen=True, eq=False, repr=False)
class Unary(Expr):
    op: str
    operand: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        return Unary(self.op, children[0])

    def to_polars(self) -> pl.Expr:
        return _UNARY[self.op](self.operand.to_polars())

    def show(self) -> str:
        if self.op in ("not", "neg"):
            return {"not": "~", "neg": "-"}[self.op] + self.operand.show()
        return f"{self.operand.show()}.{self.op}()"


@dataclass(frozen=True, eq=False, repr=False)
class IsIn(Expr):
    """``operand.is_in(values)`` with a constant list."""

    operand: Expr
    values: tuple[Any, ...]
    nulls_equal: bool = False

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        return IsIn(children[0], self.values, self.nulls_equal)

    def to_polars(self) -> pl.Expr:
        return self.operand.to_polars().is_in(list(self.values), nulls_equal=self.nulls_equal)

    def show(self) -> str:
        return f"{self.operand.show()}.is_in({list(self.values)!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    operand: Expr
    dtype: pl.DataType
    strict: bool = True

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        return Cast(children[0], self.dtype, self.strict)

    def to_polars(self) -> pl.Expr:
        return self.operand.to_polars().cast(self.dtype, strict=self.strict)

    def show(self) -> str:
        return f"{self.operand.show()}.cast({self.dtype})"


@dataclass(frozen=True, eq=False, repr=False)
class Func(Expr):
    """A named function (see :mod:`croupier.expr.functions`) of ``operands`` and constant ``args``."""

    fn: str
    operands: tuple[Expr, ...]
    args: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.fn not in FUNCTIONS:
            raise ConfigError(f"unknown function {self.fn!r}; known: {sorted(FUNCTIONS)}")

    def children(self) -> tuple[Expr, ...]:
        return self.operands

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        return Func(self.fn, tuple(children), self.args)

    def is_window_function(self) -> bool:
        return FUNCTIONS[self.fn].kind == WINDOW

    def has_agg(self) -> bool:
        return self.fn not in ABSORBS_AGGREGATIONS and super().has_agg()

    def has_window(self) -> bool:
        return self.is_window_function() or super().has_window()

    def is_scalar(self) -> bool:
        return not self.is_window_function() and super().is_scalar()

    def to_polars(self) -> pl.Expr:
        spec = FUNCTIONS[self.fn]
        operands = [o.to_polars() for o in self.operands]
        return spec.build(operands, *self.args) if spec.variadic else spec.build(*operands, *self.args)

    def show(self) -> str:
        args = ", ".join(repr(a) for a in self.args)
        if FUNCTIONS[self.fn].method and self.operands:
            rest = ", ".join([o.show() for o in self.operands[1:]] + ([args] if args else []))
            return f"{self.operands[0].show()}.{self.fn}({rest})"
        inner = ", ".join([o.show() for o in self.operands] + ([args] if args else []))
        return f"{self.fn}({inner})"


@dataclass(frozen=True, eq=False, repr=False)
class When(Expr):
    """when(c1).then(v1).when(c2).then(v2).otherwise(v)."""

    cases: tuple[tuple[Expr, Expr], ...]
    default: Expr

    def children(self) -> tuple[Expr, ...]:
        return tuple(e for case in self.cases for e in case) + (self.default,)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        n = len(self.cases)
        return When(tuple((children[2 * i], children[2 * i + 1]) for i in range(n)), children[2 * n])

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

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        return When(self.cases, self.default).with_children(children)


def when(cond: Any) -> _WhenBuilder:
    """Start a conditional: ``when(c).then(v).otherwise(w)`` (null where nothing matches)."""
    return _WhenBuilder((), wrap(cond))


@dataclass(frozen=True, eq=False, repr=False)
class Alias(Expr):
    operand: Expr
    name: str

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        return Alias(children[0], self.name)

    def output_name(self) -> str:
        return self.name

    def to_polars(self) -> pl.Expr:
        return self.operand.to_polars().alias(self.name)

    def show(self) -> str:
        return f"{self.operand.show()}.alias({self.name!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Agg(Expr):
    """An aggregation over the frame or a group (Polars' method ``fn``); ``len`` without an
    operand counts rows (``pl.len()``)."""

    fn: str
    operand: Expr | None
    args: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.fn not in AGGREGATIONS:
            raise ConfigError(f"unknown aggregation {self.fn!r}; known: {AGGREGATIONS}")

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,) if self.operand is not None else ()

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        return Agg(self.fn, children[0] if children else None, self.args)

    def has_agg(self) -> bool:
        return True

    def is_scalar(self) -> bool:
        return True

    def to_polars(self) -> pl.Expr:
        if self.operand is None:
            return pl.len()
        return polars_agg(self.fn, self.operand.to_polars(), self.args)

    def show(self) -> str:
        if self.operand is None:
            return "len()"
        args = ", ".join(repr(a) for a in self.args)
        return f"{self.operand.show()}.{self.fn}({args})"


@dataclass(frozen=True, eq=False, repr=False)
class Over(Expr):
    """``operand.over(partition_by, order_by=..., descending=..., nulls_last=...)``: Polars' window.

    The operand is evaluated on each partition (sorted by ``order_by`` when given) and the
    results are mapped back to the partition's rows; an aggregation is repeated on every row.
    Without ``partition_by`` the whole frame is one partition.
    """

    operand: Expr
    partition_by: tuple[Expr, ...]
    order_by: tuple[Expr, ...] = ()
    descending: bool = False
    nulls_last: bool = False

    def children(self) -> tuple[Expr, ...]:
        return (self.operand, *self.partition_by, *self.order_by)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        n = len(self.partition_by)
        return Over(children[0], tuple(children[1 : 1 + n]), tuple(children[1 + n :]), self.descending, self.nulls_last)

    def has_agg(self) -> bool:
        return False

    def has_window(self) -> bool:
        return True

    def is_scalar(self) -> bool:
        return False

    def to_polars(self) -> pl.Expr:
        order = [e.to_polars() for e in self.order_by] or None
        keys = [e.to_polars() for e in self.partition_by] or None
        return self.operand.to_polars().over(keys, order_by=order, descending=self.descending, nulls_last=self.nulls_last)

    def show(self) -> str:
        keys = ", ".join(e.show() for e in self.partition_by)
        order = ""
        if self.order_by:
            order = f", order_by=[{', '.join(e.show() for e in self.order_by)}]" + (" desc" if self.descending else "") + (" nulls last" if self.nulls_last else "")
        return f"{self.operand.show()}.over([{keys}]{order})"


@dataclass(frozen=True, eq=False, repr=False)
class IsInFrame(Expr):
    """``operand.is_in(frame)``: Polars' ``is_in`` against the single column of ``frame`` (a logical
    plan node), i.e. ``is_in(frame.collect().to_series())``. The planner rewrites it into a semi
    join (in a filter) or a left join (anywhere else) before anything runs."""

    operand: Expr
    frame: Any = field(compare=False)
    nulls_equal: bool = False
    #: SQL's three-valued ``IN (subquery)``: NULL (not False) for a NULL operand, and for no match
    #: when the subquery yields a NULL; False for an empty subquery
    sql: bool = False

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        return replace(self, operand=children[0])

    def has_subquery(self) -> bool:
        return True

    def output_name(self) -> str:
        return self.operand.output_name()

    def to_polars(self) -> pl.Expr:
        raise ConfigError(f"{self.show()} reads another frame: plan it with LazyFrame.to_polars() or collect(), which rewrite it into a join")

    def show(self) -> str:
        return f"{self.operand.show()}.is_in(<frame {list(self.frame.schema)}>)"


@dataclass(frozen=True, eq=False, repr=False)
class ScalarFrame(Expr):
    """The single value of a one-column frame (a scalar subquery): null when the frame has no
    rows. Polars equivalent: ``pl.lit(frame.collect().item())``. Rewritten into a cross join with a
    one-row aggregate before anything runs; a frame of several rows gives one of its values."""

    frame: Any = field(compare=False)

    def has_subquery(self) -> bool:
        return True

    def is_scalar(self) -> bool:
        return True

    def output_name(self) -> str:
        return "literal"

    def to_polars(self) -> pl.Expr:
        raise ConfigError("a scalar subquery reads another frame: plan it with LazyFrame.to_polars() or collect(), which rewrite it into a join")

    def show(self) -> str:
        return f"scalar(<frame {list(self.frame.schema)}>)"


# --- module-level constructors ---------------------------------------------------------------


def col(name: str | Sequence[str], *more: str) -> Expr:
    """The column ``name``; several (``col("a", "b")``, ``col(["a", "b"])``) or every one
    (``col("*")``) as :class:`Columns`, which select, with_columns and agg expand."""
    names = [name] if isinstance(name, str) else list(name)
    names += list(more)
    if names == ["*"]:
        return Columns(None)
    if len(names) == 1:
        return Col(names[0])
    return Columns(tuple(names))


def lit(value: Any, dtype: Any = None) -> Expr:
    """A constant (number, string, bool, date, datetime, timedelta or None), of ``dtype`` if given."""
    return Lit(value, None if dtype is None else as_dtype(dtype))


def count() -> Expr:
    """Number of rows (SQL count(*), Polars ``pl.len()``); an aggregation."""
    return Agg("len", None)


len_ = count


def coalesce(*exprs: Any) -> Expr:
    """The first non-null value of ``exprs``, per row (Polars ``pl.coalesce``)."""
    return Func("coalesce", _expr_list(*exprs), ())


def concat_str(exprs: Iterable[Any], separator: str = "", ignore_nulls: bool = False) -> Expr:
    """The strings of ``exprs`` joined per row (null if any is null, unless ``ignore_nulls``)."""
    return Func("concat_str", _expr_list(*exprs), (separator, ignore_nulls))


def max_horizontal(*exprs: Any) -> Expr:
    """The largest of ``exprs`` per row, ignoring nulls (SQL GREATEST)."""
    return Func("max_horizontal", _expr_list(*exprs), ())


def sum_horizontal(*exprs: Any) -> Expr:
    """The sum of ``exprs`` per row, nulls counted as 0 (Polars' ``sum_horizontal``)."""
    return Func("sum_horizontal", _expr_list(*exprs), ())


def min_horizontal(*exprs: Any) -> Expr:
    """The smallest of ``exprs`` per row, ignoring nulls (SQL LEAST)."""
    return Func("min_horizontal", _expr_list(*exprs), ())


def int_range(start: Any = 0, end: Any = None, step: int = 1, dtype: Any = pl.Int64) -> Expr:
    """Integers start, start+step, ... below end (Polars ``pl.int_range``). ``int_range(1, len() + 1)``
    over a window numbers its rows (SQL row_number)."""
    if end is None:
        start, end = 0, start
    return Func("int_range", (wrap(start), wrap(end)), (step, as_dtype(dtype)))


def scalar(frame: Any) -> Expr:
    """The single value of the one-column LazyFrame ``frame`` (a scalar subquery); null if it has no rows."""
    node = frame._node
    if len(node.schema) != 1:
        raise ConfigError(f"scalar() needs a frame with exactly one column, got {list(node.schema)}")
    return ScalarFrame(node)


