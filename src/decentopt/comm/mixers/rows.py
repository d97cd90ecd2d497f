"""``kernel="sparse"``: a per-agent neighbour accumulation over the non-zeros of ``W``.

``out_i = w_ii z_i + sum_j w_ij z_j``: it reads each row a few times from cache
and is memory-bound, so on a sparse graph with long rows it runs near the
bandwidth of a plain copy, where the GEMM would do ``n`` times more arithmetic.
``"auto"`` uses it for graphs stored dense with ``n >= 64``, density ``<= 0.1``
and rows of at least 1024 columns.
"""

from __future__ import annotations

import torch

from decentopt.comm.mixers.base import MixerBase, need, register
from decentopt.topology import DirectedTopology, Graph, Network, Topology

__all__ = ["SparseRowsMixer", "dense_stored"]

_MIN_N = 64
_MAX_DENSITY = 0.1
_MIN_COLS = 1024


def dense_stored(network: Network) -> bool:
    """Whether ``network`` keeps a dense ``W`` (not a stencil, rounds or CSR)."""
    return type(network) in (Topology, DirectedTopology)


@register
class SparseRowsMixer(MixerBase):
    name = "sparse"

    def __init__(self, network: Network) -> None:
        need(network, Graph, self.name, "a static topology")
        W = network.W.numpy()
        # (i, w_ii, ((j, w_ij), ...)); Python floats avoid a tensor-to-scalar conversion per term
        self._rows = tuple(
            (i, float(W[i, i]), tuple((int(j), float(W[i, j])) for j in network.neighbors[i]))
            for i in range(network.n)
        )

    @staticmethod
    def suits(network: Network) -> bool:
        """Whether ``"auto"`` should consider it: a large, sparse graph stored dense."""
        return dense_stored(network) and network.n >= _MIN_N and network.density <= _MAX_DENSITY

    def preferred(self, flat: torch.Tensor) -> bool:
        return flat.shape[1] >= _MIN_COLS

    def mix(self, flat: torch.Tensor, out: torch.Tensor | None, t: int) -> torch.Tensor:
        target = torch.empty_like(flat) if out is None else out
        for i, w_ii, nbrs in self._rows:
            row = target[i]
            torch.mul(flat[i], w_ii, out=row)
            for j, w_ij in nbrs:
                row.add_(flat[j], alpha=w_ij)
        return target
