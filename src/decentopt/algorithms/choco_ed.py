"""Compressed Exact Diffusion: ED's bias-corrected step with CHOCO-gossip in place of the mix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import HyperParams, check_initial_point
from decentopt.algorithms.choco_dsgd import CompressedGossip, public_copies
from decentopt.algorithms.ed import correct
from decentopt.algorithms.registry import register

if TYPE_CHECKING:
    from decentopt.comm.base import Communicator


class ChocoEDState(NamedTuple):
    x: torch.Tensor
    psi: torch.Tensor
    x_hat: torch.Tensor
    s: torch.Tensor
    t: int = 0


@register
@dataclass(frozen=True)
class ChocoED(CompressedGossip, HyperParams):
    """Exact Diffusion whose combine step ``X = W phi`` is one round of CHOCO-gossip.

    .. math::
        \\psi^{(t+1)} &= X^{(t)} - \\alpha_t G^{(t)}, \\qquad
        \\phi^{(t+1)} = \\psi^{(t+1)} + X^{(t)} - \\psi^{(t)}, \\\\
        Q^{(t)} &= \\mathcal{Q}\\big(\\phi^{(t+1)} - \\hat X^{(t)}\\big), \\quad
        \\hat X^{(t+1)} = \\hat X^{(t)} + Q^{(t)}, \\quad S^{(t+1)} = S^{(t)} + W Q^{(t)}, \\\\
        X^{(t+1)} &= \\phi^{(t+1)} + \\gamma \\big(S^{(t+1)} - \\hat X^{(t+1)}\\big).

    A construction of this library, :class:`~decentopt.algorithms.choco_edm.ChocoEDM`
    with ``beta = 0`` (see its docstring): ``compression="none"`` with ``gamma = 1`` is
    ED; the average follows SGD exactly for any compression.

    References: K. Yuan et al., IEEE TSP 2019 (ED); A. Koloskova, S. U. Stich,
    M. Jaggi, ICML 2019 (CHOCO-gossip).
    """

    name: ClassVar[str] = "choco_ed"
    needs_psd: ClassVar[bool] = True
    uses_momentum: ClassVar[bool] = False
    rounds_per_step: ClassVar[int] = 1

    def init(self, x0: torch.Tensor) -> ChocoEDState:
        x0 = check_initial_point(x0, self.name)
        x_hat, s = public_copies(x0)
        return ChocoEDState(x=x0, psi=x0.clone(), x_hat=x_hat, s=s)

    def step(self, state: ChocoEDState, grad: torch.Tensor, comm: Communicator) -> ChocoEDState:
        phi, psi = correct(state.x, state.psi, grad, self.lr_at(state.t))
        x, x_hat, s = self.gossip(phi, state.x_hat, state.s, comm)  # type: ignore[arg-type]
        return ChocoEDState(x=x, psi=psi, x_hat=x_hat, s=s, t=state.t + 1)
