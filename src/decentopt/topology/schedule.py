"""Time-varying topologies: a mixing matrix ``W_t`` for every gossip round ``t``.

A :class:`TopologySchedule` gives ``W_t`` for round ``t``, either periodically
(``W_t = W_{t mod period}``) or drawn afresh from a seed (random matchings), so
every process of a distributed job derives the same ``W_t`` without exchanging
anything. Each ``W_t`` is stored in *gather form* (:class:`GossipRound`): agent
``i`` keeps ``self_weight[i]`` of its own row and takes ``weights[s, i]`` of the
row of agent ``peers[s, i]``, so mixing is linear in ``n`` and no dense matrix
is needed, and every agent knows its peers of every round.

Per round, every ``W_t`` is symmetric, doubly stochastic, non-negative with a
positive diagonal (checked; a ``directed`` schedule's rounds are column-stochastic
instead, and the union of a period's links must be strongly connected, see
:mod:`decentopt.topology.directed`); it need not be connected -- one-peer graphs are
not -- but the product over a period (or a long stretch of a random sequence)
must contract. Assumption 1(3) (``W_t`` positive semi-definite) holds for
every builder here except the merge rounds of :func:`base_graph`, which are
reported by :attr:`TopologySchedule.psd`.

The builders are in :mod:`decentopt.topology.time_varying`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.linalg import eigsh

from decentopt.perf import one_thread
from decentopt.topology.topology import _TOL, AssumptionError, components

__all__ = ["GossipRound", "TopologySchedule"]

#: Largest n for which spectral quantities are computed with dense matrices.
DENSE_UP_TO = 2048
#: Rounds of a random sequence over which its per-round rate is estimated.
RANDOM_SAMPLE = 64


@dataclass(frozen=True, eq=False)
class GossipRound:
    """One ``W_t`` in gather form.

    ``(W z)_i = self_weight[i] z_i + sum_s weights[s, i] z_{peers[s, i]}``; unused
    slots point at the agent itself with weight 0.
    """

    self_weight: np.ndarray  # (n,)
    peers: np.ndarray  # (slots, n) int64
    weights: np.ndarray  # (slots, n) float64

    @property
    def n(self) -> int:
        return int(self.self_weight.shape[0])

    @cached_property
    def messages(self) -> np.ndarray:
        """How many messages each agent sends this round (to the agents that read its row;
        over a symmetric round, the peers it exchanges with)."""
        return np.bincount(self.links()[1], minlength=self.n)

    def links(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The round's off-diagonal entries ``W[rows, cols] = w`` with ``w > 0``."""
        used = self.weights > 0
        rows = np.broadcast_to(np.arange(self.n), self.peers.shape)[used]
        return rows, self.peers[used], self.weights[used]

    def sparse(self) -> sp.csr_matrix:
        """The off-diagonal part of ``W_t`` as a sparse matrix."""
        rows, cols, w = self.links()
        return sp.csr_matrix((w, (rows, cols)), shape=(self.n, self.n))

    @classmethod
    def from_entries(cls, n: int, rows: np.ndarray, cols: np.ndarray, w: np.ndarray) -> GossipRound:
        """The round with entries ``W[rows, cols] = w`` off the diagonal; it fills rows to 1."""
        rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        w = np.asarray(w, np.float64)
        keep = np.flatnonzero((rows != cols) & (w != 0))
        order = keep[np.lexsort((cols[keep], rows[keep]))]
        rows, cols, w = rows[order], cols[order], w[order]
        counts = np.bincount(rows, minlength=n)
        slots = int(counts.max(initial=0))
        slot = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        peers = np.tile(np.arange(n, dtype=np.int64), (max(slots, 1), 1))
        weights = np.zeros((max(slots, 1), n))
        peers[slot, rows] = cols
        weights[slot, rows] = w
        return cls(1.0 - weights.sum(axis=0), peers, weights)

    @classmethod
    def identity(cls, n: int) -> GossipRound:
        """``W_t = I``: a round without messages."""
        return cls.from_entries(n, np.zeros(0), np.zeros(0), np.zeros(0))

    @classmethod
    def from_matrix(cls, W: np.ndarray) -> GossipRound:
        rows, cols = np.nonzero(W)
        return cls.from_entries(W.shape[0], rows, cols, W[rows, cols])

    def matrix(self) -> np.ndarray:
        """The dense ``W_t`` (for small ``n``: tests, pictures, spectra)."""
        return np.diag(self.self_weight) + self.sparse().toarray()

    def apply(self, z: np.ndarray) -> np.ndarray:
        """``W_t z`` for ``z`` of shape ``(n, ...)`` (NumPy; the communicators use torch)."""
        shape = (self.n,) + (1,) * (z.ndim - 1)
        out = self.self_weight.reshape(shape) * z
        for peers, w in zip(self.peers, self.weights, strict=True):
            out = out + w.reshape(shape) * z[peers]
        return out

    def torch_form(
        self, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(self_weight (n, 1), peers (slots, n), weights (slots, n, 1))`` as tensors."""
        return (
            torch.as_tensor(self.self_weight, dtype=dtype, device=device).unsqueeze(1),
            torch.as_tensor(self.peers, device=device),
            torch.as_tensor(self.weights, dtype=dtype, device=device).unsqueeze(2),
        )

    def targets(self, i: int) -> tuple[int, ...]:
        """The agents that read agent ``i``'s row this round (whom ``i`` sends to), ascending."""
        used = (self.weights > 0) & (self.peers == i)
        return tuple(int(j) for j in np.flatnonzero(used.any(axis=0)))

    def neighbours(self, i: int) -> tuple[tuple[int, float], ...]:
        """Agent ``i``'s peers this round (whose rows it reads) with their weights."""
        return tuple(
            (int(p), float(w))
            for p, w in zip(self.peers[:, i], self.weights[:, i], strict=True)
            if w > 0
        )

    def _check_entries(self, where: str, own_weight: str) -> None:
        """Finite, non-negative weights and ``w_ii > 0`` (``own_weight`` says why it fails)."""
        if not (np.isfinite(self.weights).all() and np.isfinite(self.self_weight).all()):
            raise AssumptionError(f"{where}: the mixing matrix contains NaN or inf entries")
        if (self.weights < -_TOL).any():
            raise AssumptionError(f"{where}: a mixing weight is negative; weights must be >= 0")
        if (self.self_weight <= 0).any():
            i = int(np.argmin(self.self_weight))
            raise AssumptionError(
                f"{where}: {own_weight}w_ii = {self.self_weight[i]:.3g} <= 0 for agent {i}"
                " -- apply the lazy transform (W + I) / 2 (schedule.lazy())"
            )

    def check(self, where: str) -> None:
        """Refuse a round that is not symmetric, non-negative, doubly stochastic with w_ii > 0."""
        self._check_entries(where, "Assumption 1(1) fails: ")
        W = self.sparse()
        gap = (W - W.T).tocoo()
        bad = np.flatnonzero(np.abs(gap.data) > _TOL)
        if len(bad):
            i, j = int(gap.row[bad[0]]), int(gap.col[bad[0]])
            raise AssumptionError(
                f"{where}: Assumption 1(2) fails: W is not symmetric (w_{i}{j} = {W[i, j]:.3g}, "
                f"but w_{j}{i} differs); build each round from an undirected graph"
            )

    def check_columns(self, where: str) -> None:
        """Refuse a directed round that is not column-stochastic, non-negative, with w_ii > 0."""
        self._check_entries(where, "every agent must keep part of its own mass: ")
        sent = np.bincount(self.peers.ravel(), weights=self.weights.ravel(), minlength=self.n)
        error = np.abs(self.self_weight + sent - 1)
        if error.max() > _TOL:
            j = int(np.argmax(error))
            raise AssumptionError(
                f"{where}: W is not column-stochastic: what agent {j} keeps and sends sums to "
                f"{self.self_weight[j] + sent[j]:.6g}, not 1"
            )

    @cached_property
    @one_thread()
    def psd(self) -> bool:
        """Whether ``W_t`` is positive semi-definite (Gershgorin, else its spectrum)."""
        if (self.self_weight >= self.weights.sum(axis=0) - _TOL).all():
            return True  # diagonally dominant with a non-negative diagonal
        if self.n > 4 * DENSE_UP_TO:
            return False
        if self.n > DENSE_UP_TO:
            W = self.sparse() + sp.diags(self.self_weight)
            return bool(eigsh(W, k=1, which="SA", return_eigenvectors=False)[0] >= -_TOL)
        return bool(np.linalg.eigvalsh(self.matrix())[0] >= -_TOL)

    def lazy(self) -> GossipRound:
        """``(W_t + I) / 2``."""
        return GossipRound((1 + self.self_weight) / 2, self.peers, self.weights / 2)


@dataclass(frozen=True, eq=False)
class TopologySchedule:
    """Mixing matrices ``W_t`` by gossip round: periodic (``rounds``) or drawn (``draw``).

    Attributes:
        n: number of agents.
        name: a readable name, e.g. ``"one_peer_exponential(32)"``.
        rounds: ``W_0 .. W_{period-1}`` of a periodic schedule.
        draw: ``t -> W_t`` of a random schedule (deterministic in ``t``).
        directed: the rounds are column-stochastic (push-sum methods), not symmetric
            (:mod:`decentopt.topology.directed`).
    """

    n: int
    name: str
    rounds: tuple[GossipRound, ...] = ()
    draw: Callable[[int], GossipRound] | None = None
    directed: bool = False
    #: Relaying needs one fixed tree; no schedule is one.
    is_tree = False

    def __post_init__(self) -> None:
        if (not self.rounds) == (self.draw is None):
            raise ValueError("a schedule has either a periodic list of rounds or a draw(t)")
        for t, r in enumerate(self.rounds):
            if r.n != self.n:
                raise AssumptionError(f"{self.name}: round {t} has {r.n} agents, not {self.n}")
            (r.check_columns if self.directed else r.check)(f"{self.name}, round {t}")
        # with positive diagonals, the period's product contracts iff the union of the
        # rounds' graphs is connected (directed: strongly, every agent reaching every other
        # along the rounds' links): an O(edges) check instead of a spectrum
        union = sum((r.sparse() for r in self.rounds), sp.csr_matrix((self.n, self.n)))
        groups = components(union, directed=self.directed) if self.rounds else 1
        if groups > 1:
            raise AssumptionError(
                f"{self.name}: the product of W_t over one period does not contract (the "
                f"rounds together leave the agents in {groups} groups that never "
                "exchange), so they never reach consensus; add rounds or edges that connect "
                "the graph"
            )

    # ------------------------------------------------------------------ rounds

    @property
    def period(self) -> int | None:
        """Rounds after which ``W_t`` repeats; ``None`` for a random schedule."""
        return len(self.rounds) if self.rounds else None

    def at(self, t: int) -> GossipRound:
        """``W_t`` in gather form."""
        if self.draw is not None:
            return self.draw(t)
        return self.rounds[t % len(self.rounds)]

    def matrices(self, count: int | None = None, start: int = 0) -> list[np.ndarray]:
        """Dense ``W_start .. W_{start+count-1}`` (one period by default)."""
        count = count if count is not None else (self.period or RANDOM_SAMPLE)
        return [self.at(start + t).matrix() for t in range(count)]

    # ---------------------------------------------------------------- spectra
    @one_thread()
    def _contraction(self, count: int) -> float:
        """``||W_{count-1} ... W_0 - 11^T/n||_2`` (directed: ``- pi 1^T``, ``pi`` the product's
        Perron vector; dense up to ``DENSE_UP_TO`` agents, NaN above)."""
        if self.n <= DENSE_UP_TO:
            P = np.eye(self.n)
            for t in range(count):
                P = self.at(t).apply(P)
            limit = 1 / self.n
            if self.directed:  # pi: the right eigenvector of P for eigenvalue 1, summing to 1
                values, vectors = np.linalg.eig(P)
                pi = np.real(vectors[:, int(np.argmin(np.abs(values - 1)))])
                limit = (pi / pi.sum())[:, None]
            return float(np.linalg.norm(P - limit, 2))
        if self.directed:
            return float("nan")
        # power iteration on (A - J)^T (A - J); A^T applies the (symmetric) rounds reversed
        rng = np.random.default_rng(0)
        v = rng.standard_normal(self.n)
        value = 0.0
        for _ in range(100):
            v -= v.mean()
            v /= np.linalg.norm(v) or 1.0
            u = v
            for t in range(count):
                u = self.at(t).apply(u)
            value = float(np.linalg.norm(u - u.mean()))
            for t in reversed(range(count)):
                u = self.at(t).apply(u)
            v = u
        return value

    @cached_property
    def period_contraction(self) -> float:
        """``||prod_t W_t - 11^T/n||`` over one period (a random schedule: its first 64 rounds)."""
        return self._contraction(self.period or RANDOM_SAMPLE)

    @property
    def lam(self) -> float:
        """The per-round rate: the period's contraction to the power ``1 / period``."""
        return self.period_contraction ** (1.0 / (self.period or RANDOM_SAMPLE))

    @property
    def spectral_gap(self) -> float:
        return 1.0 - self.lam

    @property
    def offers(self) -> frozenset[str]:
        """What the schedule offers the methods (:attr:`decentopt.topology.Topology.offers`):
        column-stochastic rounds, symmetric ones too unless directed; static at period one."""
        kinds = {"column"} if self.directed else {"symmetric", "column"}
        return frozenset(kinds | ({"static"} if self.period == 1 else set()))

    @cached_property
    def psd(self) -> bool:
        """Whether every ``W_t`` is positive semi-definite (Assumption 1(3)); sampled if random."""
        if self.directed:
            return False
        return all(self.at(t).psd for t in range(self.period or RANDOM_SAMPLE))

    @property
    def max_degree(self) -> int:
        """Most peers any agent has in one round."""
        return max(
            int(self.at(t).messages.max(initial=0)) for t in range(self.period or RANDOM_SAMPLE)
        )

    def lazy(self) -> TopologySchedule:
        """Every ``W_t`` replaced by ``(W_t + I) / 2`` (positive semi-definite)."""
        draw = self.draw
        lazy_draw = None if draw is None else (lambda t: draw(t).lazy())
        rounds = tuple(r.lazy() for r in self.rounds)
        return TopologySchedule(self.n, f"lazy({self.name})", rounds, lazy_draw, self.directed)

    def summary(self) -> dict[str, float | int | str]:
        """The schedule's figures as a plain dict (for tables and the CLI)."""
        return {
            "name": self.name,
            "n": self.n,
            "period": self.period or "random",
            "period contraction": self.period_contraction,
            "lambda (per round)": self.lam,
            "max peers per round": self.max_degree,
            "every W_t PSD": str(self.psd),
        } | ({"directed": "yes (column-stochastic)"} if self.directed else {})

    def __repr__(self) -> str:
        return f"TopologySchedule({self.name}, n={self.n}, period={self.period or 'random'})"
