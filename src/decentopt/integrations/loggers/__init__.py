"""Loggers: the records of runs sent where users watch them.

Chosen by ``NAME:TARGET`` strings, as ``--log tensorboard:runs/tb`` (repeatable) on the
command line, a ``[logging]`` table of a specification (``tensorboard = "runs/tb"``),
or in Python::

    from decentopt.integrations import loggers
    log = loggers.make(["tensorboard:runs/tb", "jsonl:runs/lines"])
    log.result(dopt.simulate(alg, prob, topo, iterations=500), name="edm")

========================  ==================================================  =========
name                      target                                              extra
========================  ==================================================  =========
``tensorboard``           a folder of event files, one per run                ``[tensorboard]``
``wandb``                 a W&B project (``WANDB_MODE=offline``: no network)  ``[wandb]``
``mlflow``                a tracking URI, or a folder (MLflow's file store)   ``[mlflow]``
``jsonl``                 a folder of JSON-lines files                        (none)
========================  ==================================================  =========

Users add their own through the entry-point group ``decentopt.loggers``: the entry
point's name is the logger's name, its object a callable of the target returning a
:class:`Logger`.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterable

from decentopt.integrations.loggers.base import Logger, MissingExtra, RunInfo
from decentopt.integrations.loggers.hub import Loggers, record_scalars

__all__ = [
    "ENTRY_POINT_GROUP",
    "LOGGERS",
    "Logger",
    "Loggers",
    "MissingExtra",
    "RunInfo",
    "check_name",
    "check_table",
    "make",
    "make_logger",
    "names",
    "record_scalars",
    "targets",
]

#: The entry-point group installed distributions declare their loggers in.
ENTRY_POINT_GROUP = "decentopt.loggers"

#: Built-in loggers: name -> "module:class" (imported when asked for).
LOGGERS: dict[str, str] = {
    "tensorboard": "decentopt.integrations.loggers.tensorboard:TensorBoardLogger",
    "wandb": "decentopt.integrations.loggers.wandb:WandbLogger",
    "mlflow": "decentopt.integrations.loggers.mlflow:MlflowLogger",
    "jsonl": "decentopt.integrations.loggers.jsonl:JsonLinesLogger",
}


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    group = ENTRY_POINT_GROUP
    found = {p.name: p for p in importlib.metadata.entry_points(group=group)}
    builtin = {name: importlib.metadata.EntryPoint(name, at, group) for name, at in LOGGERS.items()}
    return builtin | {name: found[name] for name in sorted(set(found) - set(LOGGERS))}


def names() -> list[str]:
    """Every logger's name: the built-in ones, then those of installed distributions."""
    return list(_entry_points())


def check_name(name: str) -> None:
    """Refuse an unknown logger name in one line that lists the known ones."""
    if name not in _entry_points():
        raise ValueError(
            f"unknown logger {name!r}; known: {', '.join(names())} (users' loggers come "
            f"from the entry-point group {ENTRY_POINT_GROUP})"
        )


def check_table(table: dict[str, object]) -> None:
    """A ``[logging]`` table: logger names, each with its target as a string."""
    for name, target in table.items():
        check_name(name)
        if not isinstance(target, str):
            raise ValueError(
                f"{name} = {target!r}: give the logger's target as a string, e.g. "
                f'{name} = "runs/{name}"'
            )


def targets(table: dict[str, str]) -> list[str]:
    """A ``[logging]`` table as ``NAME:TARGET`` strings."""
    return [f"{name}:{target}" for name, target in table.items()]


def make_logger(target: str) -> Logger:
    """``NAME:TARGET`` (``tensorboard:runs/tb``) as a logger; an absent extra refused in
    one line naming it (:class:`MissingExtra`)."""
    name, sep, where = target.partition(":")
    if not sep and name not in LOGGERS:
        raise ValueError(f"a logger is NAME:TARGET, e.g. tensorboard:runs/tb; got {target!r}")
    name = name.strip()
    check_name(name)
    try:
        factory: Callable[[str], Logger] = _entry_points()[name].load()
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise ValueError(f"the logger {name!r} failed to load: {reason}") from None
    logger = factory(where.strip())
    if not isinstance(logger, Logger):
        raise ValueError(
            f"the logger {name!r} made a {type(logger).__name__}, not a "
            "decentopt.integrations.loggers.Logger"
        )
    return logger


def make(targets: Iterable[str]) -> Loggers:
    """Several ``NAME:TARGET`` strings as one :class:`Loggers` (each checked now)."""
    targets = list(targets)
    return Loggers([make_logger(t) for t in targets], targets=targets)
