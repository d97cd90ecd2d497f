"""Circulant topologies (rings, exponential graphs) stored by their stencil, not as dense W.

Agent ``i`` mixes with ``i + o mod n`` for a few offsets ``o`` with weights ``c_o``
(``c_o = c_{-o}``), so ``W`` is never built unless asked for: a ring of 100,000
agents costs a few numbers. Its spectrum has a closed form,
``lambda_k = sum_o c_o cos(2 pi o k / n)``, which gives ``lambda``, ``lambda_min``
and the Assumption-1 checks without an eigensolver, and mixing is a sum of
shifted copies of the state (linear in ``n``; see
:class:`~decentopt.comm.SimulatedCommunicator`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cached_property, partial

import numpy as np
import torch
from scipy.linalg import circulant

from decentopt.topology.topology import _TOL, AssumptionError, Topology, lazily

__all__ = [
    "DENSE_LIMIT",
    "CirculantTopology",
    "circulant_from_offsets",
    "find_stencil",
    "reach",
    "spectrum",
]

#: Largest n for which ``W`` is materialised on request (8 * n^2 bytes).
DENSE_LIMIT = 16_384
#: Dense topologies up to this size are checked for being circulant.
CIRCULANT_CHECK_MAX = 1024


#: Above this many agents the spectrum comes from an FFT of W's first row (O(n log n)),
#: not from the sum of cosines (O(n k)): ``exponential(10**7)`` is built in seconds.
FFT_FROM = 1 << 16


def _row(n: int, stencil: Iterable[tuple[int, float]]) -> np.ndarray:
    """``W``'s first row, ``c_o`` at ``o mod n`` (offsets equal mod ``n`` add up)."""
    row = np.zeros(n)
    for o, c in stencil:
        row[int(o) % n] += c
    return row


def spectrum(n: int, stencil: dict[int, float] | tuple[tuple[int, float], ...]) -> np.ndarray:
    """Eigenvalues ``lambda_k = sum_o c_o cos(2 pi o k / n)``, k = 0 .. n-1 (unsorted).

    Above ``FFT_FROM`` agents only ``k = 0 .. n // 2`` (the spectrum is symmetric,
    ``lambda_k = lambda_{n-k}``: every distinct value once), from ``rfft`` of the row.
    """
    items = list(stencil.items() if isinstance(stencil, dict) else stencil)
    if n > FFT_FROM:
        return np.fft.rfft(_row(n, items)).real
    k = np.arange(n)
    return np.asarray(sum(c * np.cos(2 * np.pi * o * k / n) for o, c in items), dtype=float)


class CirculantTopology(Topology):
    """``w_{i, i+o mod n} = stencil[o]`` (offsets equal mod ``n`` add up); checked against
    Assumption 1 in closed form."""

    def __init__(self, n: int, stencil: dict[int, float], name: str) -> None:
        row = _row(n, stencil.items())
        c = {int(o): float(row[o]) for o in np.flatnonzero(row)}
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_n", n)
        object.__setattr__(self, "stencil", tuple(sorted(c.items())))
        if any(w < -_TOL for w in c.values()):
            raise AssumptionError(f"{name}: mixing weights must be >= 0; got {c}")
        if any(abs(w - c.get((n - o) % n, 0.0)) > _TOL for o, w in c.items()):
            raise AssumptionError(f"Assumption 1(2) fails: {name} is not symmetric")
        if abs(sum(c.values()) - 1) > _TOL:
            raise AssumptionError(f"Assumption 1(2) fails: the weights of {name} do not sum to 1")
        if c.get(0, 0.0) <= 0:
            raise AssumptionError(f"Assumption 1(1) fails: w_ii = 0 in {name}; use lazy=True")
        if self.eigenvalues[0] < -_TOL:
            raise AssumptionError(
                f"Assumption 1(3) fails: the smallest eigenvalue of {name} is "
                f"{self.eigenvalues[0]:.3g} < 0; apply the lazy transform (W + I) / 2"
            )
        if n > 1 and math.gcd(n, *[o for o in c if o]) != 1:
            raise AssumptionError(f"the graph of {name} is not connected")

    @property
    def n(self) -> int:
        return self._n

    @cached_property
    def W(self) -> torch.Tensor:  # type: ignore[override]
        """The dense ``(n, n)`` matrix, built on request (refused above ``DENSE_LIMIT``)."""
        if self.n > DENSE_LIMIT:
            raise MemoryError(
                f"{self.name}: a dense W would take {8 * self.n**2 / 2**30:.1f} GiB; use its "
                "stencil, neighbours and spectrum, which need no dense matrix"
            )
        # circulant(c)[i, j] = c[(i - j) mod n]: the first row reversed gives W, in one copy
        return torch.from_numpy(circulant(np.roll(_row(self.n, self.stencil)[::-1], 1)))

    @cached_property
    def _spectrum(self) -> np.ndarray:
        return spectrum(self.n, self.stencil)

    @cached_property
    def eigenvalues(self) -> np.ndarray:
        """Eigenvalues of ``W`` in ascending order (each distinct one once above ``FFT_FROM``
        agents)."""
        return np.sort(self._spectrum)

    @cached_property
    def lam(self) -> float:
        """Largest ``|lambda_k|`` over k != 0 (k = 0 is the eigenvalue 1 of the average)."""
        return float(np.abs(self._spectrum[1:]).max()) if self.n > 1 else 0.0

    @cached_property
    def neighbors(self) -> tuple[tuple[int, ...], ...]:
        offsets = [o for o, _ in self.stencil if o]
        return tuple(tuple(sorted((i + o) % self.n for o in offsets)) for i in range(self.n))

    @property
    def degrees(self) -> np.ndarray:
        return np.full(self.n, len(self.stencil) - 1)

    @property
    def density(self) -> float:
        return len(self.stencil) / self.n

    def lazy(self) -> Topology:
        stencil = {o: w / 2 for o, w in self.stencil}
        stencil[0] = stencil.get(0, 0.0) + 0.5
        return CirculantTopology(self.n, stencil, name=f"lazy({self.name})")


def circulant_from_offsets(n: int, offsets: set[int], name: str, lazy: bool | str) -> Topology:
    """Metropolis weights on a regular circulant graph: ``1 / (1 + degree)`` per edge."""
    offsets = {sign * o % n for o in offsets for sign in (1, -1)} - {0}
    w = 1.0 / (1 + len(offsets))
    stencil = {o: w for o in offsets} | {0: 1.0 - w * len(offsets)}
    halved = {o: c / 2 for o, c in stencil.items()} | {0: stencil[0] / 2 + 0.5}
    return lazily(partial(CirculantTopology, n), stencil, halved, name, lazy)


def find_stencil(topology: object) -> tuple[tuple[int, float], ...] | None:
    """``((o, c_o), ...)`` when ``W[i, j] = c_{(j - i) mod n}`` exactly: the stencil of a
    circulant topology, or of a dense ``W`` that is circulant (rings and exponential
    graphs of fewer than 64 agents are stored dense); ``None`` otherwise."""
    if isinstance(topology, CirculantTopology):
        return topology.stencil
    if type(topology) is not Topology or topology.n > CIRCULANT_CHECK_MAX:
        return None
    W = topology.W.numpy()
    if not np.array_equal(W, circulant(W[0]).T):
        return None
    return tuple((int(o), float(W[0, o])) for o in np.flatnonzero(W[0]))


def reach(stencil: tuple[tuple[int, float], ...], n: int) -> int:
    """The farthest agent a row of the circulant ``W`` reads, either way round."""
    return max((min(o % n, n - o % n) for o, _ in stencil), default=0)
