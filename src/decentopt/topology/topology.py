"""The :class:`Topology` object and the checks of the paper's Assumption 1.

A topology is a communication graph together with its mixing matrix ``W``.
Every algorithm in :mod:`decentopt.algorithms` assumes (Assumption 1 of the EDM
paper):

1. ``w_ii > 0`` for every agent;
2. ``W`` is symmetric and doubly stochastic (``W 1 = 1``, ``1^T W = 1^T``);
3. the smallest eigenvalue of ``W`` is positive.

Departure from the paper: condition 3 is checked as ``lambda_min >= 0`` (up to
round-off). The paper's own ring (``w_ii = 1/2``, ``w_{i,i+-1} = 1/4``) has
eigenvalues ``1/2 + 1/2 cos(2 pi k / n)``, which include 0 exactly for even
``n`` (its n = 32 experiments), and Exact Diffusion only needs ``W`` positive
semi-definite. Matrices with a negative eigenvalue are refused.

Entries must also be non-negative and the graph connected, otherwise
``lambda = ||W - 11^T/n||_2`` equals one and no consensus is possible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch

from decentopt.perf import one_thread

__all__ = ["AssumptionError", "Topology", "check_assumption1"]

_TOL = 1e-10
G = TypeVar("G", bound="Graph")


class AssumptionError(ValueError):
    """A mixing matrix violates Assumption 1 of the EDM paper."""


def agents(n: object, minimum: int = 1) -> int:
    """``n`` as the number of agents of a graph builder: an integer ``>= minimum``."""
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < minimum:
        raise ValueError(f"the number of agents n must be an integer >= {minimum}; got {n!r}")
    return int(n)


def _as_numpy(W: object) -> np.ndarray:
    if isinstance(W, torch.Tensor):
        W = W.detach().cpu().double().numpy()
    try:
        return np.asarray(W, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise AssumptionError(
            f"the mixing matrix must be a square array of numbers; got {type(W).__name__}"
        ) from exc


def links(adjacency: object) -> np.ndarray:
    """A square adjacency matrix as 0/1 float64 links, self-links dropped."""
    A = _as_numpy(adjacency)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"the adjacency matrix must be square; got shape {A.shape}")
    A = (A != 0).astype(np.float64)
    np.fill_diagonal(A, 0.0)
    return A


def components(A: object, *, directed: bool = False) -> int:
    """How many (strongly, if ``directed``) connected components the non-zeros of ``A`` form."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    graph = sp.csr_matrix(A != 0)
    return int(connected_components(graph, directed=directed, connection="strong")[0])


def square_weights(W: object, tol: float, builders: str) -> np.ndarray:
    """``W`` as a float64 square array of finite, non-negative weights (``builders``: what
    to build a valid one with, named in the error)."""
    arr = _as_numpy(W)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] == 0:
        raise AssumptionError(
            f"the mixing matrix must be square (n x n) with n >= 1; got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise AssumptionError("the mixing matrix contains NaN or inf entries")
    if np.min(arr) < -tol:
        i, j = np.unravel_index(np.argmin(arr), arr.shape)
        raise AssumptionError(
            f"W[{i}, {j}] = {arr[i, j]:.3g} is negative; mixing weights must be >= 0 "
            f"(use {builders} on the graph)"
        )
    return arr


def lazily(build: Callable[[Any, str], G], W: Any, lazy_W: Any, name: str, lazy: object) -> G:
    """``build(W, name)``, or the lazy transform ``build(lazy_W, "lazy(name)")`` where
    ``lazy`` is true, or ``"auto"`` and ``W`` fails Assumption 1(3) (a negative eigenvalue)."""
    if lazy is not True:
        try:
            return build(W, name)
        except AssumptionError as exc:
            if lazy != "auto" or "1(3)" not in str(exc):
                raise
    return build(lazy_W, f"lazy({name})")


@one_thread()
def check_assumption1(W: object, *, tol: float = _TOL) -> np.ndarray:
    """Validate a mixing matrix against Assumption 1 and return it as float64.

    Raises :class:`AssumptionError` naming the first failed condition and how to
    repair it.
    """
    arr = square_weights(W, tol, "metropolis_hastings_weights or max_degree_weights")
    n = arr.shape[0]
    asym = np.max(np.abs(arr - arr.T))
    if asym > tol:
        raise AssumptionError(
            f"Assumption 1(2) fails: W is not symmetric (max |W - W^T| = {asym:.3g}); "
            "build it from an undirected graph with metropolis_hastings_weights"
        )
    row_err = np.max(np.abs(arr.sum(axis=1) - 1.0))
    if row_err > tol:
        raise AssumptionError(
            f"Assumption 1(2) fails: W is not doubly stochastic (rows sum to 1 within "
            f"{row_err:.3g}); normalise it, e.g. with metropolis_hastings_weights"
        )
    diag = np.diag(arr)
    if np.min(diag) <= 0:
        i = int(np.argmin(diag))
        raise AssumptionError(
            f"Assumption 1(1) fails: w_ii = {diag[i]:.3g} <= 0 for agent {i}; "
            "apply the lazy transform (W + I) / 2: topology.from_matrix(W, lazy=True)"
        )
    eig = np.linalg.eigvalsh((arr + arr.T) / 2)
    if eig[0] < -tol:
        raise AssumptionError(
            f"Assumption 1(3) fails: the smallest eigenvalue of W is {eig[0]:.3g} < 0; "
            "apply the lazy transform (W + I) / 2: topology.from_matrix(W, lazy=True)"
        )
    if n > 1 and eig[-2] >= 1 - tol:
        raise AssumptionError(
            "the graph of W is not connected (second largest eigenvalue is 1), so the "
            "agents cannot reach consensus; add edges between the components"
        )
    return arr


def _others(W: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """For each row ``i``, the columns ``j != i`` where it is non-zero."""
    return tuple(tuple(int(j) for j in np.flatnonzero(row) if j != i) for i, row in enumerate(W))


@dataclass(frozen=True, eq=False)
class Graph:
    """What every static graph has: a mixing matrix ``W`` over ``n`` agents, who reads
    whom, and what it offers the methods (:attr:`offers`). A static graph is a schedule
    of period one.

    Attributes:
        W: the (n, n) mixing matrix as a float64 tensor.
        name: a human-readable name, e.g. ``"ring(32)"``.
    """

    W: torch.Tensor
    name: str = "custom"
    #: The check of the kind's conditions on ``W``, returning it as float64.
    _check: ClassVar[Callable[[object], np.ndarray]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "W", torch.from_numpy(self._check(self.W).copy()))

    #: A static graph is a schedule of period one: its own ``W_t`` at every round, offering
    #: what a round of :class:`~decentopt.topology.GossipRound` offers.
    period = 1

    def at(self: G, t: int) -> G:
        """``W_t``: the same ``W`` every round."""
        return self

    def matrix(self) -> np.ndarray:
        """The dense ``W`` as a NumPy array (a view of :attr:`W`)."""
        return self.W.numpy()

    @cached_property
    def self_weight(self) -> np.ndarray:
        """Every agent's ``w_ii``."""
        return np.diag(self.matrix()).copy()

    def neighbours(self, i: int) -> tuple[tuple[int, float], ...]:
        """Agent ``i``'s peers (whose rows it reads) with their weights."""
        return tuple((j, float(self.matrix()[i, j])) for j in self.neighbors[i])

    def targets(self, i: int) -> tuple[int, ...]:
        """The agents that read agent ``i``'s row (whom ``i`` sends to)."""
        return self.out_neighbors[i]

    @property
    def n(self) -> int:
        """Number of agents."""
        return int(self.W.shape[0])

    @cached_property
    def neighbors(self) -> tuple[tuple[int, ...], ...]:
        """For each agent, the other agents j whose rows it reads (w_ij != 0)."""
        return _others(self.matrix())

    @cached_property
    def out_neighbors(self) -> tuple[tuple[int, ...], ...]:
        """For each agent, the agents that read its row (w_ji != 0)."""
        return _others(self.matrix().T)

    @property
    def degrees(self) -> np.ndarray:
        """Number of messages each agent sends per round: its readers (self excluded)."""
        return np.array([len(nb) for nb in self.out_neighbors])

    @property
    def max_degree(self) -> int:
        return int(self.degrees.max()) if self.n > 1 else 0

    @property
    def density(self) -> float:
        """Fraction of non-zero entries of ``W``."""
        return float(np.count_nonzero(self.matrix())) / self.n**2

    def lazy(self: G) -> G:
        """The lazy transform (W + I) / 2, which makes every eigenvalue positive."""
        return type(self)((self.matrix() + np.eye(self.n)) / 2, name=f"lazy({self.name})")

    @property
    def offers(self) -> frozenset[str]:
        """What the graph offers the methods: ``"symmetric"`` (a symmetric doubly stochastic
        W), ``"column"`` (column-stochastic), ``"static"``, ``"tree"``."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Topology(Graph):
    """A symmetric mixing matrix ``W`` that satisfies Assumption 1, with its spectral
    quantities."""

    _check = staticmethod(check_assumption1)

    @cached_property
    @one_thread()
    def eigenvalues(self) -> np.ndarray:
        """Eigenvalues of ``W`` in ascending order."""
        return np.linalg.eigvalsh(self.matrix())

    @cached_property
    @one_thread()
    def lam(self) -> float:
        """lambda = ||W - 11^T/n||_2, the paper's mixing rate (second largest |eigenvalue|)."""
        return float(np.linalg.norm(self.matrix() - 1.0 / self.n, ord=2))

    @property
    def spectral_gap(self) -> float:
        """1 - lambda."""
        return 1.0 - self.lam

    #: Every W here passed Assumption 1(3) (the schedules' attribute of the same name may not).
    psd = True

    @cached_property
    def is_tree(self) -> bool:
        """Whether the graph is a tree (connected, ``n - 1`` edges): what RelaySGD relays over."""
        return int(self.degrees.sum()) == 2 * (self.n - 1)

    @property
    def offers(self) -> frozenset[str]:
        tree = {"tree"} if self.is_tree else set()
        return frozenset({"symmetric", "column", "static", *tree})

    @property
    def lam_min(self) -> float:
        """Smallest eigenvalue of ``W`` (>= 0 here; see the module note; round-off clipped)."""
        value = float(self.eigenvalues[0])
        return 0.0 if abs(value) < _TOL else value

    @property
    def out_neighbors(self) -> tuple[tuple[int, ...], ...]:  # type: ignore[override]
        """For each agent, the agents that read its row (its neighbours, W being symmetric)."""
        return self.neighbors

    def summary(self) -> dict[str, float | int | str]:
        """The spectral quantities as a plain dict (for tables and the CLI)."""
        return {
            "name": self.name,
            "n": self.n,
            "lambda": self.lam,
            "1-lambda": self.spectral_gap,
            "lambda_min": self.lam_min,
            "max_degree": self.max_degree,
        }

    def __repr__(self) -> str:
        return f"Topology({self.name}, n={self.n}, lambda={self.lam:.6f})"
