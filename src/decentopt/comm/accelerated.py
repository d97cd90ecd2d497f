"""Several gossip rounds per mix, plain or Chebyshev-accelerated, around any communicator.

``MultiRound(comm, rounds=K)`` makes every ``mix`` apply a degree-``K`` polynomial
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
from typing import TYPE_CHECKING, Literal

import torch

from decentopt.comm.base import CommStats, Communicator, Elementwise, map_then_mix
from decentopt.topology import Network

if TYPE_CHECKING:
    from decentopt.compression import Compressor

__all__ = ["MultiRound"]

Acceleration = Literal["none", "chebyshev"]


class MultiRound:
    """``rounds`` gossip rounds of ``comm`` per mix (see the module docstring)."""

    def __init__(
        self, comm: Communicator, rounds: int, acceleration: Acceleration = "chebyshev"
    ) -> None:
        if not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"rounds must be a whole number >= 1; got {rounds!r}")
        if acceleration not in ("none", "chebyshev"):
            raise ValueError(f"acceleration must be 'none' or 'chebyshev'; got {acceleration!r}")
        self.inner, self.rounds, self.acceleration = comm, rounds, acceleration
        if acceleration == "chebyshev" and rounds >= 2 and comm.topology.directed:
            raise ValueError(
                f"Chebyshev acceleration needs a symmetric W; {comm.topology.name} is directed: "
                "use acceleration='none' (W applied round after round)"
            )
        if acceleration == "chebyshev" and rounds >= 2 and comm.topology.period != 1:
            raise ValueError(
                f"Chebyshev acceleration needs one fixed W; {comm.topology.name} changes W every "
                "round: use acceleration='none' (W_t applied round after round)"
            )
        lam = comm.topology.lam
        # below lambda = 0 there is nothing to accelerate (W mixes exactly in one round)
        self._cheb = acceleration == "chebyshev" and rounds >= 2 and lam > 1e-12
        self._inv_lam = 1.0 / lam if self._cheb else 0.0

    @property
    def stats(self) -> CommStats:
        return self.inner.stats

    @property
    def topology(self) -> Network:
        return self.inner.topology

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
        cur = [w.mul_(c / a) for w in self.inner.mix_many(zs)]  # T_1(W/lambda) z / a_1
        for _ in range(k - 1):
            a_next = 2 * c * a - a_prev
            mixed = self.inner.mix_many(cur)
            nxt = [
                w.mul_(2 * c * a / a_next).sub_(p, alpha=a_prev / a_next)
                for w, p in zip(mixed, prev, strict=True)
            ]
            prev, cur, a_prev, a = cur, nxt, a, a_next
        return cur

    def mix_many(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        out = list(zs)
        if not self._cheb:
            for _ in range(self.rounds):
                out = self.inner.mix_many(out)
            return out
        half = self.rounds // 2
        out = self._chebyshev(self._chebyshev(out, half), half)
        return self.inner.mix_many(out) if self.rounds % 2 else out

    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        result = self.mix_many([z])[0]
        if out is None:
            return result
        return out.copy_(result)

    def mix_map(
        self, fn: Elementwise, tensors: Sequence[torch.Tensor], scalars: Sequence[float] = ()
    ) -> tuple[torch.Tensor, ...]:
        return map_then_mix(self, fn, tensors, scalars)

    def _single(self, what: str) -> Communicator:
        if self.rounds != 1:
            raise ValueError(
                f"{what} is one gossip round of messages that cannot be combined into a "
                f"polynomial of W; use mix_rounds = 1 with this method (got {self.rounds})"
            )
        return self.inner

    def mix_compressed(
        self, z: torch.Tensor, compression: str | Compressor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._single("compressed gossip").mix_compressed(z, compression)

    @property
    def slots(self) -> int:
        return self._single("relaying").slots

    def exchange(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return self._single("relaying").exchange(tensors)

    def mean(self, z: torch.Tensor) -> torch.Tensor:
        return self.inner.mean(z)

    def barrier(self, stage: str) -> None:
        self.inner.barrier(stage)
