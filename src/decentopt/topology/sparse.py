"""Large graphs stored sparse: W as a CSR matrix, spectrum from a sparse eigensolver.

Graphs built from networkx (grids, tori, hypercubes, stars, random graphs) with
at least ``SPARSE_FROM`` agents keep ``W`` in compressed sparse rows: memory
and mixing grow with the edges, not with ``n^2``. ``lambda`` and ``lambda_min``
come from ``scipy.sparse.linalg.eigsh``, computed on first use; Assumption 1 is
checked on the sparse form; the dense ``W`` is built only on request.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.linalg import eigsh

from decentopt.perf import one_thread
from decentopt.topology.circulant import DENSE_LIMIT
from decentopt.topology.topology import _TOL, AssumptionError, Topology, components

__all__ = ["SPARSE_FROM", "SparseTopology"]

#: From this many agents, graphs from networkx are stored sparse.
SPARSE_FROM = 1024


@one_thread()
def _extreme(W: sp.csr_matrix, which: str, k: int = 1) -> np.ndarray:
    return np.sort(eigsh(W, k=k, which=which, return_eigenvectors=False, tol=1e-10))


class SparseTopology(Topology):
    """A mixing matrix in CSR form, checked against Assumption 1 without densifying it."""

    def __init__(self, W: sp.spmatrix, name: str) -> None:
        W = sp.csr_matrix(W, dtype=np.float64)
        n = W.shape[0]
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "csr", W)
        if W.shape != (n, n) or n < 3:
            raise AssumptionError(f"{name}: a sparse mixing matrix must be square with n >= 3")
        if W.nnz and W.data.min() < -_TOL:
            raise AssumptionError(f"{name}: mixing weights must be >= 0")
        if W.nnz and abs(W - W.T).max() > _TOL:
            raise AssumptionError(f"Assumption 1(2) fails: {name} is not symmetric")
        if np.abs(np.asarray(W.sum(axis=1)).ravel() - 1).max() > _TOL:
            raise AssumptionError(f"Assumption 1(2) fails: the rows of {name} do not sum to 1")
        if W.diagonal().min() <= 0:
            raise AssumptionError(f"Assumption 1(1) fails: a zero diagonal entry in {name}")
        if components(W) != 1:
            raise AssumptionError(f"the graph of {name} is not connected")
        if self.lam_min < -_TOL:
            raise AssumptionError(
                f"Assumption 1(3) fails: the smallest eigenvalue of {name} is {self.lam_min:.3g}"
                " < 0; apply the lazy transform (W + I) / 2"
            )

    @property
    def n(self) -> int:
        return self.csr.shape[0]

    @cached_property
    def W(self) -> torch.Tensor:  # type: ignore[override]
        """The dense matrix, built on request (refused above ``DENSE_LIMIT`` agents)."""
        if self.n > DENSE_LIMIT:
            raise MemoryError(f"{self.name}: a dense W would take {8 * self.n**2 / 2**30:.1f} GiB")
        return torch.from_numpy(self.csr.toarray())

    @cached_property
    def lam_min(self) -> float:  # type: ignore[override]
        value = float(_extreme(self.csr, "SA")[0])
        return 0.0 if abs(value) < 1e-9 else value

    @cached_property
    def lam(self) -> float:
        """max(|lambda_2|, |lambda_n|): the largest eigenvalue is 1 (the average)."""
        second = float(_extreme(self.csr, "LA", k=2)[0])
        return max(abs(second), abs(self.lam_min))

    @cached_property
    def neighbors(self) -> tuple[tuple[int, ...], ...]:
        rows = np.split(self.csr.indices, self.csr.indptr[1:-1])
        return tuple(tuple(int(j) for j in sorted(row) if j != i) for i, row in enumerate(rows))

    @property
    def density(self) -> float:
        return self.csr.nnz / self.n**2

    def lazy(self) -> Topology:
        half = (self.csr + sp.identity(self.n, format="csr")) / 2
        return SparseTopology(half, name=f"lazy({self.name})")
