"""Graph constructors: a graph becomes a mixing matrix, checked against Assumption 1.

Graphs are generated with networkx; weights are Metropolis--Hastings
(Xiao & Boyd 2004; default) or max-degree. Graphs such as an even ring with
Metropolis weights have a negative eigenvalue; with ``lazy="auto"`` (default)
the lazy transform ``(W + I) / 2`` is applied exactly when ``W`` has a
negative eigenvalue, and the topology's name says so.
"""

from __future__ import annotations

import math
from typing import Literal

import networkx as nx
import numpy as np
import scipy.sparse as sp
import torch

from decentopt._checks import as_count, as_real, unknown_name
from decentopt.perf import one_thread
from decentopt.topology.circulant import CirculantTopology, circulant_from_offsets
from decentopt.topology.sparse import SPARSE_FROM, SparseTopology
from decentopt.topology.topology import (
    AssumptionError,
    Topology,
    _as_numpy,
    agents,
    lazily,
    links,
)

#: From this many agents, rings and exponential graphs are stored by their stencil
#: (closed-form spectrum, no dense W); smaller ones stay dense, bit for bit as before.
CIRCULANT_FROM = 64

__all__ = [
    "complete",
    "erdos_renyi",
    "exponential",
    "from_adjacency",
    "from_matrix",
    "from_networkx",
    "grid",
    "hypercube",
    "max_degree_weights",
    "metropolis_hastings_weights",
    "ring",
    "star",
    "torus",
]

Weights = Literal["metropolis", "max_degree"]
Lazy = bool | Literal["auto"]


def _options(weights: object, lazy: object, also: tuple[str, ...] = ()) -> Lazy:
    """``lazy``, once it and ``weights`` (a key of ``_WEIGHTS``, or of ``also``) are valid."""
    if not (lazy is True or lazy is False or lazy == "auto"):
        why = "the lazy transform where W needs it"
        raise ValueError(f"lazy must be true, false or 'auto' ({why}); got {lazy!r}")
    if weights not in _WEIGHTS and weights not in also:
        raise ValueError(unknown_name("weights", weights, [*also, *sorted(_WEIGHTS)]))
    return lazy  # type: ignore[return-value]


def metropolis_hastings_weights(adjacency: np.ndarray) -> np.ndarray:
    """w_ij = 1 / (1 + max(d_i, d_j)) on edges, w_ii = 1 - sum_j w_ij."""
    A = np.asarray(adjacency, dtype=np.float64)
    deg = A.sum(axis=1)
    W = np.where(A > 0, 1.0 / (1.0 + np.maximum.outer(deg, deg)), 0.0)
    np.fill_diagonal(W, 0.0)
    np.fill_diagonal(W, 1.0 - W.sum(axis=1))
    return W


def max_degree_weights(adjacency: np.ndarray) -> np.ndarray:
    """w_ij = 1 / (1 + d_max) on edges, w_ii = 1 - d_i / (1 + d_max)."""
    A = np.asarray(adjacency, dtype=np.float64)
    deg = A.sum(axis=1)
    W = A / (1.0 + deg.max(initial=0.0))
    np.fill_diagonal(W, 1.0 - W.sum(axis=1))
    return W


_WEIGHTS = {"metropolis": metropolis_hastings_weights, "max_degree": max_degree_weights}


@one_thread()
def from_adjacency(
    adjacency: np.ndarray | torch.Tensor,
    *,
    weights: Weights = "metropolis",
    lazy: Lazy = "auto",
    name: str = "graph",
) -> Topology:
    """Mixing matrix of an undirected graph given by its 0/1 adjacency matrix."""
    lazy = _options(weights, lazy)
    A = links(adjacency)
    if not np.array_equal(A, A.T):
        raise ValueError("the adjacency matrix must be symmetric (an undirected graph)")
    W = _WEIGHTS[weights](A)
    return lazily(Topology, W, (W + np.eye(len(W))) / 2, f"{name}[{weights}]", lazy)


def from_networkx(
    graph: nx.Graph, *, weights: Weights = "metropolis", lazy: Lazy = "auto", name: str = "graph"
) -> Topology:
    """Mixing matrix of any undirected networkx graph (nodes taken in sorted order); from
    ``SPARSE_FROM`` nodes the weights are computed on the sparse adjacency (no n x n array)."""
    lazy = _options(weights, lazy)
    if graph.is_directed():
        raise ValueError("the graph must be undirected; use graph.to_undirected()")
    nodes = sorted(graph.nodes())
    if len(nodes) < SPARSE_FROM:
        A = nx.to_numpy_array(graph, nodelist=nodes, weight=None)
        return from_adjacency(A, weights=weights, lazy=lazy, name=name)
    A = nx.to_scipy_sparse_array(graph, nodelist=nodes, weight=None, format="coo")
    keep = A.row != A.col
    rows, cols = A.row[keep], A.col[keep]
    n = A.shape[0]
    deg = np.bincount(rows, minlength=n).astype(np.float64)
    if weights == "metropolis":
        w = 1.0 / (1.0 + np.maximum(deg[rows], deg[cols]))
    else:
        w = np.full(len(rows), 1.0 / (1.0 + deg.max(initial=0.0)))
    off = sp.csr_matrix((w, (rows, cols)), shape=(n, n))
    W = off + sp.diags(1.0 - np.asarray(off.sum(axis=1)).ravel())
    return lazily(SparseTopology, W, (W + sp.identity(n)) / 2, f"{name}[{weights}]", lazy)


def from_matrix(
    W: np.ndarray | torch.Tensor, *, name: str = "custom", lazy: bool = False
) -> Topology:
    """A user-given mixing matrix, checked against Assumption 1.

    With ``lazy=True`` the lazy transform ``(W + I) / 2`` is applied first, which
    repairs a zero diagonal entry or a negative eigenvalue (the error for such a
    ``W`` suggests it).
    """
    arr = _as_numpy(W)
    square = arr.ndim == 2 and arr.shape[0] == arr.shape[1]  # else Topology says what is wrong
    return lazily(Topology, W, (arr + np.eye(len(arr))) / 2 if square else W, name, lazy)


def ring(n: int, *, weights: Literal["paper"] | Weights = "paper", lazy: Lazy = "auto") -> Topology:
    """Ring of n agents.

    With ``weights="paper"`` (default): ``w_ii = 1/2``, ``w_{i,i+-1} = 1/4`` as in
    the EDM paper's experiments; positive semi-definite, with eigenvalues
    ``1/2 + 1/2 cos(2 pi k / n)`` so ``lambda = 1/2 + 1/2 cos(2 pi / n)``.
    """
    n = agents(n)
    lazy = _options(weights, lazy, ("paper",))
    if weights == "paper":  # n = 1 and 2 too: the weights of i +- 1 add up
        paper = CirculantTopology(n, {0: 0.5, 1: 0.25, -1: 0.25}, name=f"ring({n})")
        return paper if n >= CIRCULANT_FROM else Topology(paper.W, name=paper.name)
    if n >= CIRCULANT_FROM:  # a regular graph: Metropolis and max-degree weights coincide
        return circulant_from_offsets(n, {1}, f"ring({n})[{weights}]", lazy)
    return from_networkx(nx.cycle_graph(n), weights=weights, lazy=lazy, name=f"ring({n})")


def complete(n: int) -> Topology:
    """Complete graph, W = 11^T / n (exact averaging in one round)."""
    n = agents(n)
    return Topology(np.full((n, n), 1.0 / n), name=f"complete({n})")


def star(n: int, *, weights: Weights = "metropolis", lazy: Lazy = "auto") -> Topology:
    """Star: agent 0 connected to all others."""
    n = agents(n, 2)
    return from_networkx(nx.star_graph(n - 1), weights=weights, lazy=lazy, name=f"star({n})")


def _factor(n: int, cols: int | None) -> tuple[int, int]:
    """``(rows, cols)`` of ``n`` agents: ``cols`` as given (it must divide ``n``), or the most
    nearly square factorisation."""
    n = agents(n)
    if cols is not None:
        cols = as_count(cols, "cols", minimum=1)
        if n % cols:
            divisors = [c for c in range(1, n + 1) if n % c == 0]
            raise ValueError(
                f"cols = {cols} does not divide the {n} agents; choose one of "
                f"{', '.join(map(str, divisors[:12]))}{', ...' if len(divisors) > 12 else ''} "
                "or leave cols out for the squarest shape"
            )
        return n // cols, cols
    rows = max(r for r in range(1, math.isqrt(n) + 1) if n % r == 0)
    return rows, n // rows


def grid(
    n: int, cols: int | None = None, *, weights: Weights = "metropolis", lazy: Lazy = "auto"
) -> Topology:
    """2-D grid (no wrap-around) of ``n`` agents in ``cols`` columns; by default the squarest
    shape (``grid(12)`` is 3 x 4)."""
    rows, cols = _factor(n, cols)
    g = nx.grid_2d_graph(rows, cols)
    return from_networkx(g, weights=weights, lazy=lazy, name=f"grid({rows}x{cols})")


def torus(
    n: int, cols: int | None = None, *, weights: Weights = "metropolis", lazy: Lazy = "auto"
) -> Topology:
    """2-D torus (a grid with wrap-around) of ``n`` agents in ``cols`` columns; by default the
    squarest shape."""
    rows, cols = _factor(n, cols)
    if min(rows, cols) < 3:
        raise ValueError(f"a torus needs at least 3 x 3 agents; got {rows} x {cols}")
    g = nx.grid_2d_graph(rows, cols, periodic=True)
    return from_networkx(g, weights=weights, lazy=lazy, name=f"torus({rows}x{cols})")


def hypercube(n: int, *, weights: Weights = "metropolis", lazy: Lazy = "auto") -> Topology:
    """Hypercube of n = 2^k agents (agents differing in one bit are neighbours)."""
    n = agents(n, 2)
    if n & (n - 1):
        raise ValueError(f"a hypercube needs a power of two agents; got n = {n}")
    g = nx.hypercube_graph(n.bit_length() - 1)
    return from_networkx(g, weights=weights, lazy=lazy, name=f"hypercube({n})")


def exponential(n: int, *, lazy: Lazy = "auto") -> Topology:
    """Static exponential graph (Ying et al. 2021): i links to i +- 2^k mod n.

    Each agent's neighbours are ``(i + 2^k) mod n`` for ``k = 0 .. floor(log2(n-1))``,
    made undirected; weights are Metropolis--Hastings.
    """
    n = agents(n, 2)
    lazy = _options("metropolis", lazy)
    offsets = {2**k for k in range(math.floor(math.log2(n - 1)) + 1)}
    if n >= CIRCULANT_FROM:
        return circulant_from_offsets(n, offsets, f"exponential({n})[metropolis]", lazy)
    return from_networkx(nx.circulant_graph(n, offsets), lazy=lazy, name=f"exponential({n})")


def erdos_renyi(
    n: int, p: float, *, seed: int = 0, weights: Weights = "metropolis", lazy: Lazy = "auto"
) -> Topology:
    """Erdős–Rényi G(n, p) graph; redrawn (with the next seed) until connected."""
    n = agents(n)
    p = as_real(p, "erdos_renyi: the edge probability p")
    seed = as_count(seed, "erdos_renyi: seed")
    if not 0 < p <= 1:
        raise ValueError(f"edge probability p must be in (0, 1]; got {p}")
    for attempt in range(1000):
        g = nx.gnp_random_graph(n, p, seed=seed + attempt)
        if nx.is_connected(g):
            return from_networkx(g, weights=weights, lazy=lazy, name=f"erdos_renyi({n},{p})")
    raise AssumptionError(
        f"no connected G({n}, {p}) graph in 1000 draws; increase p above log(n)/n = "
        f"{math.log(n) / n:.3f}"
    )
