"""The communicator interface: everything that crosses agents goes through it.

Algorithms do only row-wise (per-agent) arithmetic on tensors whose first axis
is the agent axis, and call :meth:`Communicator.mix` to combine with
neighbours. In the simulator a tensor holds all ``n`` agents, ``(n, ...)``; on a
rank of the distributed backend it holds the agents that rank owns, ``(1, ...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from decentopt.topology import Network

__all__ = ["CommStats", "Communicator"]


@dataclass
class CommStats:
    """Running totals of communication.

    ``bytes_sent`` counts what this process sent (all agents in the simulator,
    one agent on a rank); the other totals are over all agents of the graph, so
    every process of a job holds the same values: ``bytes_per_agent`` (the mean
    over agents), and per round the busiest agent's messages and bytes, which
    :class:`~decentopt.comm.cost.NetworkModel` turns into time.
    """

    rounds: int = 0
    bytes_sent: int = 0
    bytes_per_agent: float = 0.0
    busiest_messages: int = 0
    busiest_bytes: int = 0

    def add_round(self, mean_messages: float, max_messages: int, payload: int, sent: int) -> None:
        """Count one round: messages of ``payload`` bytes each; ``sent`` bytes left this process."""
        self.rounds += 1
        self.bytes_sent += sent
        self.bytes_per_agent += mean_messages * payload
        self.busiest_messages += max_messages
        self.busiest_bytes += max_messages * payload

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)


@runtime_checkable
class Communicator(Protocol):
    """Mixes agent-first tensors with the mixing matrix ``W``."""

    stats: CommStats
    #: The graph (``W``, or ``W_t`` by round) over all agents, whichever rows this process owns.
    topology: Network

    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Return ``W z`` (``W_t z`` at round ``t = stats.rounds``) for the rows this process
        owns: one gossip round.

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
