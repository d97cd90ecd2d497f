"""QG-DSGDm: quasi-global momentum (Lin, Karimireddy, Stich & Jaggi, 2021)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt._schema import bounded
from decentopt.algorithms.base import MomentumHyperParams, momentum_direction
from decentopt.algorithms.registry import register
from decentopt.communicator import Communicator


class QGDSGDmState(NamedTuple):
    x: torch.Tensor
    m_hat: torch.Tensor
    t: int = 0


@register
@dataclass(frozen=True)
class QGDSGDm(MomentumHyperParams):
    """Quasi-global momentum: the buffer tracks the model's global displacement.

    .. math::
        D^{(t)} &= \\beta \\hat M^{(t)} + (1 - \\beta) G^{(t)}, \\\\
        X^{(t+1)} &= W\\big(X^{(t)} - \\alpha_t D^{(t)}\\big), \\\\
        \\hat M^{(t+1)} &= \\mu \\hat M^{(t)} + (1 - \\mu)
            \\big(X^{(t)} - X^{(t+1)}\\big) / \\alpha_t, \\qquad \\hat M^{(0)} = 0.

    ``mu`` defaults to ``beta``. The paper's code uses the undampened heavy-ball
    ``D = beta M^ + G`` with Nesterov (``dampening=False, nesterov=True`` here);
    the defaults follow the EDM paper's convention so that ``lr`` is comparable.

    Reference: T. Lin, S. P. Karimireddy, S. U. Stich, M. Jaggi, "Quasi-global
    momentum: accelerating decentralized deep learning on heterogeneous data",
    ICML 2021.
    """

    name: ClassVar[str] = "qg_dsgdm"
    State: ClassVar[type] = QGDSGDmState

    mu: float | None = bounded(None, minimum=0, below=1)

    def step(self, state: QGDSGDmState, grad: torch.Tensor, comm: Communicator) -> QGDSGDmState:
        alpha = self.lr_at(state.t)
        _, direction = momentum_direction(state.m_hat, grad, self)
        x_next = comm.mix(torch.add(state.x, direction, alpha=-alpha))
        # mu m_hat + (1 - mu) (x - x_next) / alpha, built in one temporary
        mu = self.beta if self.mu is None else self.mu
        m_hat = torch.sub(state.x, x_next).div_(alpha).lerp_(state.m_hat, mu)
        return QGDSGDmState(x=x_next, m_hat=m_hat, t=state.t + 1)
