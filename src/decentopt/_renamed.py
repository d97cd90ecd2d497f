"""Names kept for code written against earlier releases: each still works, and warns once
with its replacement."""

from __future__ import annotations

import warnings
from collections.abc import Callable

__all__ = ["renamed"]


def renamed(module: str, table: dict[str, tuple[Callable[[], object], str]]) -> Callable:
    """A module's ``__getattr__`` for the old names of ``table``: ``name -> (a function
    giving what the name is now, the replacement in words)``."""
    warned: set[str] = set()

    def __getattr__(name: str) -> object:
        if name not in table:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        get, instead = table[name]
        if name not in warned:
            warned.add(name)
            warnings.warn(f"{module}.{name} is deprecated: {instead}", DeprecationWarning, 2)
        return get()

    return __getattr__
