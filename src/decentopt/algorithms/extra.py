"""EXTRA: an exact first-order algorithm for decentralized consensus optimization."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import HyperParams
from decentopt.algorithms.registry import register
from decentopt.communicator import Communicator


class EXTRAState(NamedTuple):
    x: torch.Tensor
    x_prev: torch.Tensor
    step_prev: torch.Tensor  # alpha_{t-1} G^{(t-1)}
    t: int = 0


@register
@dataclass(frozen=True)
class EXTRA(HyperParams):
    """EXTRA (Shi, Ling, Wu, Yin 2015) with ``W~ = (I + W) / 2``.

    .. math::
        X^{(1)} &= W X^{(0)} - \\alpha_0 G^{(0)}, \\\\
        X^{(t+1)} &= (I + W) X^{(t)} - \\tilde W X^{(t-1)}
                     - \\big(\\alpha_t G^{(t)} - \\alpha_{t-1} G^{(t-1)}\\big).

    Computed as ``Z = X - X_prev / 2``, ``X+ = Z + W Z - (alpha G - alpha_prev G_prev)``:
    one gossip round per iteration. The paper writes ``alpha (G - G_prev)`` with a
    constant step; storing ``alpha_{t-1} G^{(t-1)}`` keeps the correction exact
    when the step size follows a schedule. Unlike ED/D², the gradient step is not
    mixed, so on the complete graph the agents do not move in lockstep; their
    average follows gradient descent, ``xbar+ = xbar - alpha gbar``.

    Reference: W. Shi, Q. Ling, G. Wu, W. Yin, "EXTRA: An exact first-order
    algorithm for decentralized consensus optimization", SIAM J. Optim. 25(2), 2015.
    """

    name: ClassVar[str] = "extra"
    State: ClassVar[type] = EXTRAState
    from_x0: ClassVar[tuple[str, ...]] = ("x_prev",)
    needs_symmetric: ClassVar[bool] = True

    def step(self, state: EXTRAState, grad: torch.Tensor, comm: Communicator) -> EXTRAState:
        step = grad * self.lr_at(state.t)
        if state.t == 0:
            x_next = comm.mix(state.x).sub_(step)
        else:
            z = torch.add(state.x, state.x_prev, alpha=-0.5)
            x_next = comm.mix(z).add_(z).sub_(step).add_(state.step_prev)
        return EXTRAState(x=x_next, x_prev=state.x, step_prev=step, t=state.t + 1)
