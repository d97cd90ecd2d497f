"""A user's own gossip and compression operator, outside the package.

``drop(p)``: every round each agent's message is lost with probability ``p``, and its
neighbours use their own value in its place. ``half``: each entry travels as a 16-bit
float. Load this file with ``decentopt run SPEC --plugin examples/plugin_gossip.py``,
``plugins = ["plugin_gossip.py"]`` in a specification, or by importing it;
``docs/extending.md`` explains every line.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from decentopt.algorithms import bounded
from decentopt.algorithms.gossips import SUM, Channel, Gossip, register_gossip
from decentopt.compression import Compressor, register_compressor


@register_gossip
@dataclass(frozen=True)
class Drop(Gossip):
    """Gossip over an unreliable network: agent ``j``'s message of round ``t`` is lost with
    probability ``p`` (``b_j = 0``, drawn from ``seed`` and ``t``, the same in every process),
    and whoever should have received it uses its own value instead:

    .. math::
        \\text{mix}(Z)_i = Z_i + \\sum_j w_{ij} b_j (Z_j - Z_i)
        = Z_i + [W (b Z)]_i - [W b]_i Z_i.

    The rows of the effective matrix sum to one (agreement is kept) but its columns do
    not, so the average drifts: a rule that sends a sum (gradient tracking) is refused.
    ``p = 0`` is exact mixing.
    """

    p: float = bounded(0.1, minimum=0, below=1, note="the chance a message is lost")
    seed: int = bounded(0, minimum=0)

    name: ClassVar[str] = "drop"

    def refuses(self, rule: Any) -> str:
        if rule.sends is not None and SUM in rule.sends:
            return f"{rule.name} sends a sum, which lost messages would not keep"
        return super().refuses(rule)

    def bind(self, fields, comm, x, sends) -> Channel:  # type: ignore[no-untyped-def]
        return DropChannel(comm, fields, sends, self)


class DropChannel(Channel):
    """One round of :class:`Drop`: the kept messages and the mask travel in one message."""

    gossip: Drop

    def round(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        kept = self.kept(zs[0])
        *mixed, w_kept = self.comm.mix_many([*(kept * z for z in zs), kept])
        return [z + wz - w_kept * z for z, wz in zip(zs, mixed, strict=True)]

    def kept(self, z: torch.Tensor) -> torch.Tensor:
        """``b`` for the rows of ``z``: every agent's in the simulator, its own on a rank."""
        n, t = self.topology.n, self.stats.rounds
        generator = torch.Generator().manual_seed(1_000_003 * self.gossip.seed + t)
        b = torch.rand(n, generator=generator, dtype=torch.float64) >= self.gossip.p
        first = 0 if z.shape[0] == n else self.comm.rank  # type: ignore[attr-defined]
        rows = b[first : first + z.shape[0]].to(dtype=z.dtype, device=z.device)
        return rows.view(-1, *[1] * (z.ndim - 1))


@register_compressor
@dataclass(frozen=True)
class Half(Compressor):
    """Each entry as a 16-bit float: half the bytes of float32, a relative error of at
    most ``2^-11`` per entry in float16's normal range (``delta = 1 - 2^-22``)."""

    name: ClassVar[str] = "half"

    def delta(self, k: int) -> float:
        return 1.0 - 2.0**-22

    def row_bytes(self, k: int, dtype: torch.dtype) -> int:
        return 2 * k

    def encode_row(self, row: torch.Tensor, agent: int, index: int, round_: int) -> torch.Tensor:
        return row.to(torch.float16).contiguous().view(torch.uint8)

    def decode_row(self, data, agent, index, round_, k, dtype):  # type: ignore[no-untyped-def]
        return data.contiguous().view(torch.float16).to(dtype)

    def compress(self, z: torch.Tensor, first_agent: int, round_: int) -> torch.Tensor:
        return z.to(torch.float16).to(z.dtype)
