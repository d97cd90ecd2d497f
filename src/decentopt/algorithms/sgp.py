"""SGP: Stochastic Gradient Push, push-sum SGD over directed graphs (Assran et al., 2019)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import (
    MomentumHyperParams,
    add_scaled,
    check_initial_point,
    momentum_direction,
)
from decentopt.algorithms.registry import register

if TYPE_CHECKING:
    from decentopt.comm.base import Communicator


class SGPState(NamedTuple):
    x: torch.Tensor  # the de-biased iterate z = u / w, where gradients are taken
    w: torch.Tensor  # push-sum weights, one per agent (shape (n, 1, ...))
    m: torch.Tensor
    t: int = 0


def push_weights(x0: torch.Tensor) -> torch.Tensor:
    """Push-sum weights ``w = 1``, one per agent, broadcastable against ``x0``."""
    return torch.ones((x0.shape[0],) + (1,) * (x0.ndim - 1), dtype=x0.dtype, device=x0.device)


@register
@dataclass(frozen=True)
class SGP(MomentumHyperParams):
    """Stochastic Gradient Push: push-sum gossip of the numerators ``u`` and weights ``w``.

    .. math::
        M^{(t)} &= \\beta M^{(t-1)} + (1 - \\beta) G(Z^{(t)}), \\\\
        U^{(t+1)} &= P\\big(U^{(t)} - \\alpha_t M^{(t)}\\big), \\qquad
        w^{(t+1)} = P w^{(t)}, \\qquad U^{(0)} = X^{(0)},\\ w^{(0)} = 1, \\\\
        Z^{(t+1)} &= U^{(t+1)} / w^{(t+1)},

    with ``P`` column-stochastic (any directed graph, strongly connected; time-varying
    ``P_t`` too). ``U`` and ``w`` travel in one message. The state keeps
    ``Z`` (as ``x``) and ``w``; ``U = Z w``. Column sums of one keep ``sum_i u_i`` and
    ``sum_i w_i = n``, so the de-biased average ``sum u / sum w`` moves exactly as
    centralized (momentum) SGD on the agents' gradients, even where ``P^t`` tends to a
    non-uniform ``pi 1^T`` (tested). On a doubly stochastic ``P`` the weights stay 1
    and SGP is DmSGD (``beta = 0``: DSGD), bit for bit (tested).

    Reference: M. Assran, N. Loizou, N. Ballas, M. Rabbat, "Stochastic gradient push
    for distributed deep learning", ICML 2019, Algorithm 1 (``tau = 0``: no overlap);
    their experiments add Nesterov momentum (``nesterov=True`` here).
    """

    name: ClassVar[str] = "sgp"
    uses_momentum: ClassVar[bool] = True
    requires: ClassVar[str] = "column"
    agent_fields: ClassVar[tuple[str, ...]] = ("w",)
    rounds_per_step: ClassVar[int] = 1

    def init(self, x0: torch.Tensor) -> SGPState:
        x0 = check_initial_point(x0, self.name)
        return SGPState(x=x0, w=push_weights(x0), m=torch.zeros_like(x0))

    def step(self, state: SGPState, grad: torch.Tensor, comm: Communicator) -> SGPState:
        m, direction = momentum_direction(state.m, grad, self)
        u = add_scaled(state.x * state.w, direction, -self.lr_at(state.t))
        u, w = comm.mix_many([u, state.w])
        return SGPState(x=u / w, w=w, m=m, t=state.t + 1)
