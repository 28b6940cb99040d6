"""Names a package re-exports, imported on first use (PEP 562).

``import croupier`` (and the ``croupier`` command, every worker and every Lithops function) must
not pay for Polars, PyArrow, sqlglot and the engine until something needs them: a package's
``__init__`` names where each public name comes from, and :func:`exports` makes the module's
``__getattr__`` and ``__dir__`` that import it then. This module imports nothing itself.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, MutableMapping, Sequence


def exports(package: str, sources: Mapping[str, str], public: Sequence[str], namespace: MutableMapping[str, Any], submodules: bool = False) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` (its ``namespace``: ``globals()``): a name
    of ``sources`` (name -> module) is imported from its module on first use and kept in the
    namespace; with ``submodules``, any other name is tried as a submodule (``croupier.frame``
    worked without importing it while ``import croupier`` imported everything)."""

    def getattr_(name: str) -> Any:
        source = sources.get(name)
        if source is not None:
            value = namespace[name] = getattr(importlib.import_module(source), name)
            return value
        if submodules and not name.startswith("__"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(public))

    return getattr_, dir_
