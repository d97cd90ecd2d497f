"""K-GT: gradient tracking with K local steps (Liu, Lin, Koloskova & Stich, 2024)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt._schema import bounded
from decentopt.algorithms.base import HyperParams
from decentopt.algorithms.registry import register
from decentopt.communicator import Communicator


class KGTState(NamedTuple):
    #: the local iterate ``z`` (where the gradient of the next step is taken)
    x: torch.Tensor
    #: ``x^(r)``, the iterate at the start of the round
    x_round: torch.Tensor
    #: the correction ``c``, whose sum over agents stays zero
    c: torch.Tensor
    t: int = 0


@register
@dataclass(frozen=True)
class KGT(HyperParams):
    """K-GT: ``K`` local steps corrected by ``c``, then one round of the iterate and the
    update ``Delta``. For the round ``r`` that starts at ``X^(r)`` (``Z^(0) = X^(r)``):

    .. math::
        Z^{(k+1)} &= Z^{(k)} - \\eta_c \\big(G(Z^{(k)}) + C^{(r)}\\big), \\quad k < K, \\\\
        \\Delta &= Z^{(K)} - X^{(r)}, \\\\
        X^{(r+1)} &= W\\big(X^{(r)} + \\eta_s \\Delta\\big), \\\\
        C^{(r+1)} &= C^{(r)} + \\frac{1}{K \\eta_c}\\big(\\Delta - W \\Delta\\big),
        \\qquad C^{(0)} = 0.

    ``1^T C`` stays zero, and at the optimum ``c_i = -\\nabla f_i(x^*)`` cancels the
    heterogeneity: with exact gradients it reaches ``x*`` exactly. ``K = 1`` is gradient
    tracking (``Y = G + C``: ``X+ = W(X - eta Y)``, ``Y+ = W Y + G+ - G``, DSGT with
    ``atc=False``; tested). One round every ``K`` steps carries ``X + eta_s Delta`` and
    ``Delta``; the state's ``x`` is the local iterate ``Z``.

    Departures: under a step-size schedule ``K eta_c`` is the sum of the round's step sizes;
    ``C^(0) = 0`` (the paper also allows an initial exchange of gradients).

    Reference: Y. Liu, T. Lin, A. Koloskova, S. U. Stich, "Decentralized gradient tracking
    with local steps", Optimization Methods and Software (2024), Algorithm 1.
    """

    local_steps: int = bounded(4, minimum=1, note="K, the steps per round")
    server_lr: float = bounded(1.0, above=0, note="eta_s, the step along the round's update")

    name: ClassVar[str] = "k_gt"
    State: ClassVar[type] = KGTState
    from_x0: ClassVar[tuple[str, ...]] = ("x_round",)
    sends: ClassVar[tuple[str, ...] | None] = None
    takes_local_steps: ClassVar[bool] = True
    reference: ClassVar[str] = "Liu, Lin, Koloskova & Stich, Optim. Methods Softw. 2024"

    def step(self, state: KGTState, grad: torch.Tensor, comm: Communicator) -> KGTState:
        t = state.t
        z = torch.add(state.x, torch.add(grad, state.c), alpha=-self.lr_at(t))
        if not self.talks(t):
            return state._replace(x=z, t=t + 1)
        delta = z.sub_(state.x_round)
        sent = torch.add(state.x_round, delta, alpha=self.server_lr)
        x_next, w_delta = comm.mix_many([sent, delta])
        span = sum(self.lr_at(s) for s in range(t + 1 - self.local_steps, t + 1))
        c = torch.add(state.c, delta.sub_(w_delta), alpha=1.0 / span)
        return KGTState(x=x_next, x_round=x_next, c=c, t=t + 1)
