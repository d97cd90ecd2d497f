"""``kernel="csr"``: ``torch.sparse.mm`` with ``W`` in compressed sparse rows, for graphs
stored sparse (from 1024 agents; memory and work grow with the edges)."""

from __future__ import annotations

import warnings

import torch

from decentopt.comm.mixers.base import need, register
from decentopt.comm.mixers.dense import DenseMixer
from decentopt.topology import Network
from decentopt.topology.sparse import SparseTopology

__all__ = ["CSRMixer"]


@register
class CSRMixer(DenseMixer):
    """The dense mixer's cache of ``W`` per dtype and device, with ``W`` in CSR."""

    name = "csr"

    def __init__(self, network: Network) -> None:
        what = "a topology stored sparse (networkx graphs from 1024 agents)"
        need(network, SparseTopology, self.name, what)
        super().__init__(network)

    def _build(self, like: torch.Tensor) -> torch.Tensor:
        csr = self.topology.csr  # type: ignore[attr-defined]
        with warnings.catch_warnings():  # torch calls its CSR support "beta"
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(
                torch.from_numpy(csr.indptr).long(),
                torch.from_numpy(csr.indices).long(),
                torch.from_numpy(csr.data),
                size=csr.shape,
                dtype=like.dtype,
                device=like.device,
                check_invariants=True,
            )

    def mix(self, flat: torch.Tensor, out: torch.Tensor | None, t: int) -> torch.Tensor:
        mixed = torch.sparse.mm(self.matrix(flat), flat)
        return mixed if out is None else out.copy_(mixed)
