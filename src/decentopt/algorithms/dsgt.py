"""DSGT: decentralized stochastic gradient tracking (Pu & Nedić, 2021), and its variants:
DSGT-HB, with heavy-ball momentum on the tracked direction (Gao, Alghunaim & Yuan, 2023);
K-GT, with K local steps (Liu, Lin, Koloskova & Stich, 2024)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch

from decentopt._schema import bounded
from decentopt.algorithms.base import HyperParams, MomentumHyperParams, momentum_direction
from decentopt.algorithms.registry import register
from decentopt.communicator import Communicator


class DSGTState(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    g_prev: torch.Tensor
    #: ``W y`` of the previous step, gossiped together with the iterate when
    #: ``atc=False`` (unused, zero, in the ATC form)
    wy: torch.Tensor
    t: int = 0


@register
@dataclass(frozen=True)
class DSGT(HyperParams):
    """Gradient tracking.

    .. math::
        X^{(t+1)} &= W\\big(X^{(t)} - \\alpha_t Y^{(t)}\\big), \\\\
        Y^{(t+1)} &= W\\big(Y^{(t)} + G^{(t+1)} - G^{(t)}\\big), \\qquad Y^{(0)} = G^{(0)}.

    The default adapt-then-combine form needs two gossip rounds per iteration
    (the tracker is mixed before the iterate uses it). ``atc=False`` gives Pu &
    Nedić's form ``Y+ = W Y + G+ - G``, whose two messages travel packed in one
    round per iteration.

    Reference: S. Pu, A. Nedić, "Distributed stochastic gradient tracking
    methods", Math. Programming 187 (2021).
    """

    name: ClassVar[str] = "dsgt"
    State: ClassVar[type] = DSGTState

    atc: bool = True

    @property
    def rounds_per_step(self) -> int:
        return 2 if self.atc else 1

    @property  # type: ignore[override]
    def sends(self) -> tuple[str, ...] | None:  # type: ignore[override]
        """Without ATC one round a step carries the iterate and the tracker (a sum); with
        ATC the tracker has a round of its own, which only exact gossip takes."""
        return None if self.atc else ("value", "sum")

    def direction(
        self, state: Any, y: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The rule's own new state fields and its direction along the tracker ``y``:
        ``y`` itself here (DSGT-HB's momentum on it there)."""
        return {}, y

    def step(self, state: Any, grad: torch.Tensor, comm: Communicator) -> Any:
        """The tracker ``Y(t)``: ``W(Y + G - G_prev)`` (ATC) or ``W Y + G - G_prev``, with
        ``W Y`` gossiped at the previous step together with the iterate; ``Y(0) = G(0)``.
        It keeps ``mean(Y) = mean(G)`` exactly for any doubly stochastic ``W``."""
        if state.t == 0:
            y = grad
        elif self.atc:
            y = comm.mix(torch.add(state.y, grad).sub_(state.g_prev))
        else:
            y = torch.add(state.wy, grad).sub_(state.g_prev)
        own, direction = self.direction(state, y)
        z = torch.add(state.x, direction, alpha=-self.lr_at(state.t))
        x_next, wy = (comm.mix(z), state.wy) if self.atc else comm.mix_many([z, y])
        return self.State(x=x_next, y=y, g_prev=grad, wy=wy, t=state.t + 1, **own)


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
