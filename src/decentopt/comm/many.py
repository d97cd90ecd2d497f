"""Several agents per process: rank ``r`` owns agents ``r k, ..., r k + k - 1``, ``(k, ...)`` rows.

With ``n`` agents on ``N`` processes (``k = n / N`` each), a gossip round forms, for every
agent ``i`` this rank owns,

.. math::
    (W z)_i = w_{ii} z_i + \\sum_{j \\in N_i} w_{ij} z_j ,

taking the rows of agents on this rank from memory and the others from the ranks that
own them: one message per pair of ranks that share an edge, carrying the rows (each
once) of the sender's agents that some agent of the receiver reads, all in one
``batch_isend_irecv``. The mix is then one ``(k, k + m) @ (k + m, D)`` product over this
rank's rows and the ``m`` received ones. Time-varying graphs work as with one agent per
process (every rank derives ``W_t`` alone), and compressed gossip sends each agent's
encoded message (decoded by the receiver with the sender agent's random stream), so the
iterates are the simulator's.

``stats.bytes_sent`` counts what this process sent over the network (rows read by
agents of the same process cost nothing); the per-agent totals are the graph's, as in
the simulator. RelaySGD's and AD-PSGD's per-neighbour messages (:meth:`exchange`) travel
the same way, one slot per pair of agents. Delayed gossip (rows kept in flight per
process) needs one agent per process and is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from decentopt.comm.base import rows_of
from decentopt.comm.distributed import DistributedCommunicator
from decentopt.compression import Compressor
from decentopt.compression import parse as parse_compression
from decentopt.topology import Network, TopologySchedule

__all__ = ["ManyAgentCommunicator"]


@dataclass(frozen=True)
class Plan:
    """One round's exchange for this rank's agents."""

    sends: tuple[tuple[int, tuple[int, ...]], ...]  # (rank, own agents' local rows it reads)
    receives: tuple[tuple[int, tuple[int, ...]], ...]  # (rank, its agents this rank reads)
    weights: np.ndarray  # (k, k + m): own rows, then the received ones in order


class ManyAgentCommunicator(DistributedCommunicator):
    """``n / world`` agents per process (module docstring).

    Args:
        topology: the graph; its ``n`` must be a multiple of the number of processes.
        timeout: seconds to wait for a neighbour's message before failing.
    """

    def __init__(self, topology: Network, *, timeout: float = 60.0) -> None:
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if topology.n % world or not topology.n:
            raise ValueError(
                f"the topology has n = {topology.n} agents, not a multiple of the job's {world} "
                f"processes; give every process as many agents (n = {world} x agents per process)"
            )
        self.agents_per_process = topology.n // world
        super().__init__(topology, timeout=timeout)  # its agents: rank, ..., rank + k - 1
        self._plans: dict[int, Plan] = {}

    # ------------------------------------------------------------ plans
    def _plan(self) -> Plan:
        at = self.stats.rounds
        static = not isinstance(self.topology, TopologySchedule)
        key = 0 if static else at
        if key in self._plans:
            return self._plans[key]
        k, first = self.agents_per_process, self.rank
        links = [self._links(first + a, at) for a in range(k)]
        reads: dict[int, set[int]] = {}  # rank -> its agents this rank reads
        sends: dict[int, set[int]] = {}  # rank -> own local rows it reads
        for a, (_, neighbours, targets) in enumerate(links):
            for j, _ in neighbours:
                if not first <= j < first + k:
                    reads.setdefault(j // k, set()).add(j)
            for j in targets:
                if not first <= j < first + k:
                    sends.setdefault(j // k, set()).add(a)
        receives = tuple((s, tuple(sorted(reads[s]))) for s in sorted(reads))
        where = {first + a: a for a in range(k)}
        for _, agents in receives:
            for j in agents:
                where[j] = len(where)
        weights = np.zeros((k, len(where)))
        for a, (own, neighbours, _) in enumerate(links):
            weights[a, a] += own
            for j, w in neighbours:
                weights[a, where[j]] += w
        outgoing = tuple((s, tuple(sorted(sends[s]))) for s in sorted(sends))
        plan = Plan(outgoing, receives, weights)
        if static:
            self._plans[key] = plan
        return plan

    def _route(self, rows: torch.Tensor) -> tuple[torch.Tensor, Plan]:
        """This round's ``(k + m, B)`` rows: this rank's ``rows`` (``(k, B)``), then the
        received ones; one counted round."""
        plan = self._plan()
        received = [rows.new_empty(len(agents), rows.shape[1]) for _, agents in plan.receives]
        out = [(s, rows[list(local)].contiguous()) for s, local in plan.sends]
        sent = self._p2p(
            [(s, t.view(-1)) for s, t in out],
            [(s, buf.view(-1)) for (s, _), buf in zip(plan.receives, received, strict=True)],
        )
        self._count(rows.shape[1] * rows.element_size(), sent)
        return torch.cat([rows, *received]), plan

    # ------------------------------------------------------------ gossip
    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        rows = self._rows(z, "mix")
        everyone, plan = self._route(rows)
        weights = torch.as_tensor(plan.weights, dtype=rows.dtype, device=rows.device)
        result = (weights @ everyone).to(z.device).view(z.shape)
        return result if out is None else out.copy_(result)

    def mix_compressed(
        self, z: torch.Tensor, compression: str | Compressor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q(z), W Q(z))``: each agent's encoded message travels; received ones are
        decoded with their sender agents' random streams."""
        codec = parse_compression(compression)
        flat = self._rows(z, "mix_compressed")
        per_agent = rows_of(flat, z)
        _, r, width = per_agent.shape
        round_ = self.stats.rounds
        k = self.agents_per_process
        data = torch.stack([codec.encode(per_agent[a], self.rank + a, round_) for a in range(k)])
        everyone, plan = self._route(data)
        agents = [self.rank + a for a in range(k)]
        agents += [j for _, received in plan.receives for j in received]
        pieces = [
            codec.decode(everyone[e], j, round_, r, width, flat.dtype) for e, j in enumerate(agents)
        ]
        decoded = torch.stack([piece.reshape(-1) for piece in pieces])
        weights = torch.as_tensor(plan.weights, dtype=flat.dtype, device=flat.device)
        own = decoded[:k].to(z.device).view(z.shape)
        return own, (weights @ decoded).to(z.device).view(z.shape)
