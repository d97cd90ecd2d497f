"""DmSGD: decentralized momentum SGD (Yu, Jin & Yang, 2019; the EDM paper, eqs. (3)-(4))."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import MomentumHyperParams
from decentopt.algorithms.registry import register
from decentopt.updates import momentum_descend, with_momentum_options

if TYPE_CHECKING:
    from decentopt.comm.base import Communicator


class DmSGDState(NamedTuple):
    x: torch.Tensor
    m: torch.Tensor
    t: int = 0


@register
@dataclass(frozen=True)
class DmSGD(MomentumHyperParams):
    """Decentralized momentum SGD.

    .. math::
        M^{(t+1)} &= \\beta M^{(t)} + (1 - \\beta) G^{(t)}, \\\\
        X^{(t+1)} &= W\\big(X^{(t)} - \\alpha_t M^{(t+1)}\\big), \\qquad M^{(0)} = 0.

    Under heterogeneity its limit error is
    ``O(alpha^2 zeta^2 / ((1 - beta)^2 (1 - lambda)^2))`` (Yuan et al. 2021, Prop. 2).

    Reference: H. Yu, R. Jin, S. Yang, "On the linear speedup analysis of
    communication efficient momentum SGD for distributed non-convex
    optimization", ICML 2019.
    """

    name: ClassVar[str] = "dmsgd"
    State: ClassVar[type] = DmSGDState

    def step(self, state: DmSGDState, grad: torch.Tensor, comm: Communicator) -> DmSGDState:
        update = with_momentum_options(momentum_descend, self.nesterov, self.dampening)
        x_next, m = comm.mix_map(update, (state.x, state.m, grad), (self.lr_at(state.t), self.beta))
        return DmSGDState(x=x_next, m=m, t=state.t + 1)
