"""Problem kinds of run specifications: ``problem = NAME`` -> the dataclass of its section.

:data:`KINDS` maps the ``problem`` of a run specification to the dataclass of its
``[problem_params]`` section (:class:`ProblemSpec`): the frozen dataclass which builds
the problem, says how long a run is and where it is recorded, and estimates its memory.
Adding a kind is one file with such a class plus one call of :func:`register_kind`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from decentopt._registry import Registry
from decentopt.experiments.kinds.convex import ConvexSpec, LogisticSpec, QuadraticSpec
from decentopt.experiments.kinds.neural import NeuralSpec
from decentopt.plan import Plan
from decentopt.problems.base import Problem

__all__ = [
    "KINDS",
    "ConvexSpec",
    "LogisticSpec",
    "NeuralSpec",
    "ProblemSpec",
    "QuadraticSpec",
    "missing_members",
    "register_kind",
]


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


#: Problem kinds of run specifications: ``problem = NAME`` -> its section's dataclass.
KINDS: Registry[type] = Registry(
    "problem kind",
    [("quadratic", QuadraticSpec), ("logistic", LogisticSpec), ("neural", NeuralSpec)],
)


def register_kind(name: str, spec: type) -> type:
    """Make ``problem = name`` in a run specification build problems through ``spec``."""
    return KINDS.add(name, spec)
