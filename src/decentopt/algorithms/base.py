"""Shared pieces of the algorithms: the protocol, hyper-parameter bases, momentum.

An algorithm is a frozen dataclass of hyper-parameters with pure
``init(x0) -> state`` and ``step(state, grad, comm) -> state``. ``grad`` is the
stochastic gradient evaluated at ``state.x``; all tensors are agent-first
``(n, ...)`` and only :meth:`Communicator.mix` crosses agents.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import torch

from decentopt._checks import as_real
from decentopt.comm.base import Communicator
from decentopt.schedules import LearningRate, lr_at, validate_lr

__all__ = [
    "Algorithm",
    "AlgorithmState",
    "HyperParams",
    "MomentumHyperParams",
    "check_initial_point",
    "momentum_direction",
]


class AlgorithmState(Protocol):
    """Every state exposes the iterate ``x`` and the iteration counter ``t``."""

    @property
    def x(self) -> torch.Tensor: ...

    @property
    def t(self) -> int: ...

    def _replace(self, **kwargs: object) -> AlgorithmState: ...


S = TypeVar("S", bound=AlgorithmState)


class Algorithm(Protocol[S]):
    """What the simulator, the distributed backend and the optimizer wrapper use."""

    name: ClassVar[str]
    uses_momentum: ClassVar[bool]
    #: Whether the method's analysis needs every W positive semi-definite (Assumption 1(3)).
    needs_psd: ClassVar[bool]
    #: Gossip rounds per iteration (after the first), for fair comparisons.
    rounds_per_step: int
    #: The step size: a float or a schedule ``t -> float``.
    lr: LearningRate

    def lr_at(self, t: int) -> float: ...

    def init(self, x0: torch.Tensor) -> S: ...

    def step(self, state: S, grad: torch.Tensor, comm: Communicator) -> S: ...


H = TypeVar("H", bound="HyperParams")


@dataclass(frozen=True)
class HyperParams:
    """Step size ``lr``: a positive float or a schedule ``t -> float``."""

    lr: LearningRate = 0.05
    #: Whether the method's analysis needs W positive semi-definite (Assumption 1(3)).
    needs_psd: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", validate_lr(self.lr, type(self).__name__))

    def lr_at(self, t: int) -> float:
        """The step size of iteration ``t`` (``lr`` itself, or the schedule's value)."""
        return lr_at(self.lr, t)

    def with_hyperparams(self: H, **changes: Any) -> H:
        """A copy with some hyper-parameters changed (validated as at construction).

        This is the one path by which wrappers (the optimizer's parameter groups
        and learning-rate schedulers) change an algorithm's step size or momentum.
        """
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class MomentumHyperParams(HyperParams):
    """Adds heavy-ball momentum ``beta`` with ``dampening`` and ``nesterov`` switches.

    With ``dampening=True`` (the EDM paper's convention, default) the buffer is
    ``m <- beta m + (1 - beta) g``, so ``lr`` is the effective step of every
    method; ``dampening=False`` gives PyTorch's ``m <- beta m + g``. With
    ``nesterov=True`` the direction is ``beta m_new + s g`` instead of ``m_new``
    (``s = 1 - beta`` or 1).
    """

    beta: float = 0.9
    nesterov: bool = False
    dampening: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "beta", as_real(self.beta, f"{type(self).__name__}: beta"))
        if not 0 <= self.beta < 1:
            raise ValueError(
                f"{type(self).__name__}: momentum beta must be in [0, 1); got {self.beta}"
            )


def momentum_direction(
    m: torch.Tensor, g: torch.Tensor, hp: MomentumHyperParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """One heavy-ball update: returns ``(m_new, direction)``.

    .. math::
        m^+ = \\beta m + s g, \\qquad d = m^+ \\ \\text{or}\\ \\beta m^+ + s g
        \\ (\\text{Nesterov}),\\qquad s = 1 - \\beta \\text{ if dampening else } 1.
    """
    if hp.dampening:
        m_new = torch.lerp(g, m, hp.beta)  # beta m + (1 - beta) g
        if hp.nesterov:
            return m_new, torch.lerp(g, m_new, hp.beta)
        return m_new, m_new
    m_new = torch.add(g, m, alpha=hp.beta)
    if hp.nesterov:
        return m_new, torch.add(g, m_new, alpha=hp.beta)
    return m_new, m_new


def check_initial_point(x0: torch.Tensor, owner: str) -> torch.Tensor:
    """Reject a non-tensor, integer or non-finite initial point."""
    if not isinstance(x0, torch.Tensor):
        raise TypeError(
            f"{owner}: the initial point must be a torch.Tensor; got {type(x0).__name__}"
        )
    if not x0.is_floating_point():
        raise TypeError(f"{owner}: the initial point must be floating point; got {x0.dtype}")
    if x0.ndim < 1:
        raise ValueError(f"{owner}: the initial point must be agent-first (n, ...); got a scalar")
    if not bool(torch.isfinite(x0).all()):
        raise ValueError(f"{owner}: the initial point contains NaN or inf entries")
    return x0
