"""Data files that ship with Croupier (storage profiles, fast-tier profiles, platforms): each is
loaded from a path, or from the package by its shipped name."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Callable, TypeVar

from croupier.errors import ConfigError

T = TypeVar("T")


def shipped_names(package: str, folder: str) -> list[str]:
    """Names of the JSON files shipped in ``package``/``folder`` (without ``.json``)."""
    root = resources.files(package) / folder
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_shipped(path_or_name: str | Path, package: str, folder: str, kind: str, build: Callable[[dict[str, Any]], T]) -> T:
    """``build`` applied to the JSON at ``path_or_name``, or to the shipped file of that name;
    a missing name or an invalid file is a ConfigError naming the ``kind`` and what ships."""
    path = Path(path_or_name)
    if path.exists():
        text = path.read_text()
    else:
        shipped = resources.files(package) / folder / f"{path_or_name}.json"
        if not shipped.is_file():
            raise ConfigError(f"no {kind} file {str(path_or_name)!r} and no shipped {kind} of that name; shipped: {', '.join(shipped_names(package, folder))}")
        text = shipped.read_text()
    try:
        return build(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{kind} {path_or_name}: not a valid Croupier {kind} file ({exc})") from exc
