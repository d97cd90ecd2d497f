"""The one problem interface, and the interface of a problem *kind* in a run specification.

A :class:`Problem` keeps the iterates of its agents stacked agent-first: ``(n, R, d)``
for the convex problems (``R`` independent repetitions folded in, so mixing is
one GEMM over ``(n, R*d)``), ``(n, P)`` for a neural network. The loop
(:func:`decentopt.driver.run_loop`) asks it for stochastic gradients (and
mini-batch losses, where there are any) at a stack, and for metrics, one value
per column (repetition).

A :class:`ProblemSpec` is one section of a run specification: the frozen
dataclass read from ``[problem_params]``, which builds the problem and says how
long a run is and where it is recorded. Adding a kind is one file with such a
class plus one line in :data:`decentopt.problems.KINDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from decentopt.comm.base import Communicator

__all__ = ["ConvexSpec", "Plan", "Problem", "ProblemSpec", "StackedProblem", "StatelessProblem"]


@runtime_checkable
class Problem(Protocol):
    """Stochastic gradients (and losses) at stacked iterates, metrics, optimum where known."""

    n: int
    dim: int
    dtype: torch.dtype
    #: The exact minimiser of f = mean_i f_i per column, ``(R, d)``; None if unknown.
    x_star: torch.Tensor | None

    def initial_point(self) -> torch.Tensor:
        """The default starting stack."""
        ...

    def gradient_and_loss(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Stochastic gradients of every agent at its own iterate (``x``'s shape) and
        each agent's mini-batch loss ``(n,)``, or None where the loss is not sampled."""
        ...

    def metrics(self, x: torch.Tensor, comm: Communicator | None = None) -> dict[str, Any]:
        """Named metrics of a stack, one value per column; averages across ranks go
        through ``comm.mean`` when the stack holds only some agents."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must hold to resume the problem's sampling exactly."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class StackedProblem(Protocol):
    """What :func:`decentopt.simulate` needs: all agents and repetitions as ``(n, R, d)``."""

    n: int
    repetitions: int
    dim: int
    dtype: torch.dtype
    x_star: torch.Tensor | None

    def gradient(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Stochastic gradients of every agent at its own iterate, shape ``(n, R, d)``."""
        ...

    def metrics(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named metrics of a stack, each of shape ``(R,)``."""
        ...

    def initial_point(self) -> torch.Tensor: ...


class StatelessProblem:
    """Defaults for problems whose noise comes from the generator alone (no loss sampled)."""

    def gradient(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def gradient_and_loss(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, None]:
        return self.gradient(x, generator), None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@dataclass(frozen=True)
class Plan:
    """How long a run is: its steps, the steps it records, and its epoch (if any)."""

    iterations: int
    record: tuple[int, ...]
    #: steps per epoch: losses are averaged and checkpoints written per epoch
    period: int | None = None


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

    def describe(self) -> str:
        """The problem part of a figure title."""
        ...

    def check(self, iterations: int | None) -> None:
        """Cross-field checks (``iterations``: the top-level key); raise ValueError with the fix."""
        ...

    def build(self, *, agents: int, runs: int, seed: int, rank: int | None) -> Problem:
        """The problem for ``runs`` columns (data seed ``seed``); ``rank``: one agent only."""
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

    def run_groups(self, runs: int, agents: int) -> list[tuple[int, ...]]:
        """Kinds with ``batch_runs = False``: the units of work over runs, groups of
        consecutive run indices, each built and stepped together."""
        ...


class ConvexSpec:
    """What the convex kinds share: all runs and panel levels in one stacked problem,
    ``iterations`` steps recorded on a log grid, metrics per column."""

    panel: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]] = ("dist_to_opt", "grad_norm", "opt_gap", "consensus")
    batch_runs: ClassVar[bool] = True

    def levels(self) -> tuple[float, ...]:
        return getattr(self, self.panel)

    @staticmethod
    def state_bytes(agents: int, columns: int, d: int) -> float:
        """Iterates and algorithm state: about six float64 ``(n, columns, d)`` tensors."""
        return 6 * 8 * agents * columns * d

    def check(self, iterations: int | None) -> None:
        if iterations is None:
            raise ValueError("a convex sweep needs 'iterations' (the number of steps)")
        if not self.levels():
            raise ValueError(f"'{self.panel}' must be a non-empty list of numbers (one panel each)")

    def refuse_rank(self, rank: int | None) -> None:
        if rank is not None:
            raise ValueError(
                f"{type(self).__name__}: a convex sweep simulates every agent in one process; "
                "run it without torchrun"
            )

    def plan(self, problem: Problem, iterations: int | None, points: int) -> Plan:
        from decentopt.driver import record_steps

        assert iterations is not None  # check() requires it
        return Plan(iterations, tuple(record_steps(iterations, "log", points).tolist()))

    def step_size(self, lr: Any, problem: Problem) -> Any:
        return lr

    def columns(self, problem: Any) -> list[dict[str, Any]]:
        levels, R = self.levels(), problem.repetitions // len(self.levels())
        return [
            {self.panel: levels[col // R], "zeta2": float(problem.zeta2[col]), "run": col % R}
            for col in range(problem.repetitions)
        ]

    def describe_params(self, skip: tuple[str, ...] = ("dtype", "compute_dtype")) -> str:
        return ", ".join(
            f"{k} = {v}" for k, v in vars(self).items() if k not in (*skip, self.panel)
        )
