"""Worker processes whose driver died exit quietly (issue 12, promise 6).

A local worker is a child of the multiprocessing fork server, which ends when the driver does;
the worker is then re-parented. :func:`guard_worker` starts a daemon thread that notices this (its
parent process id changes) and ends the worker at once with ``os._exit`` — no traceback, no
half-written reply; what it was writing is a temporary object under the run's prefix or an
uncommitted part, both of which ``croupier clean`` removes once the run's lease expires. On
Linux the kernel's parent-death signal (``PR_SET_PDEATHSIG``) ends it even sooner.

Ctrl-C in a terminal reaches the whole process group: workers ignore SIGINT and leave the
interrupt to the driver, which stops them; so no worker prints a ``KeyboardInterrupt`` traceback.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

#: Seconds between checks of the parent process id.
POLL_SECONDS = 0.2
_PR_SET_PDEATHSIG = 1


def guard_worker(poll: float = POLL_SECONDS, spawned: bool = False) -> None:
    """Make this worker process ignore Ctrl-C and exit quietly when its parent dies.

    ``spawned``: started by a driver thread, not by the fork server (see :func:`sigint_ignored`):
    the kernel's parent-death signal is not asked for, because it fires when the *thread* that
    started the process ends (a run's stage threads start replacement workers), not only with the
    driver; the watcher thread still ends it with the driver."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    if sys.platform.startswith("linux") and not spawned:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass  # no prctl: the watcher thread alone does it
    if os.getppid() != parent or parent == 1:
        os._exit(0)
    threading.Thread(target=_watch, args=(parent, poll), name="croupier-orphan-watch", daemon=True).start()


def _watch(parent: int, poll: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll)
    os._exit(0)


def start_forkserver_quietly(environment: Mapping[str, str] | None = None) -> bool:
    """Start the multiprocessing fork server now (if it is not running) with SIGINT ignored, so a
    Ctrl-C to the process group while it imports its preloaded modules is not a traceback: an
    ignored signal stays ignored across its exec, and once running it ignores SIGINT itself.
    Only the main thread may change signal dispositions; elsewhere it starts as usual. (A Ctrl-C
    in the few milliseconds of the fork is lost; press it again.)

    ``environment``: variables the fork server (and so every worker forked from it) starts with;
    the driver's own environment is restored after (the caller decides what a user's setting
    overrides). Return whether the running fork server has them: False when it was already
    running with other values (an executor of another thread count started it, or someone else
    did), as its preloaded libraries read them once, when it started."""
    from multiprocessing import forkserver

    global _STARTED_WITH
    added = dict(environment or {})
    with environment_set(added):
        before = _server_pid(forkserver)
        with sigint_ignored():
            forkserver.ensure_running()
        now = _server_pid(forkserver)
        if (now != before or before is None) and (_STARTED_WITH is None or _STARTED_WITH[0] != now):
            _STARTED_WITH = (now, added)  # (re)started just now, with these values
        return _STARTED_WITH is not None and _STARTED_WITH[0] == now and _STARTED_WITH[1] == added


#: (process id, variables) of the fork server :func:`start_forkserver_quietly` last started; a
#: server with another process id was started by someone else, or restarted without them.
_STARTED_WITH: tuple[int | None, dict[str, str]] | None = None


def _server_pid(forkserver: Any) -> int | None:
    """The fork server's process id, None when it is not running (``multiprocessing`` keeps it in
    a private attribute; were that to go, only the first start would count as one, and a server
    restarted after dying would be taken for the first one's settings)."""
    # (ensure_running restarts a server that died, and LocalExecutor asks before every worker)
    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


@contextmanager
def environment_set(added: Mapping[str, str]) -> Iterator[None]:
    """Within the block, ``os.environ`` has ``added`` (processes started in it inherit them);
    the previous values come back after. One block at a time (:data:`ENVIRONMENT_LOCK`): two
    executors starting processes at once must not save each other's values."""
    with ENVIRONMENT_LOCK:
        saved = {k: os.environ.get(k) for k in added}
        os.environ.update(added)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


#: Held while the environment is changed for a process to start, or read to decide what to set
#: (re-entrant: the executor reads and starts under one hold).
ENVIRONMENT_LOCK = threading.RLock()


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Within the block, Ctrl-C is ignored, so a process spawned in it starts ignoring it (an
    ignored signal stays ignored across exec; a blocked one does not stay blocked there): a
    spawned worker imports Python's and Croupier's modules before any of its code runs, and a
    Ctrl-C then was a traceback per worker. Not quite all of that time: importing Polars installs
    its own handler, so a Ctrl-C after that and before :func:`guard_worker` still is. Only the main
    thread may change it; elsewhere (a replacement worker started by a run's stage thread) the
    block does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
