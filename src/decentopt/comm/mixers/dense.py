"""``kernel="dense"``: one GEMM ``W @ Z`` -- best for small ``n`` or a dense ``W``."""

from __future__ import annotations

import torch

from decentopt.comm.mixers.base import MixerBase, need, register
from decentopt.topology import Graph, Network

__all__ = ["DenseMixer"]


@register
class DenseMixer(MixerBase):
    """``W @ z`` with ``W`` cast once per dtype and device (built on request for graphs
    stored by stencil or in CSR, up to :data:`~decentopt.topology.circulant.DENSE_LIMIT`)."""

    name = "dense"

    def __init__(self, network: Network) -> None:
        need(network, Graph, self.name, "a static topology")
        self.topology = network
        self._cache: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}

    def _build(self, like: torch.Tensor) -> torch.Tensor:
        return self.topology.W.to(dtype=like.dtype, device=like.device)

    def matrix(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.dtype, like.device)
        if key not in self._cache:
            self._cache[key] = self._build(like)
        return self._cache[key]

    def mix(self, flat: torch.Tensor, out: torch.Tensor | None, t: int) -> torch.Tensor:
        return torch.mm(self.matrix(flat), flat, out=out)
