"""``kernel="csr"``: ``torch.sparse.mm`` with ``W`` in compressed sparse rows, for graphs
stored sparse (from 1024 agents; memory and work grow with the edges)."""

from __future__ import annotations

import warnings

import torch

from decentopt.comm.mixers.base import MixerBase, MixerUnavailable, register
from decentopt.topology import Network
from decentopt.topology.sparse import SparseTopology

__all__ = ["CSRMixer"]


@register
class CSRMixer(MixerBase):
    name = "csr"

    def __init__(self, network: Network) -> None:
        if not isinstance(network, SparseTopology):
            raise MixerUnavailable(
                f"kernel='csr' needs a topology stored sparse (networkx graphs from 1024 "
                f"agents); {network.name} is not"
            )
        self.csr = network.csr
        self._cache: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}

    def matrix(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.dtype, like.device)
        if key not in self._cache:
            csr = self.csr
            with warnings.catch_warnings():  # torch calls its CSR support "beta"
                warnings.simplefilter("ignore", UserWarning)
                self._cache[key] = torch.sparse_csr_tensor(
                    torch.from_numpy(csr.indptr).long(),
                    torch.from_numpy(csr.indices).long(),
                    torch.from_numpy(csr.data),
                    size=csr.shape,
                    dtype=like.dtype,
                    device=like.device,
                    check_invariants=True,
                )
        return self._cache[key]

    def mix(self, flat: torch.Tensor, out: torch.Tensor | None, t: int) -> torch.Tensor:
        mixed = torch.sparse.mm(self.matrix(flat), flat)
        return mixed if out is None else out.copy_(mixed)
