"""DSGT: decentralized stochastic gradient tracking (Pu & Nedić, 2021), ATC form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import HyperParams, check_initial_point
from decentopt.algorithms.registry import register
from decentopt.comm.base import Communicator
from decentopt.schedules import lr_at


class DSGTState(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    g_prev: torch.Tensor
    t: int = 0


def track(
    y: torch.Tensor, grad: torch.Tensor, g_prev: torch.Tensor, t: int, atc: bool, comm: Communicator
) -> torch.Tensor:
    """Gradient-tracking update ``Y+ = W(Y + G+ - G)`` (or ``W Y + G+ - G``), ``Y0 = G0``.

    Keeps ``mean(Y) = mean(G)`` exactly for any doubly stochastic ``W``.
    """
    if t == 0:
        return grad
    if atc:
        return comm.mix(torch.add(y, grad).sub_(g_prev))
    return comm.mix(y).add_(grad).sub_(g_prev)


@register
@dataclass(frozen=True)
class DSGT(HyperParams):
    """Gradient tracking, adapt then combine.

    .. math::
        X^{(t+1)} &= W\\big(X^{(t)} - \\alpha_t Y^{(t)}\\big), \\\\
        Y^{(t+1)} &= W\\big(Y^{(t)} + G^{(t+1)} - G^{(t)}\\big), \\qquad Y^{(0)} = G^{(0)}.

    Two gossip rounds per iteration (the tracker must be mixed before the
    iterate uses it). ``atc=False`` gives Pu & Nedić's form
    ``Y+ = W Y + G+ - G``.

    Reference: S. Pu, A. Nedić, "Distributed stochastic gradient tracking
    methods", Math. Programming 187 (2021).
    """

    name: ClassVar[str] = "dsgt"
    uses_momentum: ClassVar[bool] = False
    rounds_per_step: ClassVar[int] = 2

    atc: bool = True

    def init(self, x0: torch.Tensor) -> DSGTState:
        x0 = check_initial_point(x0, "dsgt")
        zeros = torch.zeros_like(x0)
        return DSGTState(x=x0, y=zeros, g_prev=zeros)

    def step(self, state: DSGTState, grad: torch.Tensor, comm: Communicator) -> DSGTState:
        alpha = lr_at(self.lr, state.t)
        y = track(state.y, grad, state.g_prev, state.t, self.atc, comm)
        x_next = comm.mix(torch.add(state.x, y, alpha=-alpha))
        return DSGTState(x=x_next, y=y, g_prev=grad, t=state.t + 1)
