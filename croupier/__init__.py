"""Croupier: sort, group-by, join and queries on short-lived workers that exchange data through storage.

Queries: ``croupier.scan_parquet(...)`` and the frame API, or ``croupier.sql(text, tables={...})``.
The jobs are plain functions; ``croupier`` on the command line wraps them::

    from croupier import Config, gensort, sort, valsort
    config = Config()
    gensort("file:///tmp/in", 10**9, parts=8, config=config)
    sort("file:///tmp/in", "file:///tmp/out", workers=4, config=config)
    result, report = valsort("file:///tmp/out", config, input_url="file:///tmp/in")
"""

from croupier.compute.session import Session
from croupier.config import Config, RetryPolicy, S3Options, Secret
from croupier.frame import LazyFrame, coalesce, col, concat, count, lit, scan_csv, scan_parquet, when
from croupier.frame import len as len  # noqa: A004 - Polars' name: pl.len()
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.sql import sql  # noqa: E402 - the function shadows the subpackage's name on purpose

__all__ = [
    "Config", "LazyFrame", "RetryPolicy", "S3Options", "Secret", "Session", "coalesce", "col", "concat", "count", "gensort", "len",
    "lit", "scan_csv", "scan_parquet", "sort", "sql", "valsort", "when",
]  # fmt: skip
__version__ = "0.1.0"
