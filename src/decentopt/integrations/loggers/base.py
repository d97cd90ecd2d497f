"""The logger protocol, what a run is to a logger, and the one-line refusal of a missing extra."""

from __future__ import annotations

import importlib
import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["Logger", "MissingExtra", "RunInfo", "flat_params", "needs", "safe_name"]


class MissingExtra(ValueError):
    """A logger or integration whose package is not installed; names the extra to install."""


def needs(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` for ``what``, or refuse in one line naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(
            f"{what} needs the package {module.split('.')[0]!r}: pip install decentopt[{extra}]"
        ) from None


@dataclass(frozen=True)
class RunInfo:
    """One run as loggers see it: its ``name`` (a sweep's unit), the ``group`` of runs it
    belongs to (the sweep's name), its hyper-parameters, and the step it resumes after
    (0: a run that starts from the beginning)."""

    name: str
    group: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    resumed_from: int = 0

    @property
    def key(self) -> str:
        """``group/name``: what identifies the run across restarts."""
        return f"{self.group}/{self.name}" if self.group else self.name


def safe_name(text: str) -> str:
    """``text`` as one file or folder name (anything but ``\\w . = , + -`` as ``_``)."""
    return re.sub(r"[^\w.=,+-]", "_", text) or "_"


def flat_params(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested tables as ``a.b.c`` keys; values kept as numbers, booleans or strings."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out |= flat_params(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value)):
        return {prefix: value}
    if value is None:
        return {prefix: "none"}
    if isinstance(value, list | tuple):
        return {prefix: ",".join(map(str, value))}
    return {prefix: str(value)}


class Logger(ABC):
    """Where the records of runs go. One instance logs one run at a time: :meth:`start`,
    then :meth:`scalars` and :meth:`figure` any number of times, then :meth:`finish`.

    A run started again with the same :attr:`RunInfo.key` and ``resumed_from > 0``
    continues the run it started before (steps after ``resumed_from`` that were logged
    before an interruption are logged once). Built-in loggers take one ``target`` string
    (a folder, a project); a user's logger is a class of this form reached through the
    entry-point group ``decentopt.loggers`` (name -> a callable of the target).
    """

    @abstractmethod
    def start(self, run: RunInfo) -> None:
        """Open (or reopen) ``run`` and record its hyper-parameters."""

    @abstractmethod
    def scalars(self, step: int, values: dict[str, float]) -> None:
        """The values of one step."""

    @abstractmethod
    def figure(self, name: str, path: Path) -> None:
        """An image file (a figure of the report)."""

    @abstractmethod
    def finish(self) -> None:
        """Close the run; everything written is on disk (or sent)."""
