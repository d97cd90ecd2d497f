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

from decentopt._schema import bounded, check_fields
from decentopt.communicator import Communicator
from decentopt.schedules import LearningRate, lr_at, validate_lr
from decentopt.updates import FusedUpdate, heavy_ball

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
    #: Whether the rule keeps a momentum buffer (``MomentumHyperParams`` says yes).
    uses_momentum: ClassVar[bool]
    #: Whether the method's analysis needs every W positive semi-definite (Assumption 1(3)).
    needs_psd: ClassVar[bool]
    #: What the network must offer (:attr:`decentopt.topology.Topology.offers`): the rule's
    #: own needs (a tree for relaying) and its gossip's (a symmetric W for exact mixing).
    needs: frozenset[str]
    #: State fields with one value per agent (push-sum weights), not one per coordinate.
    agent_fields: tuple[str, ...]
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
    # uses_momentum, rounds_per_step, needs_psd and agent_fields: see :class:`Algorithm`
    uses_momentum: ClassVar[bool] = False
    rounds_per_step: ClassVar[int] = 1
    needs_psd: ClassVar[bool] = False
    #: What the rule itself needs of the network beyond its gossip's needs ("tree").
    requires: ClassVar[frozenset[str]] = frozenset()
    #: What the rule sends in its one gossip round per step, one entry per tensor in the
    #: order of its ``mix_many`` call: ``"value"`` (an estimate the agents agree on) or
    #: ``"sum"`` (a tracker whose sum over agents must be kept). ``None`` for a rule that
    #: mixes in another pattern (several rounds per step): it takes only exact gossip.
    sends: ClassVar[tuple[str, ...] | None] = ("value",)
    #: Whether the rule's correction relies on a symmetric W (push-sum cannot serve it).
    needs_symmetric: ClassVar[bool] = False
    #: Whether the rule combines through ``mix`` calls; a rule that sends a message of its
    #: own per neighbour (RelaySGD's ``exchange``) takes no gossip but the exact one.
    mixes: ClassVar[bool] = True
    agent_fields: ClassVar[tuple[str, ...]] = ()
    #: State fields with a neighbour-slot axis second, ``(n, slots, ...)`` (what RelaySGD's
    #: neighbours relayed): :meth:`Method.init <decentopt.algorithms.Method.init>` sizes it
    #: for the communicator it is given (``comm.slots``), so that a saved state fits it.
    per_neighbour: ClassVar[tuple[str, ...]] = ()
    #: Whether the gradient enters the update only as a step along it (``lr`` times it, through
    #: momentum or a tracker at most): then ``wrap()`` can hand it a base optimizer's step.
    takes_direction: ClassVar[bool] = True
    #: The rule's reference, one line (``decentopt methods`` shows it).
    reference: ClassVar[str] = ""
    #: The fused update its step hands to ``comm.mix_map`` when that is its whole step
    #: (:class:`~decentopt.updates.FusedUpdate`: the kernels run it with the mix, the driver
    #: many steps of it in one call), ``None`` otherwise.
    fused: ClassVar[FusedUpdate | None] = None
    #: Whether agents progress at their own pace (the time model's asynchronous clock).
    asynchronous: ClassVar[bool] = False
    #: Whether the rule takes local steps of its own between rounds (K-GT, LED), and then
    #: communicates every ``local_steps``-th step (its field): then no gossip that skips
    #: rounds (``local``, ``periodic_global``) composes with it.
    takes_local_steps: ClassVar[bool] = False

    @property
    def needs(self) -> frozenset[str]:
        """What the network must offer: the rule's own needs and exact mixing's (symmetric)."""
        return self.requires | frozenset({"symmetric"})

    #: The rule's state, a named tuple ``(x, ..., t)``: the default :meth:`init` starts ``x``
    #: at the initial point, the fields of :attr:`from_x0` at copies of it (Exact Diffusion's
    #: ``psi = x``) and every other field at zero; a rule whose state starts otherwise
    #: defines ``init`` instead.
    State: ClassVar[Any] = None
    from_x0: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        """The step size, then every other field by its annotation and declared bounds."""
        object.__setattr__(self, "lr", validate_lr(self.lr, type(self).__name__))
        check_fields(self)  # every rule names itself

    def init(self, x0: torch.Tensor) -> Any:
        """The state at the initial point ``x0`` (see :attr:`State`)."""
        if self.State is None:
            raise TypeError(f"{type(self).__name__}: define init, or a State named tuple")
        x0 = check_initial_point(x0, self.name)  # type: ignore[attr-defined]
        zero = torch.zeros_like(x0)
        rest = [x0.clone() if f in self.from_x0 else zero for f in self.State._fields[1:-1]]
        return self.State(x0, *rest)

    def step(self, state: Any, grad: torch.Tensor, comm: Communicator) -> Any:
        """The step of a rule whose whole step is its :attr:`fused` update (DSGD, DmSGD,
        EDM): the update of ``x``, the fields it reads and ``grad`` with its scalars
        (``"lr"``: ``lr_at(t)``), through ``comm.mix_map``, which mixes its first output."""
        fused = self.fused
        if fused is None:
            raise TypeError(f"{type(self).__name__}: define step (see docs/extending.md)")
        tensors = (state.x, *(getattr(state, f) for f in fused.reads), grad)
        scalars = [self.lr_at(state.t) if s == "lr" else getattr(self, s) for s in fused.scalars]
        x, *new = comm.mix_map(fused, tensors, scalars)
        return state._replace(x=x, t=state.t + 1, **dict(zip(fused.reads, new, strict=True)))

    def lr_at(self, t: int) -> float:
        """The step size of iteration ``t`` (``lr`` itself, or the schedule's value)."""
        return lr_at(self.lr, t)

    def talks(self, t: int) -> bool:
        """Whether step ``t`` communicates (False on the local steps of a rule that takes
        several per round: K-GT, LED)."""
        every = self.local_steps if self.takes_local_steps else 1  # type: ignore[attr-defined]
        return (t + 1) % every == 0

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

    beta: float = bounded(0.9, minimum=0, below=1, note="the momentum")
    nesterov: bool = False
    dampening: bool = True
    uses_momentum: ClassVar[bool] = True


def momentum_direction(
    m: torch.Tensor, g: torch.Tensor, hp: MomentumHyperParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`heavy_ball` with ``hp``'s ``beta``, ``nesterov`` and ``dampening``."""
    return heavy_ball(m, g, hp.beta, nesterov=hp.nesterov, dampening=hp.dampening)


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
