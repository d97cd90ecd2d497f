"""DSGD: decentralized SGD in adapt-then-combine form (Lian et al., 2017)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import HyperParams
from decentopt.algorithms.registry import register
from decentopt.updates import FusedUpdate


class DSGDState(NamedTuple):
    x: torch.Tensor
    t: int = 0


@register
@dataclass(frozen=True)
class DSGD(HyperParams):
    """Decentralized SGD, adapt then combine.

    .. math::
        X^{(t+1)} = W\\big(X^{(t)} - \\alpha_t G^{(t)}\\big)

    With heterogeneous data it converges to a neighbourhood of ``x*`` whose
    radius grows with ``alpha^2 zeta^2 / (1 - lambda)^2``.

    Reference: X. Lian et al., "Can decentralized algorithms outperform
    centralized algorithms?", NeurIPS 2017.
    """

    name: ClassVar[str] = "dsgd"
    State: ClassVar[type] = DSGDState
    fused: ClassVar[FusedUpdate] = FusedUpdate("descend")
