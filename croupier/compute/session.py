"""Sessions: worker pools (and Lithops executors) that live across queries.

Starting worker processes and importing Polars in them costs about a second on a small machine —
more than a small query takes. A :class:`Session` keeps its executors alive between runs, the way
a serverless platform keeps functions warm::

    with croupier.Session() as session:     # workers start now, in the background
        a = croupier.sql("...", tables).collect()   # runs on the session's workers
        b = frame.group_by("k").agg(...).collect()  # same workers, already warm

Runs that are not given an executor use the innermost open session, else the *default session*,
created on first use and living as long as the interpreter (closed cleanly at exit by ``atexit``).
A session holds one executor per pool shape (executor kind, concurrency, function memory, task
timeout, Lithops config): a run whose config asks for another shape gets a pool of its own, kept
in the same session. Executors serialise calls from concurrent runs (one ``map`` at a time), so
a session may be shared by threads.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from croupier.compute.base import Executor
from croupier.config import Config


def new_executor(config: Config) -> Executor:
    """A new executor of the kind ``config.executor`` names: local worker processes, or Lithops."""
    if config.executor == "lithops":
        from croupier.compute.lithops_executor import LithopsExecutor

        return LithopsExecutor(config, config.lithops_config)
    from croupier.compute.local import LocalExecutor

    return LocalExecutor(config)


def pool_key(config: Config) -> tuple[Any, ...]:
    """What makes two configs need different pools (all else is sent with each run's tasks)."""
    lithops = config.lithops_config if config.executor == "lithops" else None
    return (config.executor, config.concurrency, config.function_memory, config.task_timeout, repr(lithops))


class Session:
    """Executors kept alive across runs; a context manager (``close()`` stops them).

    ``config``: the config whose pool starts right away (default: ``Config.from_env()``); runs with
    other pool shapes start theirs on first use. ``start``: start that pool's workers now (they
    import everything a task needs while the driver plans the first query).
    """

    def __init__(self, config: Config | None = None, start: bool = True) -> None:
        self.config = config if config is not None else Config.from_env()
        self._executors: dict[tuple[Any, ...], Executor] = {}
        self._lock = threading.Lock()
        self._closed = False
        if start:
            self.executor(self.config)

    def executor(self, config: Config | None = None) -> Executor:
        """The session's executor for ``config``'s pool shape (created, and started, on first use)."""
        config = config if config is not None else self.config
        key = pool_key(config)
        with self._lock:
            if self._closed:
                raise RuntimeError("this croupier Session is closed; open a new one (croupier.Session())")
            executor = self._executors.get(key)
            if executor is None:
                executor = self._executors[key] = new_executor(config)
                warm = getattr(executor, "warm_up", None)
                if warm is not None:
                    warm()
            return executor

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop every executor of the session (idempotent)."""
        with self._lock:
            self._closed = True
            executors, self._executors = list(self._executors.values()), {}
        for executor in executors:
            executor.close()
        _forget(self)

    def __enter__(self) -> Session:
        with _registry_lock:
            _open.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_registry_lock = threading.Lock()
#: sessions entered with ``with`` and not yet closed, innermost last
_open: list[Session] = []
_default: list[Session] = []
_exit_hook: list[bool] = []


def _forget(session: Session) -> None:
    with _registry_lock:
        if session in _open:
            _open.remove(session)
        if session in _default:
            _default.remove(session)


def current_session() -> Session:
    """The innermost open ``with Session()``, else the default session (created on first use, with
    ``Config.from_env()``, without starting workers; closed at interpreter exit)."""
    with _registry_lock:
        if _open:
            return _open[-1]
        if not _default:
            _default.append(Session(start=False))
            if not _exit_hook:
                atexit.register(close_default_session)
                _exit_hook.append(True)
        return _default[0]


def close_default_session() -> None:
    """Stop the default session's workers (runs at exit; a later run starts a new default session)."""
    with _registry_lock:
        sessions = list(_default)
    for session in sessions:
        session.close()
