"""The one problem interface.

A :class:`Problem` keeps the iterates of its agents stacked agent-first: ``(n, R, d)``
for the convex problems (``R`` independent repetitions folded in, so mixing is
one GEMM over ``(n, R*d)``), ``(n, P)`` for a neural network. The loop
(:func:`decentopt.driver.run_loop`) asks it for stochastic gradients (and
mini-batch losses, where there are any) at a stack, and for metrics, one value
per column (repetition). How long a run is, what it records and which problem a
run specification builds is experiment policy: :mod:`decentopt.experiments.kinds`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from decentopt.communicator import Communicator

__all__ = ["BlockProblem", "Problem", "StackedProblem", "StatelessProblem", "normal_block"]


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


@runtime_checkable
class BlockProblem(Protocol):
    """A problem whose gradient noise can be drawn for many steps at once (the driver's
    block path, :mod:`decentopt.driver.block`): ``gradient_from(x, terms[s])`` with
    ``terms = noise_terms(draw(steps, generator))`` is what ``steps`` calls of ``gradient``
    return, to rounding, and leaves the generator in the same state."""

    def draw(self, steps: int, generator: torch.Generator) -> torch.Tensor | None:
        """The standard normals of ``steps`` consecutive steps, ``(steps, ...)``; None if
        the gradients are exact."""
        ...

    def noise_terms(self, z: torch.Tensor | None) -> torch.Tensor | None:
        """What each step adds to the exact gradient, ``(steps, *x.shape)``."""
        ...

    def gradient_from(self, x: torch.Tensor, term: torch.Tensor | None) -> torch.Tensor: ...


def normal_block(steps: int, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """``steps`` draws of ``torch.randn(shape)`` as ``(steps, *shape)``, the same
    numbers and generator state as drawing them one by one.

    One draw for all steps where each step's draw is a multiple of 16 numbers: torch's CPU
    sampler fills blocks of 16, so the numbers and the generator's state then match the
    separate draws bit for bit (tests/test_block.py checks it); otherwise step by step.
    """
    numel = int(torch.Size(shape).numel())
    if numel >= 16 and numel % 16 == 0:
        return torch.randn((steps, *shape), generator=generator)
    return torch.stack([torch.randn(shape, generator=generator) for _ in range(steps)])


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


class ConvexProblem(StatelessProblem):
    """What the convex problems share: iterates ``(n, R, d)`` started at zero, the normals of
    a step's gradient noise (one step, or many: :class:`BlockProblem`) and the metrics of a
    stack against the known optimum ``x_star``."""

    #: The shape of one step's standard normals; None when the gradients are exact.
    noise_shape: tuple[int, ...] | None

    def at_average(self, xbar: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(grad f(xbar), f(xbar) - f*)`` at the averages ``xbar`` ``(R, d)``."""
        raise NotImplementedError

    def initial_point(self) -> torch.Tensor:
        return torch.zeros(self.n, self.repetitions, self.dim, dtype=self.dtype)

    def normals(self, generator: torch.Generator) -> torch.Tensor | None:
        """One step's standard normals, drawn in float32 (torch's vectorised sampler, ~6x
        faster than float64) and cast; None when the gradients are exact."""
        shape = self.noise_shape
        return None if shape is None else torch.randn(shape, generator=generator).to(self.dtype)

    def draw(self, steps: int, generator: torch.Generator) -> torch.Tensor | None:
        """The normals of ``steps`` calls of ``gradient``, ``(steps, *noise_shape)``."""
        shape = self.noise_shape
        return None if shape is None else normal_block(steps, shape, generator)

    def metrics(self, x: torch.Tensor, comm: Communicator | None = None) -> dict[str, torch.Tensor]:
        xbar = x.mean(0)  # (R, d)
        grad, gap = self.at_average(xbar)
        return {
            "dist_to_opt": (x - self.x_star).pow(2).sum(-1).mean(0),
            "consensus": (x - xbar).pow(2).sum(-1).mean(0),
            "grad_norm": grad.pow(2).sum(-1),
            "opt_gap": gap,
        }
