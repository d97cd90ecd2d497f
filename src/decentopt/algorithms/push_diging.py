"""Push-DIGing: gradient tracking with push-sum over directed graphs (Nedić et al. 2017)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import HyperParams, add_scaled, check_initial_point
from decentopt.algorithms.registry import register
from decentopt.algorithms.sgp import push_weights

if TYPE_CHECKING:
    from decentopt.comm.base import Communicator


class PushDIGingState(NamedTuple):
    x: torch.Tensor  # the de-biased iterate u / v, where gradients are taken
    v: torch.Tensor  # push-sum weights, one per agent
    p: torch.Tensor  # P y(t-1) - g(t-1): the tracker before this step's gradient (0 at t = 0)
    t: int = 0


@register
@dataclass(frozen=True)
class PushDIGing(HyperParams):
    """Push-DIGing: a tracker ``y`` of the average gradient, mixed by push-sum.

    .. math::
        U^{(t+1)} &= P\\big(U^{(t)} - \\alpha_t Y^{(t)}\\big), \\qquad
        v^{(t+1)} = P v^{(t)}, \\qquad X^{(t+1)} = U^{(t+1)} / v^{(t+1)}, \\\\
        Y^{(t+1)} &= P Y^{(t)} + G(X^{(t+1)}) - G(X^{(t)}), \\qquad
        Y^{(0)} = G(X^{(0)}),\\ U^{(0)} = X^{(0)},\\ v^{(0)} = 1,

    with ``P`` column-stochastic (directed, possibly time-varying: ``P_t``). The three
    mixed quantities travel in one message per round. The state keeps ``X``, ``v``
    and ``P Y - G``; ``U = X v``. Tracking removes the heterogeneity bias that SGP
    keeps: with exact gradients it converges to the optimum over directed graphs
    (tested). On a doubly stochastic ``P`` (``v = 1``) it is DSGT in the one-round
    form ``atc=False`` (Pu & Nedić's), bit for bit (tested).

    Reference: A. Nedić, A. Olshevsky, W. Shi, "Achieving geometric convergence
    for distributed optimization over time-varying graphs", SIAM J. Optim. 2017
    (Push-DIGing, Algorithm 2); Push-Pull (Pu, Shi, Xu, Nedić, IEEE TAC 2021) is the
    same idea with a row- and a column-stochastic matrix.
    """

    name: ClassVar[str] = "push_diging"
    uses_momentum: ClassVar[bool] = False
    requires: ClassVar[str] = "column"
    agent_fields: ClassVar[tuple[str, ...]] = ("v",)
    rounds_per_step: ClassVar[int] = 1

    def init(self, x0: torch.Tensor) -> PushDIGingState:
        x0 = check_initial_point(x0, self.name)
        return PushDIGingState(x=x0, v=push_weights(x0), p=torch.zeros_like(x0))

    def step(
        self, state: PushDIGingState, grad: torch.Tensor, comm: Communicator
    ) -> PushDIGingState:
        y = state.p + grad
        u = add_scaled(state.x * state.v, y, -self.lr_at(state.t))
        u, v, py = comm.mix_many([u, state.v, y])
        return PushDIGingState(x=u / v, v=v, p=py - grad, t=state.t + 1)
