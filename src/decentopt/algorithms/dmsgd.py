"""DmSGD: decentralized momentum SGD (Yu, Jin & Yang, 2019; the EDM paper, eqs. (3)-(4))."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import MomentumHyperParams
from decentopt.algorithms.registry import register
from decentopt.updates import FusedUpdate


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

    @property
    def fused(self) -> FusedUpdate:
        return FusedUpdate(
            "momentum_descend", ("m",), ("lr", "beta"), self.nesterov, self.dampening
        )
