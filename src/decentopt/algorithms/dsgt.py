"""DSGT: decentralized stochastic gradient tracking (Pu & Nedić, 2021)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import HyperParams
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
