"""DmSGD: decentralized momentum SGD (Yu, Jin & Yang, 2019; the EDM paper, eqs. (3)-(4))."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import MomentumHyperParams, check_initial_point, momentum_direction
from decentopt.algorithms.registry import register
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
    uses_momentum: ClassVar[bool] = True
    rounds_per_step: ClassVar[int] = 1

    def init(self, x0: torch.Tensor) -> DmSGDState:
        x0 = check_initial_point(x0, self.name)
        return DmSGDState(x=x0, m=torch.zeros_like(x0))

    def step(self, state: DmSGDState, grad: torch.Tensor, comm: Communicator) -> DmSGDState:
        alpha = self.lr_at(state.t)
        m, direction = momentum_direction(state.m, grad, self)
        x_next = comm.mix(torch.add(state.x, direction, alpha=-alpha))
        return DmSGDState(x=x_next, m=m, t=state.t + 1)
