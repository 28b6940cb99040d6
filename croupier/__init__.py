"""Croupier: sort, group-by, join and queries on short-lived workers that exchange data through storage.

The jobs are plain functions; ``croupier`` on the command line wraps them::

    from croupier import Config, gensort, sort, valsort
    config = Config()
    gensort("file:///tmp/in", 10**9, parts=8, config=config)
    sort("file:///tmp/in", "file:///tmp/out", workers=4, config=config)
    result, report = valsort("file:///tmp/out", config, input_url="file:///tmp/in")
"""

from croupier.config import Config, RetryPolicy, S3Options, Secret
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort

__all__ = ["Config", "RetryPolicy", "S3Options", "Secret", "gensort", "sort", "valsort"]
__version__ = "0.1.0"
