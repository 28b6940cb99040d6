"""Croupier's lazy frame API (Polars-style) and its expressions.

See :mod:`croupier.frame.lazy` for an example.
"""

from croupier.expr import Expr, col, count, lit, when
from croupier.frame.lazy import LazyFrame, QueryResult, scan_csv, scan_gensort, scan_parquet

__all__ = ["Expr", "LazyFrame", "QueryResult", "col", "count", "lit", "scan_csv", "scan_gensort", "scan_parquet", "when"]
