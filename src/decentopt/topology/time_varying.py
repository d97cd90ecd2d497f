"""Builders of time-varying topologies (:class:`~decentopt.topology.schedule.TopologySchedule`).

* :func:`one_peer_exponential` -- Ying et al. (2021) let agent ``i`` send to
  ``i + 2^m`` at round ``m`` (mod ``ceil(log2 n)``): ``W_t = (I + P_m) / 2`` with a
  shift ``P_m``, doubly stochastic but not symmetric. Symmetrised here as
  ``W_t = I/2 + (P_m + P_m^T)/4``: agent ``i`` exchanges with ``i + 2^m`` and
  ``i - 2^m`` (one peer when ``2^m = n/2``). Every ``W_t`` is then symmetric and
  positive semi-definite (eigenvalues ``(1 + cos(2 pi k 2^m / n))/2``); the price is
  two messages per round instead of one. For ``n`` a power of two the product
  over a period is still the exact average (for every ``k != 0`` some round has
  ``k 2^m / n = 1/2 mod 1``, an eigenvalue 0).
* :func:`one_peer_hypercube` -- ``n = 2^p``; at round ``m`` agent ``i`` averages with
  ``i XOR 2^m``: one peer, exact average after ``p`` rounds.
* :func:`base_graph` -- a Base-(k+1) graph in the sense of Takezawa, Sato, Bao,
  Niwa, Yamada (NeurIPS 2023): at most ``k = base - 1`` peers per round and the
  exact average after one period, for any ``n`` (construction in its docstring).
* :func:`random_matchings` -- a uniformly random perfect matching every round
  (one agent idle when ``n`` is odd), ``W_t = (I + P_t)/2``.
* :func:`sequence` -- any list of matrices, repeated.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from decentopt._checks import as_count
from decentopt.topology.schedule import _TOL, GossipRound, TopologySchedule
from decentopt.topology.topology import AssumptionError, _as_numpy, agents

__all__ = [
    "base_graph",
    "one_peer_exponential",
    "one_peer_hypercube",
    "random_matchings",
    "sequence",
]


def _clique_entries(cliques: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Off-diagonal entries of exact averaging within each row of ``cliques`` (``(count, m)``
    agents, weights ``1/m``)."""
    count, m = cliques.shape
    rows = np.repeat(cliques, m, axis=1).ravel()
    cols = np.tile(cliques, (1, m)).ravel()
    return rows, cols, np.full(count * m * m, 1.0 / max(m, 1))


def one_peer_exponential(n: int) -> TopologySchedule:
    """Symmetrised one-peer exponential graph (see the module docstring)."""
    n = agents(n)
    idx = np.arange(n)
    rounds = []
    for m in range(max(1, math.ceil(math.log2(n)))):  # n = 1: one round, W = I
        shifts = sorted({2**m % n, -(2**m) % n})  # one peer when 2^m = n/2
        cols = np.concatenate([(idx + s) % n for s in shifts])
        w = np.full(len(cols), 0.5 / len(shifts))
        rounds.append(GossipRound.from_entries(n, np.tile(idx, len(shifts)), cols, w))
    return TopologySchedule(n, f"one_peer_exponential({n})", tuple(rounds))


def one_peer_hypercube(n: int) -> TopologySchedule:
    """``n = 2^p`` agents; round ``m`` pairs ``i`` with ``i XOR 2^m``: exact average after ``p``."""
    n = agents(n)
    if n & (n - 1):
        low = 1 << (n.bit_length() - 1)
        raise ValueError(
            f"one_peer_hypercube needs n to be a power of two; got {n} (use {low} or {2 * low}, "
            "or base_graph, which takes any n)"
        )
    return TopologySchedule(n, f"one_peer_hypercube({n})", base_graph(n, base=2).rounds)


def _base_groups(n: int, base: int) -> list[tuple[int, int, int]]:
    """``n``'s base-``base`` digits as groups ``(first agent, pieces a, power p)``, from the
    highest power down: ``a`` pieces of ``base**p`` consecutive agents each."""
    groups = []
    start = 0
    for p in reversed(range(int(math.log(n, base)) + 2)):
        a = (n // base**p) % base
        if a:
            groups.append((start, a, p))
            start += a * base**p
    return groups


def _digit_cliques(base: int, first: int, pieces: int, p: int, r: int) -> np.ndarray:
    """Within each of ``pieces`` pieces of ``base**p`` agents from ``first``, the cliques
    (rows) of agents whose positions differ only in base-``base`` digit ``r``."""
    size, step = base**p, base**r
    local = np.arange(size)
    low = local[(local // step) % base == 0]
    starts = (first + size * np.arange(pieces)[:, None] + low[None, :]).ravel()
    return starts[:, None] + step * np.arange(base)[None, :]


def base_graph(n: int, *, base: int = 2) -> TopologySchedule:
    """A Base-(k+1) graph (``k = base - 1``): at most ``k`` peers per round, exact after a period.

    After the idea of Takezawa et al. (NeurIPS 2023); the construction and its
    round count are this package's own:

    1. Write ``n = sum_l a_l base^{p_l}`` (base-``base`` digits ``a_l`` in 1..k,
       ``p_0 > p_1 > ...``) and split the agents into consecutive groups ``V_l`` of
       ``a_l`` pieces of ``base^{p_l}`` agents. Each group averages exactly: ``p_l``
       rounds of cliques of ``base`` agents that differ in one base-``base`` digit of
       their position in the piece, then one round of cliques across its pieces.
    2. Merge rounds ``m = 0 .. L-2``: every agent of the tail ``V_{m+1} ∪ ...`` (fewer
       than ``base^{p_m}`` agents) links to one agent in each piece of ``V_m`` with
       weight ``base^{p_m} / S_m`` (``S_m = |V_m ∪ tail|``). By induction every tail
       agent then holds ``(S_{m+1}/n) mean(own group) + (1/n) sum_{m' <= m} |V_m'| mean(V_m')``,
       and the last group holds the average.
    3. Each piece of ``V_m`` re-averages (``p_m`` digit rounds, overlapping the later
       merges); mass conservation makes every piece's average the global one.

    Merge rounds give a tail agent more weight on its peers than on itself, so
    those ``W_t`` have a negative eigenvalue (:attr:`TopologySchedule.psd` is
    ``False``); finite-time exactness needs them as they are.
    """
    n = agents(n)
    base = as_count(base, "base_graph: base", minimum=2)  # k + 1 for k peers
    groups = _base_groups(n, base)
    # round index -> its entries (every index up to the last gets some)
    rounds: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = defaultdict(list)
    # 1. every group averages
    for first, a, p in groups:
        for r in range(p):
            rounds[r].append(_clique_entries(_digit_cliques(base, first, a, p, r)))
        if a > 1:
            cliques = first + np.arange(base**p)[:, None] + base**p * np.arange(a)[None, :]
            rounds[p].append(_clique_entries(cliques))
    phase = max((p + (a > 1) for _, a, p in groups), default=0)
    # 2. merges, and 3. re-averaging of the merged group's pieces
    for m, (first, a, p) in enumerate(groups[:-1]):
        size = base**p
        tail_start = first + a * size
        tail = np.arange(tail_start, n)
        partners = (first + size * np.arange(a))[None, :] + (tail - tail_start)[:, None]
        rows, cols = np.repeat(tail, a), partners.ravel()
        w = np.full(2 * len(rows), size / (n - first))  # S_m = n - first
        rounds[phase + m].append((np.concatenate([rows, cols]), np.concatenate([cols, rows]), w))
        for r in range(p):
            rounds[phase + m + 1 + r].append(_clique_entries(_digit_cliques(base, first, a, p, r)))
    built = tuple(
        GossipRound.from_entries(n, *(np.concatenate([e[i] for e in rounds[t]]) for i in range(3)))
        for t in sorted(rounds)
    )
    return TopologySchedule(n, f"base_graph({n}, base={base})", built or (GossipRound.identity(n),))


def random_matchings(n: int, *, seed: int = 0) -> TopologySchedule:
    """A fresh uniformly random perfect matching every round (seeded by ``(seed, t)``)."""
    n = agents(n)
    seed = int(seed)

    def draw(t: int) -> GossipRound:
        perm = np.random.default_rng([seed, t]).permutation(n)
        a, b = perm[0 : n - 1 : 2], perm[1:n:2]
        peers = np.arange(n, dtype=np.int64)  # an idle agent (odd n) points at itself
        peers[a], peers[b] = b, a
        weights = np.where(peers != np.arange(n), 0.5, 0.0)
        return GossipRound(1.0 - weights, peers[None], weights[None])

    return TopologySchedule(n, f"random_matchings({n}, seed={seed})", draw=draw)


def sequence(matrices: Sequence[object], *, name: str = "sequence") -> TopologySchedule:
    """Any list of mixing matrices, repeated in order (each checked; see the module docstring)."""
    rounds = []
    for t, W in enumerate(matrices):
        arr = _as_numpy(W)
        if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
            raise AssumptionError(f"{name}, round {t}: the matrix must be square; got {arr.shape}")
        row_err = float(np.max(np.abs(arr.sum(axis=1) - 1.0)))
        if row_err > _TOL:
            raise AssumptionError(
                f"{name}, round {t}: Assumption 1(2) fails: W is not doubly stochastic (rows sum "
                f"to 1 within {row_err:.3g}); normalise it, e.g. with metropolis_hastings_weights"
            )
        rounds.append(GossipRound.from_matrix(arr))
    if not rounds:
        raise ValueError(f"{name}: give at least one matrix")
    return TopologySchedule(rounds[0].n, name, tuple(rounds))
