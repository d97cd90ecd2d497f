"""NIDS: network-independent step sizes (Li, Shi, Yan 2019)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from decentopt._schema import bounded
from decentopt.algorithms.ed import EDState, ExactDiffusion
from decentopt.algorithms.registry import register

#: NIDS keeps Exact Diffusion's state.
NIDSState = EDState


@register
@dataclass(frozen=True)
class NIDS(ExactDiffusion):
    """NIDS: Exact Diffusion's recursion over ``W~ = I - c (I - W)``.

    .. math::
        \\psi^{(t+1)} &= X^{(t)} - \\alpha_t G^{(t)}, \\qquad \\psi^{(0)} = X^{(0)}, \\\\
        \\phi^{(t+1)} &= \\psi^{(t+1)} + X^{(t)} - \\psi^{(t)}, \\\\
        X^{(t+1)} &= \\tilde W \\phi^{(t+1)} = (1 - c)\\, \\phi^{(t+1)} + c\\, W \\phi^{(t+1)}.

    Equivalently ``X(t+2) = W~ (2X(t+1) - X(t) - alpha G(t+1) + alpha G(t))``, the
    paper's eq. (5). Relation to ED/D²: NIDS with ``c = 1`` *is* ED/D² (tested);
    ``c = 1/2`` (the default) mixes with the lazy ``(I + W) / 2``, which keeps the
    step-size condition independent of the network for any ``W`` with
    ``lambda_min > -1``. One gossip round per iteration. Departure: the paper's
    first step is ``X(1) = X(0) - alpha G(0)`` without mixing; here ``psi(0) =
    X(0)`` gives ``X(1) = W~ (X(0) - alpha G(0))`` as in ED (same fixed point and
    average dynamics, one round from the start).

    Reference: Z. Li, W. Shi, M. Yan, "A decentralized proximal-gradient method
    with network independent step-sizes and separated convergence rates", IEEE
    TSP 67(17), 2019.
    """

    name: ClassVar[str] = "nids"
    #: a hyper-parameter here, ED's constant 1 there
    c: float = bounded(0.5, above=0, maximum=1)  # type: ignore[misc]
