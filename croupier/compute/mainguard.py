"""Worker processes that never re-run the user's script.

``multiprocessing`` (forkserver and spawn) re-imports the driver's main module in every new process
so that functions defined there can be unpickled. A script without an ``if __name__ ==
"__main__":`` guard then runs again, top to bottom, inside each worker — the classic crash when a
README example is pasted into a file. Croupier's tasks are functions of importable modules, never
of ``__main__``, so workers do not need the main module: while a worker starts, the main module's
``__file__`` is hidden and ``multiprocessing`` has nothing to re-import. A script run with ``python
-m module`` is re-imported by name under ``__mp_main__``, which a guard-less script survives too
(its body runs again, but as ``__mp_main__`` — so the hiding covers that case as well).
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Iterator

_LOCK = threading.Lock()
_MISSING = object()


@contextmanager
def main_module_hidden() -> Iterator[None]:
    """Within the block, new processes see no main module to re-import (restored afterwards)."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    with _LOCK:
        saved_file = main.__dict__.pop("__file__", _MISSING)
        saved_spec = main.__dict__.get("__spec__", _MISSING)
        if saved_spec is not _MISSING:
            main.__spec__ = None
        try:
            yield
        finally:
            if saved_file is not _MISSING:
                main.__file__ = saved_file
            if saved_spec is not _MISSING:
                main.__spec__ = saved_spec
