"""The communicator interface: everything that crosses agents goes through it.

Algorithms do only row-wise (per-agent) arithmetic on tensors whose first axis
is the agent axis, and call :meth:`Communicator.mix` to combine with
neighbours. In the simulator a tensor holds all ``n`` agents, ``(n, ...)``; on a
rank of the distributed backend it holds the agents that rank owns, ``(1, ...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from decentopt.topology.topology import Topology

__all__ = ["CommStats", "Communicator"]


@dataclass
class CommStats:
    """Running totals of communication: gossip rounds and bytes sent over edges."""

    rounds: int = 0
    bytes_sent: int = 0

    def reset(self) -> None:
        self.rounds = 0
        self.bytes_sent = 0


@runtime_checkable
class Communicator(Protocol):
    """Mixes agent-first tensors with the mixing matrix ``W``."""

    stats: CommStats
    #: The graph (and ``W``) over all agents, whichever rows this process owns.
    topology: Topology

    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Return ``W z`` for the rows this process owns (one gossip round).

        With ``out`` the result is written into that buffer and returned.
        """
        ...

    def mix_many(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """``[W z for z in zs]`` in one gossip round (the tensors travel packed together)."""
        ...

    def mean(self, z: torch.Tensor) -> torch.Tensor:
        """Exact average over all agents (for metrics only, not a gossip round)."""
        ...

    def barrier(self, stage: str) -> None:
        """Wait for every process of the job (a no-op in one process); ``stage`` names it."""
        ...
