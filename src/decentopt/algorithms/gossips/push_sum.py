"""Push-sum gossip over column-stochastic graphs (Kempe, Dobra & Gehrke 2003)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from decentopt.algorithms.gossips.base import VALUE, Channel, Fields, Gossip, Sends
from decentopt.communicator import Communicator

__all__ = ["PushSum", "push_weights"]


def push_weights(x0: torch.Tensor) -> torch.Tensor:
    """Push-sum weights ``w = 1``, one per agent, broadcastable against ``x0``."""
    return torch.ones((x0.shape[0],) + (1,) * (x0.ndim - 1), dtype=x0.dtype, device=x0.device)


@dataclass(frozen=True)
class PushSum(Gossip):
    """Push-sum: mixing over a column-stochastic ``P`` (any strongly connected directed
    graph, time-varying ``P_t`` too) with weights that undo its bias.

    Each agent keeps a weight ``w`` (``w^{(0)} = 1``); a value ``Z`` the rule sends is
    pushed as the numerator ``U = w X + (Z - X)`` (``X`` the iterate at the start of the
    step: the rule's change travels unweighted, as in the papers), a sum-tracker ``Y``
    as it is, all in one message with the weights:

    .. math::
        w^+ = P w, \\qquad \\text{mix}(Z) = P\\big(w X + (Z - X)\\big) / w^+,
        \\qquad \\text{mix}(Y) = P Y.

    Column sums of one keep ``sum_i u_i`` and ``sum_i w_i = n``: the de-biased average
    ``sum U / sum w`` moves as the rule's average would under a doubly stochastic ``W``,
    even where ``P^t`` tends to a non-uniform ``pi 1^T``. On a doubly stochastic ``P``
    the weights stay 1 and the mix is ``W Z``. Composed with DmSGD this is SGP (Assran
    et al. 2019), with gradient tracking in one round (``dsgt``, ``atc=False``)
    Push-DIGing (Nedić, Olshevsky & Shi 2017); with other rules it is this library's
    construction, offered for rules that need no symmetric ``W`` (``needs_symmetric``).

    References: D. Kempe, A. Dobra, J. Gehrke, "Gossip-based computation of aggregate
    information", FOCS 2003; M. Assran, N. Loizou, N. Ballas, M. Rabbat, "Stochastic
    gradient push for distributed deep learning", ICML 2019, Algorithm 1.
    """

    name: ClassVar[str] = "push_sum"
    needs: ClassVar[frozenset[str]] = frozenset({"column"})
    agent_fields: ClassVar[tuple[str, ...]] = ("w",)

    def refuses(self, rule: Any) -> str:
        if rule.needs_symmetric:
            return (
                f"{rule.name}'s correction needs a symmetric W; push-sum is for the "
                "column-stochastic W of a directed graph (over a symmetric W it is exact "
                "gossip: leave gossip out)"
            )
        if rule.sends is not None and VALUE in rule.sends[1:]:
            return (
                f"{rule.name} sends a value besides its iterate, which the push-sum weights "
                "cannot de-bias (declare the other tensors 'sum')"
            )
        return super().refuses(rule)

    def init(self, x0: torch.Tensor, sends: Sends) -> Fields:
        return {"w": push_weights(x0)}

    def bind(
        self, fields: Fields, comm: Communicator, x: torch.Tensor, sends: Sends
    ) -> _PushSumChannel:
        return _PushSumChannel(comm, fields, sends, x)


class _PushSumChannel(Channel):
    def __init__(self, comm: Communicator, fields: Fields, sends: Sends, x: torch.Tensor) -> None:
        super().__init__(comm, fields, sends)
        self.x = x

    def round(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        w = self.state["w"]
        kinds = self.sends[: len(zs)]
        sent = [
            torch.add(z, self.x * w - self.x) if kind == VALUE else z
            for z, kind in zip(zs, kinds, strict=True)
        ]
        *mixed, w_next = self.comm.mix_many([*sent, w])
        self.state["w"] = w_next
        return [m / w_next if kind == VALUE else m for m, kind in zip(mixed, kinds, strict=True)]
