"""Thread pools shared by all requests of a process, one per purpose.

A task that fetches its exchange inputs or a Parquet file's column chunks with several requests in
flight used to start a pool of its own: five thread starts, about 2 ms, in every task — most of a
small stage's time (issue 13: stages under 20 ms were predicted 46% too fast, and this was the
missing fixed cost). The pools live as long as the process; a forked child starts its own (threads
do not survive a fork). Callers must not wait on their own pool from inside one of its threads.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_LOCK = threading.Lock()
_POOLS: dict[str, tuple[int, ThreadPoolExecutor]] = {}


def shared_pool(name: str, threads: int) -> ThreadPoolExecutor:
    """This process's pool ``name`` (``threads`` threads, fixed by its first caller)."""
    pid = os.getpid()
    with _LOCK:
        found = _POOLS.get(name)
        if found is None or found[0] != pid:
            found = _POOLS[name] = (pid, ThreadPoolExecutor(threads, thread_name_prefix=f"croupier-{name}"))
        return found[1]
