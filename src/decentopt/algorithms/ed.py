"""ED / D²: Exact Diffusion (Yuan et al., 2019/2020) = D² (Tang et al., 2018)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import HyperParams
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
