"""An agent as a group of processes: all-reduce inside, gossip between, one shard per link.

With ``P`` processes per agent, processes ``a P, ..., a P + P - 1`` run agent ``a``
(torchrun's ``--nnodes A --nproc-per-node P``: one agent per node). Inside an agent
the ``P`` processes average their gradients (one all-reduce, as DDP) and hold identical
parameters, so every one of them holds the agent's whole row and runs the algorithm's
row-wise arithmetic on it. Between agents the row is cut into ``P`` shards of
``ceil(D / P)`` entries: the process at position ``p`` sends shard ``p`` to the process
at position ``p`` of each agent that reads its row and receives theirs, so an agent's
``P`` links carry its message in parallel, each ``1/P`` of the row:

.. math::
    (W z)_i^{(p)} = w_{ii}\\, z_i^{(p)} + \\sum_{j \\in N_i} w_{ij}\\, z_j^{(p)},

then one all-gather inside the agent puts the mixed shards back together. Encoded
messages (compressed gossip) and RelaySGD's per-neighbour messages are cut the same
way (every process of an agent encodes the same row with the agent's random stream,
so they hold the same message) and gathered whole before they are decoded.

Delayed gossip posts whole rows to single processes and keeps them in flight across
steps: it needs one agent per process and is refused here in one line.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist

from decentopt.comm.distributed import DistributedCommunicator, through_host

__all__ = ["AgentGroup", "GroupCommunicator", "agent_size"]


@runtime_checkable
class AgentGroup(Protocol):
    """A communicator whose agent spans several processes: what an optimizer over it does
    inside the agent (average gradients, start from one point)."""

    procs_per_agent: int

    def average_gradients(self, grad: torch.Tensor) -> torch.Tensor:
        """The mean of ``grad`` over the agent's processes."""
        ...

    def share_within_agent(self, tensors: Iterable[torch.Tensor]) -> None:
        """Give every process of the agent its first process's values of ``tensors``."""
        ...


def agent_size(given: int | None = None) -> int:
    """``given``, else ``DECENTOPT_PROCS_PER_AGENT`` (``decentopt launch --procs-per-agent``),
    else the processes of one node (torchrun's ``LOCAL_WORLD_SIZE``, ``--nproc-per-node``)."""
    if given is not None:
        return int(given)
    text = os.environ.get("DECENTOPT_PROCS_PER_AGENT") or os.environ.get("LOCAL_WORLD_SIZE", "1")
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"DECENTOPT_PROCS_PER_AGENT / LOCAL_WORLD_SIZE = {text!r} is not a whole number"
        ) from None


class GroupCommunicator(DistributedCommunicator):
    """Gossip between agents of ``procs_per_agent`` processes each (module docstring).

    Args:
        topology: the graph over the agents: ``n`` = processes / ``procs_per_agent``.
        procs_per_agent: processes per agent; by default ``decentopt launch
            --procs-per-agent``'s, else the processes of one node (torchrun's
            ``--nproc-per-node``).
        timeout: seconds to wait for a neighbour's message (or the agent's collectives).
    """

    def __init__(
        self, topology: Any, *, procs_per_agent: int | None = None, timeout: float = 60.0
    ) -> None:
        P = agent_size(procs_per_agent)
        if not dist.is_available() or not dist.is_initialized():
            super().__init__(topology, timeout=timeout)  # its one line on a missing group
        world = dist.get_world_size()
        if P < 1 or world % P:
            raise ValueError(
                f"procs_per_agent = {P} does not divide the job's {world} processes; give a "
                f"divisor of {world} (torchrun --nnodes A --nproc-per-node P: A * P processes)"
            )
        self.procs_per_agent = P
        self.position = dist.get_rank() % P  # this process's place in its agent
        #: the agent's processes (every process builds every agent's group, in order)
        self.agent_group, _ = dist.new_subgroups(group_size=P)
        super().__init__(topology, timeout=timeout)

    # ------------------------------------------------------------ placement
    def _mismatch(self, n: int) -> str:
        P = self.procs_per_agent
        return (
            f"the topology has n = {n} agents but the job's {self.world_size} processes in "
            f"agents of {P} make {self.world_size // P}; start {n * P} processes (torchrun "
            f"--nnodes {n} --nproc-per-node {P}, or decentopt launch -n {n * P} "
            f"--procs-per-agent {P})"
        )

    def _process(self, agent: int) -> int:
        """The process at this one's position in ``agent``."""
        return agent * self.procs_per_agent + self.position

    # ------------------------------------------------------------ shards
    def _shard(self, flat: torch.Tensor) -> torch.Tensor:
        """This position's shard of a flat message: ``ceil(numel / P)`` entries (the last
        shards padded)."""
        c = max(1, math.ceil(flat.numel() / self.procs_per_agent))
        part = flat[self.position * c : (self.position + 1) * c]
        if part.numel() == c:
            return part.contiguous()
        return torch.cat([part, part.new_zeros(c - part.numel())])

    def _gather(self, shards: torch.Tensor, numel: int, what: str) -> torch.Tensor:
        """``shards`` (``(m, c)``, this position's) of every position, put together:
        ``(m, numel)``, in one all-gather inside the agent."""
        m, c = shards.shape
        if self.procs_per_agent == 1:
            return shards[:, :numel]
        out = shards.new_empty(self.procs_per_agent, m, c)
        work = dist.all_gather(
            list(out.unbind(0)), shards.contiguous(), group=self.agent_group, async_op=True
        )
        self.await_collective(work, what, "a process of this agent died, hung or disconnected")
        return out.permute(1, 0, 2).reshape(m, -1)[:, :numel]

    def _p2p(
        self,
        sends: Sequence[tuple[int, torch.Tensor]],
        receives: Sequence[tuple[int, torch.Tensor]],
    ) -> int:
        """Whole messages between agents, each link carrying this position's shard (the
        bytes returned); the received shards are gathered inside the agent into the buffers."""
        out = [(self._process(k), self._shard(t.reshape(-1))) for k, t in sends]
        bufs = [(j, self._shard(buf.reshape(-1)).clone()) for j, buf in receives]
        sent = super()._p2p(out, [(self._process(j), b) for j, b in bufs])
        if receives:
            numel = receives[0][1].numel()
            whole = self._gather(torch.stack([b for _, b in bufs]), numel, "gathering messages")
            for (_, buf), row in zip(receives, whole, strict=True):
                buf.view(-1).copy_(row)
        return sent

    # ------------------------------------------------------------ gossip
    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        flat = self._rows(z, "mix")[0]
        self_weight, neighbors, targets = self._links(self.rank)
        mine = self._shard(flat)
        received = [(self._process(j), w, torch.empty_like(mine)) for j, w in neighbors]
        sent = DistributedCommunicator._p2p(
            self,
            [(self._process(k), mine) for k in targets],
            [(j, buf) for j, _, buf in received],
        )
        mixed = mine * self_weight
        for _, w, buf in received:
            mixed.add_(buf, alpha=w)
        whole = self._gather(mixed[None], flat.numel(), "gathering the mixed row")[0]
        self._count(flat.numel() * flat.element_size(), sent)
        result = whole.to(z.device).view(z.shape)
        return result if out is None else out.copy_(result)

    # ------------------------------------------------------------ inside the agent
    def average_gradients(self, grad: torch.Tensor) -> torch.Tensor:
        """The mean of ``grad`` over the agent's processes (one all-reduce, as DDP)."""
        if self.procs_per_agent == 1:
            return grad
        total = self._host(grad.detach().clone())
        work = dist.all_reduce(total, group=self.agent_group, async_op=True)
        self.await_collective(
            work, "averaging the agent's gradients", "a process of this agent died or hung"
        )
        return total.div_(self.procs_per_agent).to(grad.device)

    @torch.no_grad()
    def share_within_agent(self, tensors: Iterable[torch.Tensor]) -> None:
        """Every process of the agent takes its first process's values of ``tensors``."""
        first = self.rank * self.procs_per_agent
        for t in tensors:
            through_host(t.detach(), lambda h: dist.broadcast(h, first, group=self.agent_group))
