"""EDM: Exact Diffusion with Momentum -- the EDM paper's Algorithm 1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import MomentumHyperParams
from decentopt.algorithms.ed import ExactDiffusion
from decentopt.algorithms.registry import register
from decentopt.updates import FusedUpdate


class EDMState(NamedTuple):
    x: torch.Tensor
    psi: torch.Tensor
    m: torch.Tensor
    t: int = 0


@register
@dataclass(frozen=True)
class EDM(ExactDiffusion, MomentumHyperParams):
    """Exact Diffusion with Momentum.

    .. math::
        M^{(t)} &= \\beta M^{(t-1)} + (1 - \\beta) G^{(t)}, \\qquad M^{(-1)} = 0, \\\\
        \\psi^{(t+1)} &= X^{(t)} - \\alpha_t M^{(t)}, \\\\
        \\phi^{(t+1)} &= \\psi^{(t+1)} + X^{(t)} - \\psi^{(t)}, \\qquad \\psi^{(0)} = X^{(0)}, \\\\
        X^{(t+1)} &= W \\phi^{(t+1)}.

    Equivalently ``X(t+2) = W(2X(t+1) - X(t) - alpha M(t+1) + alpha M(t))`` with
    ``X(1) = W(X(0) - alpha M(0))``. The average follows centralized momentum
    SGD exactly, ``xbar(t+1) = xbar(t) - alpha mbar(t)``, and ``beta = 0`` is
    ED/D². The paper's Algorithm 1 writes the momentum as ``v`` and then uses
    ``m``; both denote the same buffer here.

    Reference: "A Bias-Correction Decentralized Stochastic Gradient Algorithm
    with Momentum Acceleration" (EDM), Algorithm 1 and eq. (5).

    Over a time-varying topology it shares ED's instability (:class:`ExactDiffusion`).
    """

    name: ClassVar[str] = "edm"
    State: ClassVar[type] = EDMState

    @property
    def fused(self) -> FusedUpdate:
        return FusedUpdate("edm", ("psi", "m"), ("lr", "beta"), self.nesterov, self.dampening)
