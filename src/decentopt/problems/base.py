"""The problem interface used by the simulator.

A convex problem keeps the iterates of ``n`` agents and ``R`` independent
repetitions as one tensor of shape ``(n, R, d)`` (agent axis first, so mixing
is one GEMM over ``(n, R*d)``). It returns stochastic gradients at such a
stack and per-repetition metrics.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

__all__ = ["StackedProblem"]


@runtime_checkable
class StackedProblem(Protocol):
    """A problem whose iterates are an ``(n, R, d)`` stack."""

    n: int
    repetitions: int
    dim: int
    dtype: torch.dtype
    #: The exact minimiser of f = mean_i f_i for each repetition, ``(R, d)``; None if unknown.
    x_star: torch.Tensor | None

    def gradient(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Stochastic gradients of every agent at its own iterate, shape ``(n, R, d)``."""
        ...

    def metrics(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named metrics of a stack, each of shape ``(R,)``."""
        ...

    def initial_point(self) -> torch.Tensor:
        """The default starting stack (zeros)."""
        ...
