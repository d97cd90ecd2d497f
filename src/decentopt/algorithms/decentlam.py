"""DecentLaM: decentralized large-batch momentum SGD (Yuan et al., 2021)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from decentopt.algorithms.base import MomentumHyperParams, momentum_direction
from decentopt.algorithms.dmsgd import DmSGDState
from decentopt.algorithms.registry import register
from decentopt.communicator import Communicator

#: DecentLaM keeps DmSGD's state.
DecentLaMState = DmSGDState


@register
@dataclass(frozen=True)
class DecentLaM(MomentumHyperParams):
    """DecentLaM: momentum on the "gossip-corrected" gradient.

    .. math::
        \\tilde G^{(t)} &= \\big(X^{(t)} - W(X^{(t)} - \\alpha_t G^{(t)})\\big) / \\alpha_t, \\\\
        M^{(t+1)} &= \\beta M^{(t)} + (1 - \\beta) \\tilde G^{(t)}, \\\\
        X^{(t+1)} &= X^{(t)} - \\alpha_t M^{(t+1)}, \\qquad M^{(0)} = 0.

    The original paper uses the undampened buffer ``M <- beta M + G~``
    (``dampening=False`` here); the default follows the EDM paper's convention.

    Reference: K. Yuan et al., "DecentLaM: Decentralized momentum SGD for
    large-batch deep training", ICCV 2021.
    """

    name: ClassVar[str] = "decentlam"
    State: ClassVar[type] = DecentLaMState
    needs_symmetric: ClassVar[bool] = True

    def step(self, state: DecentLaMState, grad: torch.Tensor, comm: Communicator) -> DecentLaMState:
        alpha = self.lr_at(state.t)
        x = state.x
        corrected = torch.sub(x, comm.mix(torch.add(x, grad, alpha=-alpha))).div_(alpha)
        m, direction = momentum_direction(state.m, corrected, self)
        return DecentLaMState(x=torch.add(x, direction, alpha=-alpha), m=m, t=state.t + 1)
