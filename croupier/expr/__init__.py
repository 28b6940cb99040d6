"""Column expressions of the lazy frame API, in the style of Polars.

An expression is a small immutable tree (columns, literals, operators, functions, aggregations,
windows). The planner inspects it (which columns it reads, whether it aggregates, whether a
Parquet row group can match it) and tasks run it by translating it to a Polars expression
(:meth:`Expr.to_polars`), so the kernels and the semantics are Polars' own. Trees pickle, so
they travel to workers inside tasks.

    from croupier.frame import col, lit, when
    (col("price") * (1 - col("discount"))).sum().alias("revenue")
    col("x").sum().over("store")                       # a window: one value per row
    col("x").rank("min", descending=True).over("store")

Modules: :mod:`~croupier.expr.nodes` (the nodes and constructors), :mod:`~croupier.expr.functions`
(named functions and their kinds), :mod:`~croupier.expr.namespaces` (``.str``, ``.dt``),
:mod:`~croupier.expr.analysis` (conjuncts, pruning, rewrites).
"""

from croupier.expr.analysis import conjoin, conjuncts, disjuncts, extract, factor_or, fold, identity, is_window_root, may_match, transform, walk
from croupier.expr.functions import FUNCTIONS, like_regex
from croupier.expr.namespaces import DtNamespace, StrNamespace
from croupier.expr.nodes import (
    AGGREGATIONS,
    Agg,
    Alias,
    Binary,
    Cast,
    Col,
    Columns,
    Expr,
    Func,
    IsIn,
    IsInFrame,
    Lit,
    Over,
    ScalarFrame,
    Unary,
    When,
    all_,
    as_dtype,
    coalesce,
    col,
    concat_str,
    count,
    dtype_name,
    exclude,
    expand,
    int_range,
    len_,
    lit,
    max_horizontal,
    sum_horizontal,
    min_horizontal,
    scalar,
    when,
    wrap,
)

__all__ = [
    "disjuncts",
    "factor_or",
    "AGGREGATIONS", "FUNCTIONS", "Agg", "Alias", "Binary", "Cast", "Col", "Columns", "DtNamespace", "Expr", "Func", "IsIn",
    "IsInFrame", "Lit", "Over", "ScalarFrame", "StrNamespace", "Unary", "When", "as_dtype", "coalesce", "col",
    "all_", "concat_str", "conjoin", "conjuncts", "count", "dtype_name", "exclude", "expand", "extract", "fold", "identity", "int_range", "is_window_root",
    "len_", "like_regex", "lit", "max_horizontal", "may_match", "min_horizontal", "scalar", "sum_horizontal", "transform", "walk",
    "when", "wrap",
]  # fmt: skip
