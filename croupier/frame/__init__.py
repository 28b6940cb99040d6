"""Croupier's lazy frame API (Polars-style) and its expressions.

See :mod:`croupier.frame.lazy` for an example.
"""

from croupier.expr import (
    Expr,
    all_,
    coalesce,
    col,
    concat_str,
    count,
    exclude,
    int_range,
    len_,
    lit,
    max_horizontal,
    sum_horizontal,
    min_horizontal,
    scalar,
    when,
)
from croupier.frame.lazy import LazyFrame, QueryResult, concat, scan_csv, scan_gensort, scan_parquet
from polars import (  # Polars' data types, for casts and schemas (``cf.Int64`` is ``pl.Int64``)
    Boolean,
    Date,
    Datetime,
    Float32,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    String,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Utf8,
)

len = len_
all = all_  # Polars' pl.all() (this module's name; Python's all() is not used here)

__all__ = [
    "Boolean", "Date", "Datetime", "Float32", "Float64", "Int8", "Int16", "Int32", "Int64", "String", "UInt8", "UInt16", "UInt32", "UInt64", "Utf8",
    "Expr", "LazyFrame", "QueryResult", "all", "coalesce", "col", "concat", "concat_str", "count", "exclude", "int_range", "len", "lit",
    "max_horizontal", "min_horizontal", "scalar", "sum_horizontal", "scan_csv", "scan_gensort", "scan_parquet", "when",
]  # fmt: skip
