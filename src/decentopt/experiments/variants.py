"""The ``[algorithms]`` tables of a specification: labelled variants, grids, own graphs."""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from decentopt import algorithms
from decentopt._checks import unknown_name
from decentopt._schema import ConfigError, prefixed

__all__ = ["Variant", "check_labels", "rounds_as_gossip", "variants"]

#: Keys of an [algorithms.LABEL] table besides the method's hyper-parameters.
_OWN_KEYS = ("method", "topology")


@dataclass(frozen=True)
class Variant:
    """One labelled algorithm setting: ``method`` with its hyper-parameters, and the graph
    it runs on when that is not the specification's ``[topology]`` (a directed graph for
    push-sum methods, a tree for relaying)."""

    label: str
    method: str
    hyperparams: dict[str, Any]
    topology: dict[str, Any] | None = None

    def make(self, **changes: Any) -> Any:
        return algorithms.make(self.method, **(self.hyperparams | changes))


def variants(tables: dict[str, Any], defaults: dict[str, Any], source: str) -> dict[str, Variant]:
    """``[algorithms.LABEL]`` tables with ``[defaults]``; list values expand into a grid."""
    if not tables:
        raise ConfigError(f"{source} [algorithms]: list at least one, e.g. [algorithms.edm]")
    out: dict[str, Variant] = {}
    used: set[str] = set()
    for label, table in tables.items():
        where = f"{source} [algorithms.{label}]"
        if not re.fullmatch(r"[A-Za-z0-9_][\w.+-]*", label):
            # a label names the folder of its results: nothing outside --out may be touched
            raise ConfigError(
                f"{source} [algorithms.{label!r}]: an algorithm label must be a plain name "
                "(letters, digits, '_', '-', '.', '+'; not starting with '.' or '-'), e.g. "
                "[algorithms.edm_fast]"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: must be a table of hyper-parameters")
        method = table.get("method", label)
        if method not in algorithms.names():
            what = "method" if "method" in table else "algorithm"
            names = algorithms.names()
            raise ConfigError(
                f"{source} [algorithms]: {unknown_name(what, method, names)}; a method of "
                "your own is loaded by --plugin FILE_OR_MODULE or plugins = [...] in the file"
            )
        fields = algorithms.hyperparameters(method)
        for key in table:  # a misspelt key gets a "did you mean", the table's own keys too
            if key not in fields and key not in _OWN_KEYS:
                said = unknown_name("hyper-parameter", key, [*fields, *_OWN_KEYS])
                raise ConfigError(f"{where}: {said}")
        merged = {k: v for k, v in (defaults | table).items() if k in fields or k in table}
        merged.pop("method", None)
        graph = _own_topology(merged.pop("topology", None), where)
        used |= merged.keys()
        grid = {k: v for k, v in merged.items() if isinstance(v, list)}
        if not all(grid.values()):
            raise ConfigError(f"{where}: a grid needs at least one value")
        for values in itertools.product(*grid.values()):
            point = dict(zip(grid, values, strict=True))
            args = ", ".join(f"{k}={v}" for k, v in point.items())
            name = f"{label}({args})" if point else label
            variant = Variant(name, method, merged | point, graph)
            with prefixed(where, into=ConfigError):
                variant.make()
            out[name] = variant
    unused = sorted(set(defaults) - used)
    if unused:
        raise ConfigError(f"{source} [defaults]: no listed algorithm has the field(s) {unused}")
    return out


def rounds_as_gossip(
    tables: dict[str, Any], rounds: int, acceleration: str, source: str
) -> dict[str, Any]:
    """The keys ``mix_rounds`` and ``acceleration`` of earlier releases read as what they
    are, every variant's gossip ``multi_round(K, acceleration=...)``, with one warning."""
    gossip = f"multi_round({rounds}, acceleration={acceleration!r})"
    warnings.warn(
        f"{source}: mix_rounds and acceleration are a gossip now: write "
        f"gossip = {gossip!r} in [defaults] instead",
        FutureWarning,
        stacklevel=4,
    )
    out = {}
    for label, table in tables.items():
        if not isinstance(table, dict) or "gossip" in table:
            out[label] = table
        elif table.get("method", label) in algorithms.ALIASES:
            raise ConfigError(
                f"{source} [algorithms.{label}]: {table.get('method', label)} fixes its own "
                "gossip; mix_rounds applies to update rules (dsgd, edm, ...) only"
            )
        else:
            out[label] = {**table, "gossip": gossip}
    return out


def _own_topology(value: Any, where: str) -> dict[str, Any] | None:
    """A variant's ``topology``: a name (``"chain"``) or a table (``{name = "...", ...}``)."""
    if value is None:
        return None
    table = {"name": value} if isinstance(value, str) else value
    if not isinstance(table, dict) or not isinstance(table.get("name"), str):
        raise ConfigError(
            f"{where} topology: give a graph's name or a table with one, e.g. "
            f'topology = "chain" or topology = {{name = "random_directed", p = 0.2}}; '
            f"found {value!r}"
        )
    return dict(table)


def grids(known: Sequence[str]) -> dict[str, list[str]]:
    """The grids among the variants ``known``: a table's label -> its members' labels
    (``edm`` -> ``edm(lr=0.1)``, ``edm(lr=0.05)``; a label itself has no parentheses)."""
    out: dict[str, list[str]] = {}
    for label in known:
        if "(" in label:
            out.setdefault(label.split("(", 1)[0], []).append(label)
    return out


def present(labels: Sequence[str], known: Sequence[str]) -> list[str]:
    """The variants of ``known`` that ``--only`` labels name, in their order: a variant's
    label names it, a grid's label every member (labels naming none are left out)."""
    members = grids(known)
    chosen = [
        x for label in labels for x in ([label] if label in known else members.get(label, []))
    ]
    return list(dict.fromkeys(chosen))


def check_labels(labels: Sequence[str], known: list[str]) -> None:
    """Refuse an empty ``--only`` or a label that names none of the variants ``known`` (nor
    a grid of them)."""
    if not labels:
        raise ConfigError(
            f"--only: no algorithm labels given; name some of {', '.join(known)}, "
            "e.g. --only ed,edm"
        )
    choices = [*known, *(g for g in grids(known) if g not in known)]
    for label in labels:
        if label not in choices:
            raise ConfigError(f"--only: {unknown_name('algorithm', label, choices)}")
