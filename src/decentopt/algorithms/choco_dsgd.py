"""CHOCO-SGD: decentralized SGD with compressed, error-compensated gossip (Koloskova+ 2019)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import torch

from decentopt._checks import as_real
from decentopt.algorithms.base import HyperParams, add_scaled, check_initial_point
from decentopt.algorithms.registry import register
from decentopt.compression import Compressor, parse

if TYPE_CHECKING:
    from decentopt.comm.base import Communicator


class ChocoState(NamedTuple):
    x: torch.Tensor
    x_hat: torch.Tensor  # the public copies: what the neighbours know of each agent
    s: torch.Tensor  # sum_j w_ij x_hat_j, kept up to date from the compressed messages
    t: int = 0


def public_copies(x0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero ``(x_hat, s)``, in float64 for a lower-precision iterate (where the device has
    float64): they add up every round's message, and under ED/EDM the rounding errors of
    that sum are integrated a second time by the correction ``X - psi``. In float32 that
    drift showed after a few thousand iterations (EDM's floor of 2e-5 grew to 3e-3 by
    12,000 iterations on Figure 1's problem); in float64 it does not."""
    wide = x0.dtype in (torch.float16, torch.bfloat16, torch.float32) and x0.device.type != "mps"
    zeros = torch.zeros_like(x0, dtype=torch.float64 if wide else x0.dtype)
    return zeros, zeros.clone()


def choco_gossip(
    target: torch.Tensor,
    x_hat: torch.Tensor,
    s: torch.Tensor,
    gamma: float,
    compression: Compressor,
    comm: Communicator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One round of CHOCO-gossip towards consensus on ``target``: ``(x+, x_hat+, s+)``.

    ``q = Q(target - x_hat)`` travels compressed; ``x_hat += q``, ``s += W q`` and
    ``x+ = target + gamma (s - x_hat)``. With ``Q = I`` and ``gamma = 1``, ``x+ = W target``.
    """
    q, wq = comm.mix_compressed((target - x_hat).to(target.dtype), compression)
    x_hat = x_hat + q  # in x_hat's (possibly wider) dtype, as s
    s = s + wq
    return add_scaled(target, (s - x_hat).to(target.dtype), gamma), x_hat, s


@dataclass(frozen=True)
class CompressedGossip:
    """The consensus step ``gamma`` in (0, 1] and the compression operator of a method
    whose combine step is one round of CHOCO-gossip (checked, parsed), and that round."""

    gamma: float = 1.0
    compression: str | Compressor = "none"

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[misc]  # the hyper-parameters' own checks
        owner = self.name  # type: ignore[attr-defined]
        gamma = as_real(self.gamma, f"{owner}: gamma")
        if not 0 < gamma <= 1:
            raise ValueError(f"{owner}: the consensus step gamma must be in (0, 1]; got {gamma}")
        try:
            codec = parse(self.compression)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{owner}: {exc}") from None
        object.__setattr__(self, "gamma", gamma)
        object.__setattr__(self, "compression", codec)

    def gossip(
        self, target: torch.Tensor, x_hat: torch.Tensor, s: torch.Tensor, comm: Communicator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:func:`choco_gossip` with this method's ``gamma`` and operator."""
        codec: Compressor = self.compression  # type: ignore[assignment]  # parsed above
        return choco_gossip(target, x_hat, s, self.gamma, codec, comm)


@register
@dataclass(frozen=True)
class ChocoDSGD(CompressedGossip, HyperParams):
    """CHOCO-SGD: a local SGD step, then CHOCO-gossip with compressed messages.

    .. math::
        X^{(t+\\frac12)} &= X^{(t)} - \\alpha_t G^{(t)}, \\\\
        Q^{(t)} &= \\mathcal{Q}\\big(X^{(t+\\frac12)} - \\hat X^{(t)}\\big), \\qquad
        \\hat X^{(t+1)} = \\hat X^{(t)} + Q^{(t)}, \\\\
        S^{(t+1)} &= S^{(t)} + W Q^{(t)}, \\\\
        X^{(t+1)} &= X^{(t+\\frac12)} + \\gamma \\big(S^{(t+1)} - \\hat X^{(t+1)}\\big),
        \\qquad \\hat X^{(0)} = S^{(0)} = 0.

    ``S = W X_hat`` always (it is updated with ``W Q`` only), so an agent needs its
    neighbours' compressed messages ``Q`` alone. With ``compression="none"`` and
    ``gamma = 1`` this is DSGD (tested). The average follows SGD exactly for any
    compression (``1^T (W - I) = 0``). ``compression``: an operator of
    :mod:`decentopt.compression`, as text (``"top_k(0.1)"``, ``"qsgd(4)"``, ``"sign"``);
    ``gamma``: the consensus step, below 1 for aggressive compression (the paper
    tunes it; 1 with no compression).

    Reference: A. Koloskova, S. U. Stich, M. Jaggi, "Decentralized stochastic
    optimization and gossip algorithms with compressed communication", ICML 2019,
    Algorithm 2.
    """

    name: ClassVar[str] = "choco_dsgd"
    uses_momentum: ClassVar[bool] = False
    rounds_per_step: ClassVar[int] = 1

    def init(self, x0: torch.Tensor) -> ChocoState:
        x0 = check_initial_point(x0, self.name)
        return ChocoState(x0, *public_copies(x0))

    def step(self, state: ChocoState, grad: torch.Tensor, comm: Communicator) -> ChocoState:
        half = add_scaled(state.x, grad, -self.lr_at(state.t))
        x, x_hat, s = self.gossip(half, state.x_hat, state.s, comm)  # type: ignore[arg-type]
        return ChocoState(x=x, x_hat=x_hat, s=s, t=state.t + 1)
