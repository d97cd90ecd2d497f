"""The interface of a problem *kind* in a run specification, and what the convex kinds share.

A :class:`ProblemSpec` is one section of a run specification: the frozen
dataclass read from ``[problem_params]``, which builds the problem and says how
long a run is and where it is recorded. Adding a kind is one file with such a
class plus one call of :func:`decentopt.experiments.kinds.register_kind`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from decentopt.plan import Plan, record_steps
from decentopt.problems.base import Problem

__all__ = ["ConvexSpec", "ProblemSpec", "missing_members"]


@runtime_checkable
class ProblemSpec(Protocol):
    """``[problem_params]`` of one problem kind (a frozen dataclass)."""

    #: A list-valued field with one figure panel per value (e.g. heterogeneity), or None.
    panel: ClassVar[str | None]
    #: The metrics a run records; the first is the default headline metric.
    metrics: ClassVar[tuple[str, ...]]
    #: True: all runs are columns of one problem (one unit of work per algorithm);
    #: False: the units are :meth:`run_groups`.
    batch_runs: ClassVar[bool]

    @property
    def deterministic(self) -> bool:
        """Whether a run has no randomness of its own (no gradient noise): one run then
        gives exact values, and comparisons need no standard error."""
        ...

    def describe(self) -> str:
        """The problem part of a figure title."""
        ...

    def check(self, iterations: int | None) -> None:
        """Cross-field checks (``iterations``: the top-level key); raise ValueError with the fix."""
        ...

    def build(self, *, agents: int, runs: int, seed: int, rank: int | range | None) -> Problem:
        """The problem for ``runs`` columns (data seed ``seed``); ``rank``: only this
        process's agents of the ``agents`` (torchrun): one agent's index, or a ``range``
        of them where each process holds several. None: every agent (the simulator)."""
        ...

    def plan(self, problem: Problem, iterations: int | None, points: int) -> Plan: ...

    def step_size(self, lr: Any, problem: Problem) -> Any:
        """The step size as the algorithm takes it (e.g. epochs turned into steps)."""
        ...

    def columns(self, problem: Problem) -> list[dict[str, Any]]:
        """Labels of each column of the metrics (e.g. the heterogeneity level)."""
        ...

    def memory_bytes(self, *, agents: int, runs: int) -> dict[str, float]:
        """About how many bytes building and running it holds, by part; a run that needs
        more than the available memory is refused before anything is allocated."""
        ...

    def iterate_bytes(self, *, agents: int, runs: int) -> float:
        """Bytes of one iterate of every agent over ``runs`` runs: what each further copy a
        method keeps costs (delayed gossip keeps ``tau`` rounds of its messages)."""
        ...

    def run_groups(self, runs: int, agents: int) -> list[tuple[int, ...]]:
        """Kinds with ``batch_runs = False``: the units of work over runs, groups of
        consecutive run indices, each built and stepped together."""
        ...

    @property
    def forkable(self) -> bool:
        """Kinds with ``batch_runs = False``: whether their units may be computed in forked
        worker processes (``--jobs``), each building its own problem."""
        ...


#: The members only kinds with ``batch_runs = False`` have.
OVER_RUNS = ("run_groups", "forkable")
#: What every kind's section has: the protocol's members (``OVER_RUNS`` only where
#: ``batch_runs`` is False).
MEMBERS = tuple(
    name
    for name in dict.fromkeys([*ProblemSpec.__annotations__, *vars(ProblemSpec)])
    if not name.startswith("_") and name not in OVER_RUNS
)


def missing_members(params: object) -> list[str]:
    """The members of :class:`ProblemSpec` a kind's section lacks (a clear error, not an
    AttributeError in the middle of a run)."""
    needed = MEMBERS if getattr(params, "batch_runs", True) else (*MEMBERS, *OVER_RUNS)
    return [name for name in needed if not hasattr(params, name)]


class ConvexSpec:
    """What the convex kinds share: all runs and panel levels in one stacked problem, built
    by ``problem.paper`` with the section's fields (``*dtype``: torch's, by name),
    ``iterations`` steps recorded on a log grid, metrics per column."""

    panel: ClassVar[str]
    #: The problem class, its name in titles, and the field of its gradient-noise variance.
    problem: ClassVar[Any]
    title: ClassVar[str]
    noise: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]] = ("dist_to_opt", "grad_norm", "opt_gap", "consensus")
    batch_runs: ClassVar[bool] = True

    #: The dimension and dtype of the iterates (fields of each kind's section).
    d: int
    dtype: str

    def levels(self) -> tuple[float, ...]:
        return getattr(self, self.panel)

    def iterate_bytes(self, *, agents: int, runs: int) -> float:
        """One ``(n, columns, d)`` iterate: every agent, run and panel level."""
        width = 4 if self.dtype == "float32" else 8
        return width * agents * runs * len(self.levels()) * self.d

    def check(self, iterations: int | None) -> None:
        if iterations is None:
            raise ValueError("a convex sweep needs 'iterations' (the number of steps)")
        if not self.levels():
            raise ValueError(f"'{self.panel}' must be a non-empty list of numbers (one panel each)")

    @property
    def deterministic(self) -> bool:
        return getattr(self, self.noise) == 0

    def build(self, *, agents: int, runs: int, seed: int, rank: int | range | None) -> Problem:
        if rank is not None:
            raise ValueError(
                f"{type(self).__name__}: a convex sweep simulates every agent in one process; "
                "run it without torchrun"
            )
        fields = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(self).items()}
        for key in ("dtype", "compute_dtype"):
            if fields.get(key) is not None:
                fields[key] = getattr(torch, fields[key])
        return self.problem.paper(n=agents, repetitions=runs, seed=seed, **fields)

    def plan(self, problem: Problem, iterations: int | None, points: int) -> Plan:
        assert iterations is not None  # check() requires it
        return Plan(iterations, tuple(record_steps(iterations, "log", points).tolist()))

    def step_size(self, lr: Any, problem: Problem) -> Any:
        return lr

    def columns(self, problem: Any) -> list[dict[str, Any]]:
        levels = self.levels()
        R = problem.repetitions // len(self.levels())
        return [
            {self.panel: levels[col // R], "zeta2": float(problem.zeta2[col]), "run": col % R}
            for col in range(problem.repetitions)
        ]

    def describe(self) -> str:
        skip = ("dtype", "compute_dtype", self.panel)
        shown = ", ".join(f"{k} = {v}" for k, v in vars(self).items() if k not in skip)
        return f"{self.title} ({shown})"
