"""Croupier: sort, group-by, join and queries on short-lived workers that exchange data through storage.

Queries: ``croupier.scan_parquet(...)`` and the frame API, or ``croupier.sql(text, tables={...})``.
The jobs are plain functions; ``croupier`` on the command line wraps them::

    from croupier import Config, gensort, sort, valsort
    config = Config()
    gensort("file:///tmp/in", 10**9, parts=8, config=config)
    sort("file:///tmp/in", "file:///tmp/out", workers=4, config=config)
    result, report = valsort("file:///tmp/out", config, input_url="file:///tmp/in")

The public names are imported on first use (PEP 562), so ``import croupier`` (and the ``croupier``
command, every worker and every Lithops function) does not pay for Polars, PyArrow, sqlglot and
the engine until something needs them. ``croupier.sql`` is imported eagerly: the function shadows
the subpackage's name, and importing it first keeps it so (a later ``import croupier.sql.parse``
does not rebind the name); its module imports nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from croupier.lazy import exports
from croupier.sql import sql  # the function shadows the subpackage's name on purpose (see above)

if TYPE_CHECKING:
    from croupier.compute.session import Session
    from croupier.config import Config, RetryPolicy, S3Options, Secret
    from croupier.frame import LazyFrame, coalesce, col, concat, count, lit, scan_csv, scan_parquet, when
    from croupier.frame import len as len  # noqa: A004 - Polars' name: pl.len()
    from croupier.jobs.gensort import gensort
    from croupier.jobs.sort import sort
    from croupier.jobs.valsort import valsort

__all__ = [
    "Config", "LazyFrame", "RetryPolicy", "S3Options", "Secret", "Session", "coalesce", "col", "concat", "count", "gensort", "len",
    "lit", "scan_csv", "scan_parquet", "sort", "sql", "valsort", "when",
]  # fmt: skip
__version__ = "0.1.0"

#: public name -> the module it comes from (imported on first use)
_LAZY = {
    "Session": "croupier.compute.session",
    "Config": "croupier.config",
    "RetryPolicy": "croupier.config",
    "S3Options": "croupier.config",
    "Secret": "croupier.config",
    "LazyFrame": "croupier.frame",
    "coalesce": "croupier.frame",
    "col": "croupier.frame",
    "concat": "croupier.frame",
    "count": "croupier.frame",
    "len": "croupier.frame",
    "lit": "croupier.frame",
    "scan_csv": "croupier.frame",
    "scan_parquet": "croupier.frame",
    "when": "croupier.frame",
    "gensort": "croupier.jobs.gensort",
    "sort": "croupier.jobs.sort",
    "valsort": "croupier.jobs.valsort",
}


__getattr__, __dir__ = exports(__name__, _LAZY, __all__, globals(), submodules=True)
