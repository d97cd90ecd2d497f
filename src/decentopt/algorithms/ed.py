"""ED / D²: Exact Diffusion (Yuan et al., 2019/2020) = D² (Tang et al., 2018), and its variants:
NIDS, its recursion over a lazier ``W`` (Li, Shi, Yan 2019); EDM, Exact Diffusion with
Momentum (the EDM paper's Algorithm 1); LED, Local Exact-Diffusion (Alghunaim, 2023)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt._schema import bounded
from decentopt.algorithms.base import HyperParams, MomentumHyperParams
from decentopt.algorithms.registry import register
from decentopt.communicator import Communicator
from decentopt.updates import FusedUpdate, correct


class EDState(NamedTuple):
    x: torch.Tensor
    psi: torch.Tensor
    t: int = 0


@register
@dataclass(frozen=True)
class ExactDiffusion(HyperParams):
    """Exact Diffusion / D² (adapt, correct, combine).

    .. math::
        \\psi^{(t+1)} &= X^{(t)} - \\alpha_t G^{(t)}, \\\\
        \\phi^{(t+1)} &= \\psi^{(t+1)} + X^{(t)} - \\psi^{(t)}, \\\\
        X^{(t+1)} &= W \\phi^{(t+1)}, \\qquad \\psi^{(0)} = X^{(0)}.

    Equivalently ``X(t+2) = W(2X(t+1) - X(t) - alpha G(t+1) + alpha G(t))``.

    References: K. Yuan, B. Ying, X. Zhao, A. H. Sayed, "Exact diffusion for
    distributed optimization and learning", IEEE TSP 2019; H. Tang et al.,
    "D²: Decentralized training over decentralized data", ICML 2018.

    Over a time-varying topology (``W_t`` per round) the correction, built for one
    fixed W, is unstable: it diverges over one-peer graphs (measured at alpha = 0.05 and 0.005);
    the lazy rounds ``(W_t + I)/2`` converge (docs/topologies.md).
    """

    name: ClassVar[str] = "ed"
    State: ClassVar[type] = EDState
    from_x0: ClassVar[tuple[str, ...]] = ("psi",)
    needs_symmetric: ClassVar[bool] = True
    needs_psd: ClassVar[bool] = True
    #: Mixing with ``W~ = I - c (I - W)``: ``W`` itself here, NIDS's lazier ``W~`` there.
    c: ClassVar[float] = 1.0

    @property
    def fused(self) -> FusedUpdate | None:
        """Exact Diffusion's ``correct`` where it mixes with ``W`` itself (``c = 1``)."""
        return FusedUpdate("correct", ("psi",)) if self.c == 1.0 else None

    def step(self, state: EDState, grad: torch.Tensor, comm: Communicator) -> EDState:
        """``psi+ = x - alpha g``, ``phi = psi+ + x - psi``, ``x+ = W~ phi`` with
        ``W~ = I - c (I - W)`` (``c = 1``: ``W`` itself, through :meth:`Communicator.mix_map`,
        which may fuse the update with the mix). Storing ``psi`` (rather than the
        previous gradient) keeps the correction exact when ``alpha`` changes over time."""
        if self.fused is not None:
            return super().step(state, grad, comm)  # type: ignore[no-any-return]
        phi, psi = correct(state.x, state.psi, grad, self.lr_at(state.t))
        x_next = comm.mix(phi).mul_(self.c).add_(phi, alpha=1 - self.c)
        return state._replace(x=x_next, psi=psi, t=state.t + 1)


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


class LEDState(NamedTuple):
    #: the local iterate ``phi`` (where the gradient of the next step is taken)
    x: torch.Tensor
    #: the dual correction ``y``, in the range of ``I - W``
    y: torch.Tensor
    t: int = 0


@register
@dataclass(frozen=True)
class LED(HyperParams):
    """Local Exact-Diffusion: ``tau`` local steps corrected by ``y``, then one round. For
    the round that starts at ``X^(r)`` (``phi^(0) = X^(r)``):

    .. math::
        \\phi^{(k+1)} &= \\phi^{(k)} - \\alpha G(\\phi^{(k)}) - \\beta Y^{(r)},
        \\quad k < \\tau, \\\\
        X^{(r+1)} &= W \\phi^{(\\tau)}, \\\\
        Y^{(r+1)} &= Y^{(r)} + \\phi^{(\\tau)} - X^{(r+1)}, \\qquad Y^{(0)} = 0.

    ``Y`` sums ``(I - W) phi`` over the rounds, so ``1^T Y = 0``, and at the optimum
    ``beta y_i = -alpha grad f_i(x*)`` cancels the heterogeneity: with exact gradients it
    reaches ``x*`` exactly. With ``tau = 1`` and ``beta = 1`` it is Exact Diffusion
    (``Y = psi - X``; tested). ``dual`` is the paper's ``beta``, ``1 / tau`` by default: the
    correction is applied ``tau`` times a round and accumulated once (at ``beta = 1`` and
    ``tau = 4`` or 8 it diverges on the 16-agent ring, at ``1 / tau`` it reaches ``x*``; a
    choice of this library, the paper leaves ``beta`` to the user). The state's ``x`` is the
    local iterate ``phi``. Like ED it needs a symmetric ``W``.

    Reference: S. A. Alghunaim, "Local Exact-Diffusion for decentralized optimization and
    learning", arXiv:2302.00620 (2023), IEEE TAC (2024).
    """

    local_steps: int = bounded(4, minimum=1, note="tau, the steps per round")
    dual: float | None = bounded(None, above=0, note="beta, the step of the dual correction")

    name: ClassVar[str] = "led"
    State: ClassVar[type] = LEDState
    sends: ClassVar[tuple[str, ...] | None] = None
    needs_symmetric: ClassVar[bool] = True
    needs_psd: ClassVar[bool] = True
    takes_local_steps: ClassVar[bool] = True
    reference: ClassVar[str] = "Alghunaim, arXiv:2302.00620 (2023)"

    def step(self, state: LEDState, grad: torch.Tensor, comm: Communicator) -> LEDState:
        t = state.t
        beta = 1.0 / self.local_steps if self.dual is None else self.dual
        phi = torch.add(state.x, grad, alpha=-self.lr_at(t)).sub_(state.y, alpha=beta)
        if not self.talks(t):
            return LEDState(x=phi, y=state.y, t=t + 1)
        x_next = comm.mix(phi)
        y = torch.add(state.y, phi).sub_(x_next)
        return LEDState(x=x_next, y=y, t=t + 1)
