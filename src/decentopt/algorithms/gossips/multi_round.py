"""Several gossip rounds per mix, plain or Chebyshev-accelerated: a gossip for every method.

``gossip="multi_round(K)"`` (or :class:`RoundsChannel` ``(comm, K)`` around a
communicator) makes every ``mix`` apply a degree-``K`` polynomial
``P(W)`` through ``K`` rounds of the wrapped communicator (simulated or
torch.distributed), so every algorithm can trade communication for consensus;
rounds and bytes are counted by the wrapped communicator, per round, so
comparisons stay fair per round.

* ``acceleration="none"``: ``P(W) = W^K``.
* ``acceleration="chebyshev"`` (Scaman, Bach, Bubeck, Lee, Massoulié 2017):
  with ``T_k`` the Chebyshev polynomials and ``lambda = ||W - 11^T/n||``,
  ``Q_k(W) = T_k(W / lambda) / T_k(1 / lambda)`` keeps the average (``Q_k(1) = 1``)
  and shrinks every other eigenvalue to at most ``1 / T_k(1 / lambda)``, i.e.
  ``1 - lambda`` grows like ``k^2 (1 - lambda)`` instead of ``k (1 - lambda)``.
  ``Q_k`` alone can have negative eigenvalues, which breaks Assumption 1 (ED,
  EDM and NIDS need ``W >= 0``), so the mix applies
  ``P(W) = W^(K mod 2) Q_{K//2}(W)^2``: symmetric, doubly stochastic, positive
  semi-definite, with ``lambda(P) = 1 / T_{K//2}(1 / lambda)^2`` (times ``lambda``
  for odd ``K``). Departure: Scaman et al. accelerate the dual of the consensus
  constraint with a single ``Q_K``; squaring trades half of the degree for
  Assumption 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from decentopt._schema import bounded
from decentopt.algorithms.gossips.base import Channel, Fields, Gossip, Sends
from decentopt.communicator import Communicator
from decentopt.compression import Compressor

__all__ = ["MultiRound", "RoundsChannel"]

Acceleration = Literal["none", "chebyshev"]


class RoundsChannel(Channel):
    """``rounds`` gossip rounds of ``comm`` per mix (see the module docstring): a
    communicator, usable around any other."""

    one_round: ClassVar[bool] = False

    def __init__(
        self, comm: Communicator, rounds: int, acceleration: Acceleration = "chebyshev"
    ) -> None:
        super().__init__(comm, {})
        checked = MultiRound(rounds, acceleration)  # the gossip's checks of its fields
        self.rounds = checked.rounds
        self.acceleration = checked.acceleration
        offers = comm.topology.offers
        wanted = self.acceleration == "chebyshev" and self.rounds >= 2
        if wanted and "symmetric" not in offers:
            raise ValueError(
                f"Chebyshev acceleration needs a symmetric W; {comm.topology.name} is directed: "
                "use acceleration='none' (W applied round after round)"
            )
        if wanted and "static" not in offers:
            raise ValueError(
                f"Chebyshev acceleration needs one fixed W; {comm.topology.name} changes W every "
                "round: use acceleration='none' (W_t applied round after round)"
            )
        lam = comm.topology.lam if wanted else 0.0
        # below lambda = 0 there is nothing to accelerate (W mixes exactly in one round)
        self._cheb = wanted and lam > 1e-12
        self._inv_lam = 1.0 / lam if self._cheb else 0.0

    @property
    def lam(self) -> float:
        """``||P(W) - 11^T/n||``: the mixing rate of one multi-round mix."""
        lam = self.topology.lam
        if not self._cheb:
            return lam**self.rounds
        half = self.rounds // 2
        value = 1.0 / math.cosh(half * math.acosh(self._inv_lam)) ** 2
        return value * (lam if self.rounds % 2 else 1.0)

    def _chebyshev(self, zs: list[torch.Tensor], k: int) -> list[torch.Tensor]:
        """``Q_k(W) z`` for each z, by the three-term recurrence, normalised at every step."""
        c = self._inv_lam
        a_prev, a = 1.0, c  # T_0(1/lambda), T_1(1/lambda)
        prev = zs
        cur = [w.mul_(c / a) for w in self.comm.mix_many(zs)]  # T_1(W/lambda) z / a_1
        for _ in range(k - 1):
            a_next = 2 * c * a - a_prev
            mixed = self.comm.mix_many(cur)
            nxt = [
                w.mul_(2 * c * a / a_next).sub_(p, alpha=a_prev / a_next)
                for w, p in zip(mixed, prev, strict=True)
            ]
            prev, cur, a_prev, a = cur, nxt, a, a_next
        return cur

    def round(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        out = list(zs)
        if not self._cheb:
            for _ in range(self.rounds):
                out = self.comm.mix_many(out)
            return out
        half = self.rounds // 2
        out = self._chebyshev(self._chebyshev(out, half), half)
        return self.comm.mix_many(out) if self.rounds % 2 else out

    def _single(self, what: str) -> Communicator:
        if self.rounds != 1:
            raise ValueError(
                f"{what} is one gossip round of messages that cannot be combined into a "
                f"polynomial of W; use mix_rounds = 1 with this method (got {self.rounds})"
            )
        return self.comm

    def mix_compressed(
        self, z: torch.Tensor, compression: str | Compressor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._single("compressed gossip").mix_compressed(z, compression)

    @property
    def slots(self) -> int:
        return self._single("relaying").slots

    def exchange(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return self._single("relaying").exchange(tensors)


@dataclass(frozen=True)
class MultiRound(Gossip):
    """``rounds`` gossip rounds per mix, ``P(W) = W^K`` or Chebyshev-accelerated (the module
    docstring): ``multi_round(3)``, ``multi_round(4, acceleration="none")``. Every call of
    the rule is ``rounds`` rounds of the network; any rule takes it."""

    rounds: int = bounded(2, minimum=1)
    acceleration: Literal["none", "chebyshev"] = bounded("chebyshev", one_of=("none", "chebyshev"))

    name: ClassVar[str] = "multi_round"
    one_round: ClassVar[bool] = False

    @property  # type: ignore[misc]  # Chebyshev's polynomial needs one fixed symmetric W
    def needs(self) -> frozenset[str]:  # type: ignore[override]
        if self.acceleration == "chebyshev" and self.rounds >= 2:
            return frozenset({"symmetric", "static"})
        return frozenset({"symmetric"})

    @property  # type: ignore[misc]
    def rounds_per_call(self) -> int:  # type: ignore[override]
        return self.rounds

    def bind(self, fields: Fields, comm: Communicator, x: torch.Tensor, sends: Sends) -> Channel:
        return RoundsChannel(comm, self.rounds, self.acceleration)

    def label(self) -> str:
        return f"multi_round({self.rounds}, acceleration={self.acceleration!r})"
