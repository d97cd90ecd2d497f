"""Momentum Tracking (Takezawa, Bao, Niwa, Sato, Yamada, TMLR 2023)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import MomentumHyperParams, momentum_direction
from decentopt.algorithms.registry import register
from decentopt.communicator import Communicator


class MTState(NamedTuple):
    x: torch.Tensor
    d: torch.Tensor  # the tracked direction
    m: torch.Tensor  # each agent's own momentum buffer
    q: torch.Tensor  # each agent's own direction (m, or the Nesterov direction)
    t: int = 0


@register
@dataclass(frozen=True)
class MomentumTracking(MomentumHyperParams):
    """Momentum Tracking: gradient tracking applied to each agent's momentum.

    .. math::
        M^{(t)} &= \\beta M^{(t-1)} + s\\, G^{(t)}, \\qquad
            M^{(-1)} = s\\, \\frac{G^{(0)} - \\bar G^{(0)}}{1 - \\beta}, \\\\
        D^{(t)} &= W D^{(t-1)} + M^{(t)} - M^{(t-1)}, \\qquad
            D^{(0)} = \\bar M^{(0)} = s\\, \\bar G^{(0)}, \\\\
        X^{(t+1)} &= W X^{(t)} - \\alpha_t D^{(t)},

    with ``s = 1 - beta`` (dampened, default) or 1; with ``nesterov=True`` ``D``
    tracks ``beta M + s G`` instead of ``M``. ``D`` tracks the average
    momentum: ``dbar = mbar``, so the agents' average follows centralized
    heavy-ball exactly, ``xbar+ = xbar - alpha mbar``, whatever the heterogeneity.
    ``W X`` and ``W D`` travel packed in one gossip round; ``Gbar(0)`` is one
    exact average (``comm.mean``, an all-reduce under torch.distributed) at the
    first step, as in the authors' code.

    Written from the authors' public code (``optimizer/momentum_tracking_optimizer.py``
    of github.com/yukiTakezawa/MomentumTracking): its ``dual_c`` is ``M - D`` and its
    initialisation the one above. Departures from that code: momentum is dampened
    by default (``dampening=False`` gives the code's ``m <- beta m + g``); the code
    adds a fixed weight decay of 0.001 to every gradient (here weight decay
    belongs to the problem); it mixes with uniform weights ``1 / (deg + 1)`` (here
    any ``W``); it sends ``X`` and ``M - D`` in two exchanges (here one packed round).

    Reference: Y. Takezawa, H. Bao, K. Niwa, R. Sato, M. Yamada, "Momentum
    Tracking: Momentum Acceleration for Decentralized Deep Learning on
    Heterogeneous Data", TMLR 2023.
    """

    name: ClassVar[str] = "mt"
    State: ClassVar[type] = MTState
    needs_symmetric: ClassVar[bool] = True
    sends: ClassVar[tuple[str, ...] | None] = ("value", "sum")

    def step(self, state: MTState, grad: torch.Tensor, comm: Communicator) -> MTState:
        if state.t == 0:
            s = 1 - self.beta if self.dampening else 1.0
            m_prev = (grad - comm.mean(grad)) * (s / (1 - self.beta))  # mean(m_prev) = 0
            m, q = momentum_direction(m_prev, grad, self)
            d = comm.mean(q).expand_as(q).clone()  # every agent starts on the average
            wx = comm.mix(state.x)
        else:
            m, q = momentum_direction(state.m, grad, self)
            wx, wd = comm.mix_many([state.x, state.d])
            d = wd.add_(q).sub_(state.q)
        x_next = wx.sub_(d, alpha=self.lr_at(state.t))
        return MTState(x=x_next, d=d, m=m, q=q, t=state.t + 1)
