"""The convex kinds: the paper's Figure 1 (``quadratic``) and Figure 2 (``logistic``)
problems in a run specification, on what they share (:class:`ConvexSpec`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from decentopt._schema import bounded
from decentopt.plan import Plan, record_steps
from decentopt.problems.base import Problem
from decentopt.problems.logistic import Logistic
from decentopt.problems.quadratic import GRAM_BYTES, Quadratic

__all__ = ["ConvexSpec", "LogisticSpec", "QuadraticSpec"]


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
        return getattr(torch, self.dtype).itemsize * agents * runs * len(self.levels()) * self.d

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


@dataclass(frozen=True)
class QuadraticSpec(ConvexSpec):
    """``problem = "quadratic"``: the paper's Figure 1 problem (see :meth:`Quadratic.paper`).

    ``c`` lists the heterogeneity scales, one panel each (``zeta^2 ~ 1/c^2``).
    """

    panel: ClassVar[str] = "c"
    problem: ClassVar[type] = Quadratic
    title: ClassVar[str] = "Quadratic"
    noise: ClassVar[str] = "sigma2"

    d: int = bounded(10, minimum=1)
    p: int = bounded(20, minimum=1)
    sigma2: float = bounded(0.05, minimum=0)
    c: tuple[float, ...] = (1.0,)
    dtype: Literal["float32", "float64"] = "float64"

    def memory_bytes(self, *, agents: int, runs: int) -> dict[str, float]:
        """What building and running it holds, by part (measured within 2x of the peak:
        ``tests/experiments/test_memory.py``)."""
        n = agents
        d = self.d
        p = self.p
        cols = runs * len(self.c)
        w = getattr(torch, self.dtype).itemsize
        gram = n * runs * d * d * w  # the per-agent Gram matrices of x*, all repetitions
        if gram > GRAM_BYTES:
            gram = n * d * d * w  # ... or one repetition at a time
        parts = {
            "A (drawn, and one copy per level)": (runs + cols) * n * p * d * w,
            "Gram matrices for x*": 2 * gram,
            "global Hessian and its factorisations": 2 * cols * d * d * w,
            "iterates, algorithm state and gradients": 10 * n * cols * d * w,
        }
        if p < d:  # the low-memory form keeps no per-agent d x d matrices
            parts["noise factor and p x p Gram matrices"] = n * cols * p * (d + 2 * p) * w
        else:
            parts["Hessians, Cholesky and noise factors, fused gradient"] = 6 * n * cols * d * d * w
        return parts


@dataclass(frozen=True)
class LogisticSpec(ConvexSpec):
    """``problem = "logistic"``: the paper's Figure 2 problem (see :meth:`Logistic.paper`).

    ``sigma_h2`` lists the heterogeneity levels, one panel each.
    """

    panel: ClassVar[str] = "sigma_h2"
    problem: ClassVar[type] = Logistic
    title: ClassVar[str] = "Logistic regression"
    noise: ClassVar[str] = "sigma_s2"

    d: int = bounded(20, minimum=1)
    m: int = bounded(2000, minimum=1)
    sigma_h2: tuple[float, ...] = (1.0,)
    mu: float = bounded(0.01, minimum=0)
    sigma_s2: float = bounded(0.01, minimum=0)
    dtype: Literal["float32", "float64"] = "float64"
    compute_dtype: Literal["float32", "float64"] | None = None

    def memory_bytes(self, *, agents: int, runs: int) -> dict[str, float]:
        """What building and running it holds, by part: the samples (float64, the compute
        copy and a temporary of the Newton solve's), shared by the levels, and the labels
        and margins of every column; iterates, algorithm state and a step's temporaries
        are about ten ``(n, columns, d)`` tensors."""
        cols = runs * len(self.sigma_h2)
        return {
            "samples (three copies)": 3 * 8 * agents * runs * self.m * self.d,
            "labels and margins": 4 * 8 * agents * cols * self.m,
            "iterates and algorithm state": 10 * 8 * agents * cols * self.d,
        }
