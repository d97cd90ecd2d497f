"""Shared pieces of the algorithms: the protocol, hyper-parameter bases, momentum.

An algorithm is a frozen dataclass of hyper-parameters with pure
``init(x0) -> state`` and ``step(state, grad, comm) -> state``. ``grad`` is the
stochastic gradient evaluated at ``state.x``; all tensors are agent-first
``(n, ...)`` and only :meth:`Communicator.mix` crosses agents.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import numpy as np
import torch

from decentopt._checks import as_real
from decentopt.schedules import LearningRate, lr_at, validate_lr

if TYPE_CHECKING:
    from decentopt.comm.base import Communicator

__all__ = [
    "Algorithm",
    "AlgorithmState",
    "HyperParams",
    "MomentumHyperParams",
    "Scalar",
    "add_scaled",
    "check_initial_point",
    "check_network",
    "heavy_ball",
    "interpolate",
    "momentum_direction",
    "with_momentum_options",
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
    #: The graphs it runs on: "symmetric" (Assumption 1), "column" (any column-stochastic W,
    #: directed graphs included: push-sum) or "tree" (a static tree: relaying).
    requires: ClassVar[str]
    #: State fields with one value per agent (push-sum weights), not one per coordinate.
    agent_fields: ClassVar[tuple[str, ...]]
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
    #: The graphs the method runs on (see :class:`Algorithm`): symmetric W by default.
    requires: ClassVar[str] = "symmetric"
    #: State fields with one value per agent rather than per coordinate.
    agent_fields: ClassVar[tuple[str, ...]] = ()

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
        for switch in ("nesterov", "dampening"):
            if not isinstance(getattr(self, switch), bool | np.bool_):
                raise TypeError(
                    f"{type(self).__name__}: {switch} must be true or false; got "
                    f"{getattr(self, switch)!r}"
                )
            object.__setattr__(self, switch, bool(getattr(self, switch)))
        if not 0 <= self.beta < 1:
            raise ValueError(
                f"{type(self).__name__}: momentum beta must be in [0, 1); got {self.beta}"
            )


#: A scalar of an elementwise update: a Python float, or a 0-d tensor when the
#: update is compiled (so that a new step size does not recompile it).
Scalar = float | torch.Tensor


def add_scaled(x: torch.Tensor, y: torch.Tensor, a: Scalar) -> torch.Tensor:
    """``x + a y`` in one operation for a float ``a``, and for a 0-d tensor ``a`` too."""
    if isinstance(a, torch.Tensor):
        return x + a * y
    return torch.add(x, y, alpha=a)


def interpolate(a: torch.Tensor, b: torch.Tensor, w: Scalar) -> torch.Tensor:
    """``a + w (b - a)`` (``torch.lerp``); for a 0-d tensor ``w`` written out, which
    compiles to plainer code than ``lerp``'s two-sided formula."""
    if isinstance(w, torch.Tensor):
        return a + w * (b - a)
    return torch.lerp(a, b, w)


def heavy_ball(
    m: torch.Tensor, g: torch.Tensor, beta: Scalar, *, nesterov: bool, dampening: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One heavy-ball update: returns ``(m_new, direction)``.

    .. math::
        m^+ = \\beta m + s g, \\qquad d = m^+ \\ \\text{or}\\ \\beta m^+ + s g
        \\ (\\text{Nesterov}),\\qquad s = 1 - \\beta \\text{ if dampening else } 1.
    """
    if dampening:
        m_new = interpolate(g, m, beta)  # beta m + (1 - beta) g
        if nesterov:
            return m_new, interpolate(g, m_new, beta)
        return m_new, m_new
    m_new = add_scaled(g, m, beta)
    if nesterov:
        return m_new, add_scaled(g, m_new, beta)
    return m_new, m_new


@functools.cache
def with_momentum_options(
    update: Callable[..., tuple[torch.Tensor, ...]], nesterov: bool, dampening: bool
) -> Callable[..., tuple[torch.Tensor, ...]]:
    """``update`` with its ``nesterov`` and ``dampening`` keywords bound, made once per
    combination (a step should not build it; compiled code is kept per function)."""
    return functools.partial(update, nesterov=nesterov, dampening=dampening)


def momentum_direction(
    m: torch.Tensor, g: torch.Tensor, hp: MomentumHyperParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`heavy_ball` with ``hp``'s ``beta``, ``nesterov`` and ``dampening``."""
    return heavy_ball(m, g, hp.beta, nesterov=hp.nesterov, dampening=hp.dampening)


#: What each requirement admits, for the error that names the fix.
_GRAPHS = {
    "symmetric": "a symmetric doubly stochastic W (Assumption 1)",
    "column": "a column-stochastic W (directed graphs included)",
    "tree": "a static tree (topology.chain, binary_tree, star or spanning_tree(graph))",
}


def check_network(algorithm: Algorithm[Any], network: Any) -> None:
    """Refuse a graph the method cannot run on, naming what it needs and where to find it.

    ``network`` is a :class:`~decentopt.topology.Topology` or schedule (its ``directed``
    and ``is_tree`` attributes are read; this layer imports no topology code).
    """
    need = algorithm.requires
    if need == "symmetric" and network.directed:
        fix = "run sgp or push_diging on directed graphs, or give an undirected graph"
    elif need == "tree" and not network.is_tree:
        fix = "relaying needs exactly one path between any two agents"
    else:
        return
    raise ValueError(f"{algorithm.name} runs on {_GRAPHS[need]}; {network.name} is not one: {fix}")


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
