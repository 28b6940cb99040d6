"""SIGTERM handled like Ctrl-C (issue 12, promise 6).

``docker stop``, CI timeouts and ``timeout`` send SIGTERM. Python's default for it is to die on
the spot, leaving a run's temporary objects and its writer lock behind. Inside
:func:`terminate_like_interrupt` SIGTERM instead raises :class:`Terminated` in the main thread — a
``KeyboardInterrupt`` — so the same clean-up as for Ctrl-C runs (the output commit is aborted,
the run's temporaries deleted). Then, unless the caller handles it, the process still ends *by
SIGTERM* (exit status 143), as it would have without Croupier: the signal is re-sent with its
default action once the clean-up is done. The CLI maps the two to exit codes 143 and 130.

A program that installed its own SIGTERM handler keeps it: Croupier installs one only where the
default action is in place, and only in the main thread (where Python delivers signals).
"""

from __future__ import annotations

import functools
import os
import signal
import threading
from typing import Any, Callable, Iterator, TypeVar
from contextlib import contextmanager

F = TypeVar("F", bound=Callable[..., Any])

#: Exit status of a process ended by SIGTERM, as a shell reports it.
EXIT_TERMINATED = 128 + signal.SIGTERM
#: Exit status of a process ended by Ctrl-C (SIGINT), as a shell reports it.
EXIT_INTERRUPTED = 128 + signal.SIGINT


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; raised in the main thread so every clean-up on the way out runs."""


def exit_status(exc: BaseException) -> int:
    """The shell's exit status for an interrupt: 143 for SIGTERM, 130 for Ctrl-C."""
    return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED


def _raise_terminated(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    raise Terminated(f"terminated by signal {signum} (SIGTERM)")


@contextmanager
def terminate_like_interrupt(redeliver: bool = True) -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated`. ``redeliver``: when it propagates out
    of the block, end the process by SIGTERM (default action) after the block's clean-up ran."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield  # not ours to change: a nested run, another thread, or the program's own handler
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if redeliver:
            os.kill(os.getpid(), signal.SIGTERM)
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def handles_sigterm(fn: F) -> F:
    """Decorator: run ``fn`` inside :func:`terminate_like_interrupt` (a run's entry points)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with terminate_like_interrupt():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
