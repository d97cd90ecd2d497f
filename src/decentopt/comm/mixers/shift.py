"""``kernel="shift"``: a circulant ``W z`` as a weighted sum of row-shifted copies of ``z``.

For a circulant topology (rings and exponential graphs from 64 agents,
:class:`~decentopt.topology.circulant.CirculantTopology`; a dense ``W`` found
circulant too) ``(W z)_i = sum_o c_o z_{(i + o) mod n}``: linear in ``n``, and no
dense ``W`` is ever built. Long rows go in blocks of rows about ``BLOCK_BYTES``
large, so that a block of the output stays in cache while every offset adds into
it: measured on (256, 10^5) float32, 1.9x a copy instead of 2.9x
(``benchmarks/bench_peers.py``). The other circulant kernels derive from it.
"""

from __future__ import annotations

import torch

from decentopt.comm.mixers.base import MixerBase, MixerUnavailable, register
from decentopt.topology import Network
from decentopt.topology.circulant import CirculantTopology, find_stencil

__all__ = ["BLOCK_BYTES", "ShiftMixer", "circulant_stencil"]

#: Bytes of output rows filled at a time (they stay in cache).
BLOCK_BYTES = 1 << 20


def circulant_stencil(network: Network, kernel: str) -> tuple[tuple[int, float], ...]:
    """The stencil of a circulant ``W``, or :class:`MixerUnavailable` naming ``kernel``."""
    stencil = find_stencil(network)
    if stencil is None:
        raise MixerUnavailable(
            f"kernel={kernel!r} needs a circulant topology (a ring or exponential graph); "
            f"{network.name} is not"
        )
    return stencil


@register
class ShiftMixer(MixerBase):
    name = "shift"

    def __init__(self, network: Network) -> None:
        self.n = network.n
        self.stencil = circulant_stencil(network, self.name)

    @staticmethod
    def suits(network: Network) -> bool:
        """``"auto"`` mixes graphs stored by their stencil this way (a dense ``W`` that
        happens to be circulant keeps its GEMM: the same numbers as before)."""
        return isinstance(network, CirculantTopology)

    def mix(self, flat: torch.Tensor, out: torch.Tensor | None, t: int) -> torch.Tensor:
        n, stencil = self.n, self.stencil
        target = torch.empty_like(flat) if out is None else out
        row_bytes = flat.shape[1] * flat.element_size()
        # states that fit in the last-level cache go in one block
        rows = n if row_bytes * n <= 8 * BLOCK_BYTES else max(1, BLOCK_BYTES // max(row_bytes, 1))
        center = dict(stencil).get(0, 0.0)
        for a in range(0, n, rows):
            b = min(a + rows, n)
            block = target[a:b]
            torch.mul(flat[a:b], center, out=block)
            for o, w in stencil:
                if not o:
                    continue
                # rows a+o .. b+o (mod n), in at most two contiguous pieces
                start = (a + o) % n
                first = min(b - a, n - start)
                block[:first].add_(flat[start : start + first], alpha=w)
                if first < b - a:
                    block[first:].add_(flat[: b - a - first], alpha=w)
        return target
