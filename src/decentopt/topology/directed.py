"""Directed graphs: column-stochastic mixing for push-sum methods (SGP, Push-DIGing).

Over a directed graph agent ``j`` *sends* to its out-neighbours and cannot hear
back from them, so ``W`` cannot be symmetric. Push-sum methods need only

1. ``w_ij >= 0``, with ``w_ij > 0`` exactly when ``j`` sends to ``i`` (or ``i = j``);
2. ``W`` column-stochastic: ``1^T W = 1^T`` (every agent splits its mass among itself
   and its out-neighbours: nothing is lost or created);
3. ``w_jj > 0`` (every agent keeps some of its own mass);
4. the graph strongly connected (every agent reaches every other along edges),
   for a static graph; for a time-varying one, the union over a period.

:class:`DirectedTopology` checks these and refuses any other matrix with an
:class:`~decentopt.topology.topology.AssumptionError` naming the fix. The rows
need not sum to one: then ``W^t`` tends to ``pi 1^T`` with ``pi`` the Perron
vector of ``W`` (not the uniform average), which push-sum corrects by dividing by
the mixed weights ``W^t 1``.

Builders: :func:`directed_ring`, :func:`directed_exponential` (agent ``i`` sends to
``i + 2^k``), :func:`random_directed` (random out-links over a directed ring, weights
``1/(1 + out-degree)``: column- but not row-stochastic), :func:`from_digraph` (any
adjacency) and the time-varying :func:`directed_one_peer_exponential` (Assran et
al., ICML 2019: at round ``m`` agent ``i`` sends to ``i + 2^m`` only: one message per
agent per round, where the symmetrised version of
:func:`~decentopt.topology.time_varying.one_peer_exponential` needs two).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from decentopt._checks import as_real
from decentopt.perf import one_thread
from decentopt.topology.schedule import GossipRound, TopologySchedule
from decentopt.topology.topology import (
    _TOL,
    AssumptionError,
    Graph,
    agents,
    components,
    links,
    square_weights,
)

__all__ = [
    "DirectedTopology",
    "check_column_stochastic",
    "directed_exponential",
    "directed_one_peer_exponential",
    "directed_ring",
    "from_digraph",
    "random_directed",
]


def check_column_stochastic(W: object, *, tol: float = _TOL) -> np.ndarray:
    """Validate a directed mixing matrix (module docstring) and return it as float64."""
    arr = square_weights(W, tol, "from_digraph")
    col_err = np.abs(arr.sum(axis=0) - 1.0)
    if col_err.max() > tol:
        j = int(np.argmax(col_err))
        raise AssumptionError(
            f"W is not column-stochastic: column {j} (what agent {j} sends, itself included) "
            f"sums to {arr[:, j].sum():.6g}, not 1; divide each column by its sum, or build "
            "W with from_digraph (weights 1/(1 + out-degree))"
        )
    diag = np.diag(arr)
    if np.min(diag) <= 0:
        i = int(np.argmin(diag))
        raise AssumptionError(
            f"w_ii = {diag[i]:.3g} <= 0 for agent {i}: every agent must keep part of its own "
            "mass; apply the lazy transform (W + I) / 2 (topology.lazy())"
        )
    if arr.shape[0] > 1 and components(arr - np.diag(diag), directed=True) != 1:
        raise AssumptionError(
            "the directed graph is not strongly connected: some agent cannot reach another "
            "along the edges, so no consensus is possible; add edges (e.g. a directed ring)"
        )
    return arr


@dataclass(frozen=True, eq=False)
class DirectedTopology(Graph):
    """A column-stochastic ``W`` over a strongly connected directed graph: a sibling of
    :class:`~decentopt.topology.Topology` with its own quantities (no ``lam``: the
    symmetric graphs' ``||W - 11^T/n||`` means nothing here; :attr:`mixing_rate` is
    ``|lambda_2(W)|``, the rate at which ``W^t`` tends to ``pi 1^T``).

    ``w_ij > 0`` means agent ``i`` reads (receives) agent ``j``'s row: ``neighbors[i]``
    are whom ``i`` receives from, ``out_neighbors[j]`` whom ``j`` sends to.
    """

    psd = False
    _check = staticmethod(check_column_stochastic)
    offers = frozenset({"column", "static"})  # type: ignore[assignment]

    @cached_property
    @one_thread()
    def eigenvalues(self) -> np.ndarray:
        """Eigenvalues of ``W`` (complex in general), by increasing modulus."""
        values = np.linalg.eigvals(self.matrix())
        return values[np.argsort(np.abs(values), kind="stable")]

    @cached_property
    def mixing_rate(self) -> float:
        """The second largest eigenvalue modulus: the rate at which ``W^t`` tends to ``pi 1^T``."""
        return float(np.abs(self.eigenvalues[-2])) if self.n > 1 else 0.0

    @cached_property
    def doubly_stochastic(self) -> bool:
        """Whether the rows sum to one too (then ``pi`` is uniform and no weights are needed)."""
        return bool(np.abs(self.matrix().sum(axis=1) - 1).max() <= _TOL)

    def summary(self) -> dict[str, float | int | str]:
        return {
            "name": self.name,
            "n": self.n,
            "directed": "yes (column-stochastic)",
            "row sums 1": str(self.doubly_stochastic),
            "second eigenvalue modulus": self.mixing_rate,
            "max out-degree": self.max_degree,
        }

    def __repr__(self) -> str:
        return f"DirectedTopology({self.name}, n={self.n}, |lambda_2|={self.mixing_rate:.6f})"


def from_digraph(adjacency: object, *, name: str = "digraph") -> DirectedTopology:
    """Column-stochastic weights on a directed graph: ``adjacency[j, i] != 0`` means
    ``j`` sends to ``i``; agent ``j`` keeps and sends ``1 / (1 + out-degree_j)`` each."""
    A = links(adjacency)
    share = 1.0 / (1.0 + A.sum(axis=1))  # per sender j, to each receiver and itself
    return DirectedTopology((A + np.eye(len(A))).T * share[None, :], name=name)


def directed_ring(n: int) -> DirectedTopology:
    """Agent ``i`` sends to ``i + 1 mod n`` only: ``W = (I + P)/2`` (rows sum to one too)."""
    n = agents(n)
    return from_digraph(np.roll(np.eye(n), 1, axis=1), name=f"directed_ring({n})")


def directed_exponential(n: int) -> DirectedTopology:
    """Agent ``i`` sends to ``i + 2^k mod n`` for ``2^k < n``; uniform weights
    ``1/(1 + ceil(log2 n))`` (a static exponential graph, one direction)."""
    n = agents(n)
    shifts = [np.roll(np.eye(n), 2**k, axis=1) for k in range(math.ceil(math.log2(n)))]
    return from_digraph(sum(shifts, np.zeros((n, n))), name=f"directed_exponential({n})")


def random_directed(n: int, p: float = 0.2, seed: int = 0) -> DirectedTopology:
    """A directed ring (for strong connectivity) plus every other link ``j -> i`` with
    probability ``p``; weights ``1/(1 + out-degree)``: column- but not row-stochastic."""
    n = agents(n)
    p = as_real(p, "random_directed: p")
    if not 0 <= p <= 1:
        raise ValueError(f"random_directed: p is a probability in [0, 1]; got {p}")
    rng = np.random.default_rng(seed)
    A = (rng.random((n, n)) < p) + np.roll(np.eye(n), 1, axis=1)  # from_digraph: A != 0
    return from_digraph(A, name=f"random_directed({n}, p={p:g})")


def directed_one_peer_exponential(n: int) -> TopologySchedule:
    """Round ``m``: agent ``i`` sends to ``i + 2^m mod n`` (``m`` cycling through
    ``0 .. ceil(log2 n) - 1``) and keeps half: ``W_t = (I + P_m)/2``, one message per agent
    per round. For ``n`` a power of two the product over a period is the exact average."""
    n = agents(n)
    idx = np.arange(n)
    rounds = tuple(  # round m: i sends to (receiver) i + 2^m
        GossipRound.from_entries(n, (idx + 2**m) % n, idx, np.full(n, 0.5))
        for m in range(max(1, math.ceil(math.log2(n))))  # n = 1: one round, W = I
    )
    return TopologySchedule(n, f"directed_one_peer_exponential({n})", rounds, directed=True)
