"""DSGT: decentralized stochastic gradient tracking (Pu & Nedić, 2021)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import HyperParams
from decentopt.algorithms.registry import register

if TYPE_CHECKING:
    from decentopt.comm.base import Communicator


class DSGTState(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    g_prev: torch.Tensor
    #: ``W y`` of the previous step, gossiped together with the iterate when
    #: ``atc=False`` (unused, zero, in the ATC form)
    wy: torch.Tensor
    t: int = 0


def track(
    y: torch.Tensor,
    wy: torch.Tensor,
    grad: torch.Tensor,
    g_prev: torch.Tensor,
    t: int,
    atc: bool,
    comm: Communicator,
) -> torch.Tensor:
    """The tracker ``Y(t)``: ``W(Y + G - G_prev)`` (ATC) or ``W Y + G - G_prev``; ``Y(0) = G(0)``.

    Keeps ``mean(Y) = mean(G)`` exactly for any doubly stochastic ``W``. In the
    second form ``W Y`` was already gossiped at the previous step (``wy``).
    """
    if t == 0:
        return grad
    if atc:
        return comm.mix(torch.add(y, grad).sub_(g_prev))
    return torch.add(wy, grad).sub_(g_prev)


def combine(
    x: torch.Tensor,
    direction: torch.Tensor,
    y: torch.Tensor,
    wy: torch.Tensor,
    alpha: float,
    atc: bool,
    comm: Communicator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``X+ = W(X - alpha D)``; without ATC also the new ``W Y``, packed into the same round."""
    z = torch.add(x, direction, alpha=-alpha)
    if atc:
        return comm.mix(z), wy
    x_next, wy_next = comm.mix_many([z, y])
    return x_next, wy_next


@register
@dataclass(frozen=True)
class DSGT(HyperParams):
    """Gradient tracking.

    .. math::
        X^{(t+1)} &= W\\big(X^{(t)} - \\alpha_t Y^{(t)}\\big), \\\\
        Y^{(t+1)} &= W\\big(Y^{(t)} + G^{(t+1)} - G^{(t)}\\big), \\qquad Y^{(0)} = G^{(0)}.

    The default adapt-then-combine form needs two gossip rounds per iteration
    (the tracker is mixed before the iterate uses it). ``atc=False`` gives Pu &
    Nedić's form ``Y+ = W Y + G+ - G``, whose two messages travel packed in one
    round per iteration.

    Reference: S. Pu, A. Nedić, "Distributed stochastic gradient tracking
    methods", Math. Programming 187 (2021).
    """

    name: ClassVar[str] = "dsgt"
    State: ClassVar[type] = DSGTState

    atc: bool = True

    @property
    def rounds_per_step(self) -> int:
        return 2 if self.atc else 1

    @property  # type: ignore[override]
    def sends(self) -> tuple[str, ...] | None:  # type: ignore[override]
        """Without ATC one round a step carries the iterate and the tracker (a sum); with
        ATC the tracker has a round of its own, which only exact gossip takes."""
        return None if self.atc else ("value", "sum")

    def step(self, state: DSGTState, grad: torch.Tensor, comm: Communicator) -> DSGTState:
        alpha = self.lr_at(state.t)
        y = track(state.y, state.wy, grad, state.g_prev, state.t, self.atc, comm)
        x_next, wy = combine(state.x, y, y, state.wy, alpha, self.atc, comm)
        return DSGTState(x=x_next, y=y, g_prev=grad, wy=wy, t=state.t + 1)
