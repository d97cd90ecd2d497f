"""The one registry type: named entries of one kind, built in or added by a plugin.

Methods, gossips, compression operators, graphs, problem kinds, studies, claim checks and
mixing kernels are each a :class:`Registry`. It is a ``dict`` from name to entry (what
was read as ``GOSSIPS[name]`` still is); :meth:`Registry.add` refuses a malformed or
taken name in one line, :meth:`Registry.find` an unknown one with a "did you mean".
Every registry is listed in :data:`Registry.every`, so a plugin loader can undo what a
failed import registered anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar, TypeVar

from decentopt._checks import unknown_name

__all__ = ["Registry", "check_name"]

T = TypeVar("T")


def _origin(entry: object) -> str:
    module = getattr(entry, "__module__", None)
    name = getattr(entry, "__qualname__", None)
    return f" ({module}.{name})" if module and name else ""


def check_name(name: object, subject: str, example: str) -> str:
    """``name`` if it is lower-case letters, digits and ``_`` (what names are looked up
    case-insensitively by), else a one-line ``ValueError``: ``subject`` (who must have such a
    name), the rule, ``example`` of a good one and what was given."""
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(
            f"{subject} lower-case letters, digits and '_' (names are looked up "
            f"case-insensitively), e.g. {example}; got {name!r}"
        )
    return name


class Registry(dict[str, T]):
    """Entries by name; ``what`` is what an entry is called in messages ("gossip")."""

    #: Every registry made, in order.
    every: ClassVar[list[Registry[Any]]] = []

    def __init__(self, what: str, entries: Iterable[tuple[str, T]] = ()) -> None:
        super().__init__()
        self.what = what
        for name, entry in entries:
            self.add(name, entry)
        Registry.every.append(self)

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name`` (lower-case letters, digits and ``_``)."""
        check_name(name, f"a {self.what}'s name is", f'"my_{self.what.split()[-1]}"')
        if name in self:
            raise ValueError(
                f"a {self.what} named {name!r} is already registered{_origin(self[name])}; "
                "give yours another name"
            )
        self[name] = entry
        return entry

    def register(self, entry: T) -> T:
        """Class decorator: register a class under its ``name`` class attribute."""
        return self.add(getattr(entry, "name", None), entry)  # type: ignore[arg-type]

    def find(self, name: object) -> T:
        """The entry of ``name`` (case and ``-``/``_`` insensitive), or a one-line error."""
        key = str(name).lower().replace("-", "_")
        if key not in self:
            raise ValueError(unknown_name(self.what, key, sorted(self)))
        return self[key]
