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

:class:`Loggers` feeds several loggers from the driver's records, run by run. The driver
tells the object in :attr:`RunOptions.monitor <decentopt.driver.options.RunOptions>` when a
run starts (and from which step it resumes), each record as the recorder writes it, and
the result at the end; a sweep binds one :class:`Loggers` per unit (:meth:`Loggers.unit`),
named after the unit and grouped by the sweep. Under torch.distributed only rank 0 logs
(the records it holds are already the agents' means).

Each record becomes one step of scalars: every metric of every row
(``dist_to_opt``; with several columns ``dist_to_opt/run:3``, a panel's level first:
``dist_to_opt/c:1/run:3``), ``rounds``, ``bytes_per_agent``, ``lr`` and
``wall_seconds``; a run under a time model adds ``sim_time`` when it ends.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch.distributed as dist

from decentopt.driver.result import Record, Result
from decentopt.integrations.loggers.base import Logger, MissingExtra, RunInfo, flat_params

if TYPE_CHECKING:
    from decentopt.driver.timeline import TimeModel

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


def _column_name(label: dict[str, Any]) -> str:
    """``c:1/run:3``: characters every backend takes in a tag (MLflow refuses ``=`` and ``,``)."""
    return "/".join(
        f"{k}:{v:.6g}" if isinstance(v, float) else f"{k}:{v}" for k, v in label.items()
    )


def record_scalars(record: Record, labels: Sequence[dict[str, Any]]) -> dict[str, float]:
    """One record as tagged numbers (see the module docstring)."""
    first = next(iter(record.metrics.values()), np.zeros(1))
    columns = len(labels) or len(first)
    names = [_column_name(c) for c in labels] or [f"run:{c}" for c in range(columns)]
    out: dict[str, float] = {}
    for key, values in record.metrics.items():
        if columns == 1:
            out[key] = float(values[0])
        else:
            out |= {f"{key}/{name}": float(v) for name, v in zip(names, values, strict=True)}
    out["rounds"] = float(record.rounds)
    out["bytes_per_agent"] = record.bytes_per_agent / columns  # as in Result.rows
    out["lr"] = float(record.lr)
    out["wall_seconds"] = float(record.wall_seconds)
    return out


def _unit_name(sweep: str, folder: Path) -> str:
    """The unit's name (its folder's), after the sweep's place under a folder named after
    the sweep where it is one case of a study (``n32/ring/edm``): unique in its group."""
    out = folder.parent.parent  # a sweep's units are OUT/runs/UNIT
    for above in (out, *out.parents):
        if above.name == sweep:
            return (out.relative_to(above) / folder.name).as_posix()
    return folder.name


def _is_main() -> bool:
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


class Loggers:
    """``loggers`` logging the run ``run`` (bind one with :meth:`bind` or :meth:`unit`).

    Also the driver's record sink (:class:`~decentopt.driver.options.RecordSink`):
    ``start``, ``record``, ``finish``. ``targets``: the ``NAME:TARGET`` strings the loggers
    were made from (:func:`~decentopt.integrations.loggers.make`), from which a unit that
    runs in another process (a SLURM job, a dask worker) makes them again.
    """

    def __init__(
        self,
        loggers: Sequence[Logger],
        run: RunInfo | None = None,
        timing: tuple[TimeModel, Any, Any] | None = None,
        targets: Sequence[str] = (),
    ) -> None:
        self.loggers = list(loggers)
        self.targets = tuple(targets)
        self.run = run
        self.timing = timing  # (time model, graph, method): sim_time at the end
        self.labels: list[dict[str, Any]] = []
        self.first = 0  # steps before this one were logged by an earlier start

    def bind(self, name: str, group: str = "", params: dict[str, Any] | None = None) -> Loggers:
        """The same loggers for the run ``name`` of ``group``, with its hyper-parameters."""
        run = RunInfo(name, group, flat_params(params or {}))
        return Loggers(self.loggers, run, targets=self.targets)

    def unit(self, spec: Any, variant: Any, run: int | None, folder: Path) -> Loggers | None:
        """The loggers of one unit of the sweep ``spec`` (None on ranks other than 0)."""
        if not self.loggers or not _is_main():
            return None
        whole = dataclasses.asdict(dataclasses.replace(spec, algorithms={}, claims=()))
        params = {
            "spec": {k: v for k, v in whole.items() if k not in ("source", "logging", "params")},
            "problem_params": dataclasses.asdict(spec.params),
            "method": variant.method,
            "label": variant.label,
            "hyperparams": variant.hyperparams,
            "graph": spec.topology_of(variant.label),
            "seed": spec.seeds.noise + (run or 0),
            "run": run,
        }
        bound = self.bind(_unit_name(spec.name, folder), spec.name, params)
        if spec.timing is not None:
            bound.timing = (spec.timing, spec.build_topology(variant.label), variant.make())
        return bound

    # the driver's record sink
    def start(self, resumed_from: int, labels: Sequence[dict[str, Any]]) -> None:
        if self.run is None:
            raise ValueError(
                "these loggers log no run yet: name one with loggers.make([...]).bind(NAME)"
            )
        self.labels = list(labels)
        self.first = resumed_from + 1 if resumed_from else 0
        run = dataclasses.replace(self.run, resumed_from=resumed_from)
        for logger in self.loggers:
            logger.start(run)

    def record(self, record: Record) -> None:
        self.scalars(record.step, record_scalars(record, self.labels))

    def scalars(self, step: int, values: dict[str, float]) -> None:
        """``values`` of ``step`` to every logger (a started run)."""
        for logger in self.loggers:
            logger.scalars(step, values)

    def finish(self, result: Result) -> None:
        if self.timing is not None and result.clock is None:
            from decentopt.driver.timeline import timed

            result = timed(dataclasses.replace(result), *self.timing)
        if result.clock is not None:
            for step in result.steps[result.steps >= self.first]:
                self.scalars(int(step), {"sim_time": float(result.clock[step])})
        for logger in self.loggers:
            logger.finish()

    def result(
        self, result: Result, name: str, group: str = "", params: dict[str, Any] | None = None
    ) -> None:
        """Log a finished run (``simulate``'s result, its ``sim_time`` too) as the run ``name``."""
        bound = self.bind(name, group, params)
        bound.start(0, result.labels)
        for record in result.records:
            bound.record(record)
        bound.finish(result)

    def figures(self, paths: Sequence[Path], group: str = "") -> None:
        """The report's figures, in a run named ``figures`` of ``group``."""
        if not self.loggers or not _is_main():
            return
        images = [Path(p) for p in paths if Path(p).suffix.lower() == ".png"]
        run = RunInfo("figures", group)
        for logger in self.loggers:
            logger.start(run)
            for path in images:
                logger.figure(path.stem, path)
            logger.finish()
