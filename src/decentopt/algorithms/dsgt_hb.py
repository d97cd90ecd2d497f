"""DSGT-HB: gradient tracking with heavy-ball momentum (Gao, Alghunaim & Yuan, 2023)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import MomentumHyperParams, momentum_direction
from decentopt.algorithms.dsgt import DSGT
from decentopt.algorithms.registry import register


class DSGTHBState(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    u: torch.Tensor
    g_prev: torch.Tensor
    wy: torch.Tensor  # W y of the previous step (atc=False only)
    t: int = 0


@register
@dataclass(frozen=True)
class DSGTHB(DSGT, MomentumHyperParams):
    """Gradient tracking with heavy-ball momentum on the tracked direction.

    .. math::
        Y^{(t)} &= W\\big(Y^{(t-1)} + G^{(t)} - G^{(t-1)}\\big), \\qquad Y^{(0)} = G^{(0)}, \\\\
        U^{(t)} &= \\beta U^{(t-1)} + (1 - \\beta) Y^{(t)}, \\qquad U^{(-1)} = 0, \\\\
        X^{(t+1)} &= W\\big(X^{(t)} - \\alpha_t U^{(t)}\\big).

    So ``U^(0) = (1 - beta) Y^(0)``. ``atc=False`` tracks with ``W Y + G+ - G``
    and sends its two messages packed in one round per iteration (two with ATC).

    Reference: J. Gao, S. A. Alghunaim, K. Yuan, "Distributed stochastic
    momentum tracking with local updates" / heavy-ball gradient tracking, 2023.
    """

    name: ClassVar[str] = "dsgt_hb"
    State: ClassVar[type] = DSGTHBState

    def direction(
        self, state: DSGTHBState, y: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        u, direction = momentum_direction(state.u, y, self)
        return {"u": u}, direction
