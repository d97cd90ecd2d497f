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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from decentopt.comm.base import rows_of, slot_table
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
    mean_messages: float
    max_messages: int


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
        super().__init__(topology, timeout=timeout)
        self.first = self.rank  # this process's agents: first, ..., first + k - 1
        self._plans: dict[int, Plan] = {}

    def _agent_of(self, process: int) -> int:
        return process * self.agents_per_process

    def _agents(self) -> int:
        return self.world_size * self.agents_per_process

    def _finished(self, peer: int, made: int) -> str | None:
        return super()._finished(self._agent_of(peer), made)

    # ------------------------------------------------------------ plans
    def _links(self, i: int, at: int) -> tuple[float, tuple[tuple[int, float], ...], tuple]:
        """Agent ``i``'s self weight, the rows it reads (with weights), the agents reading it."""
        if isinstance(self.topology, TopologySchedule):
            this_round = self.topology.at(at)
            return (
                float(this_round.self_weight[i]),
                this_round.neighbours(i),
                this_round.targets(i),
            )
        W = self.topology.W
        reads = tuple((j, float(W[i, j])) for j in self.topology.neighbors[i])
        return float(W[i, i]), reads, tuple(self.topology.out_neighbors[i])

    def _plan(self) -> Plan:
        at = self.stats.rounds
        key = 0 if self._schedule is None else at
        if key in self._plans:
            return self._plans[key]
        k, first = self.agents_per_process, self.first
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
        if self._schedule is None:
            degrees = self.topology.degrees
            mean, most = float(degrees.mean()), int(degrees.max(initial=0))
        else:
            sent = self.topology.at(at).messages
            mean, most = float(sent.mean()), int(sent.max(initial=0))
        outgoing = tuple((s, tuple(sorted(sends[s]))) for s in sorted(sends))
        plan = Plan(outgoing, receives, weights, mean, most)
        if self._schedule is None:
            self._plans[key] = plan
        return plan

    def _route(self, rows: torch.Tensor) -> tuple[torch.Tensor, Plan]:
        """This round's ``(k + m, B)`` rows: this rank's ``rows`` (``(k, B)``), then the
        received ones; one counted round."""
        plan = self._plan()
        received = [rows.new_empty(len(agents), rows.shape[1]) for _, agents in plan.receives]
        out = [(s, rows[list(local)].contiguous()) for s, local in plan.sends]
        self._p2p(
            [(s, t.view(-1)) for s, t in out],
            [(s, buf.view(-1)) for (s, _), buf in zip(plan.receives, received, strict=True)],
        )
        payload = rows.shape[1] * rows.element_size()
        sent = sum(t.numel() for _, t in out) * rows.element_size()
        self.stats.add_round(plan.mean_messages, plan.max_messages, payload, sent)
        return torch.cat([rows, *received]), plan

    def _rows(self, z: torch.Tensor, what: str) -> torch.Tensor:
        k = self.agents_per_process
        if z.shape[0] != k:
            raise ValueError(
                f"this process owns {k} agents: {what} expects shape ({k}, ...); "
                f"got {tuple(z.shape)}"
            )
        return self._host(z.detach().reshape(k, -1).contiguous())

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
        data = torch.stack([codec.encode(per_agent[a], self.first + a, round_) for a in range(k)])
        everyone, plan = self._route(data)
        agents = [self.first + a for a in range(k)]
        agents += [j for _, received in plan.receives for j in received]
        pieces = [
            codec.decode(everyone[e], j, round_, r, width, flat.dtype) for e, j in enumerate(agents)
        ]
        decoded = torch.stack([piece.reshape(-1) for piece in pieces])
        weights = torch.as_tensor(plan.weights, dtype=flat.dtype, device=flat.device)
        own = decoded[:k].to(z.device).view(z.shape)
        return own, (weights @ decoded).to(z.device).view(z.shape)

    def exchange(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Slot ``s`` of each agent's tensors to its ``s``-th neighbour (in memory where that
        agent is on this rank; else packed, per pair of ranks, in ascending (sender,
        receiver) order); returns what each agent's neighbours sent it, in their slots."""
        k, first = self.agents_per_process, self.first
        S = self._check_exchange(tensors, k)
        degrees = self.topology.degrees
        messages = (float(degrees.mean()), int(degrees.max(initial=0)))
        if S == 0:  # one agent: a round without messages
            self.stats.add_round(*messages, 0, 0)
            return [t.clone() for t in tensors]
        rows = [self._host(t.detach().reshape(k, S, -1)) for t in tensors]
        widths = [r.shape[2] for r in rows]
        packed = torch.cat(rows, dim=2)
        received = torch.zeros_like(packed)
        table, _ = slot_table(self.topology.neighbors)
        slot = {(int(j), i): t for i in range(len(table)) for t, j in enumerate(table[i])}
        out: dict[int, list[torch.Tensor]] = {}
        into: dict[int, list[tuple[int, int]]] = {}
        for i in range(self.topology.n):  # pairs (i, j) in ascending order on both sides
            for s, j in enumerate(table[i]):
                j = int(j)
                mine, theirs = first <= i < first + k, first <= j < first + k
                if j < 0 or not (mine or theirs):
                    continue
                if mine and theirs:
                    received[j - first, slot[(i, j)]] = packed[i - first, s]
                elif mine:
                    out.setdefault(j // k, []).append(packed[i - first, s])
                else:
                    into.setdefault(i // k, []).append((j - first, slot[(i, j)]))
        bufs = {q: packed.new_empty(len(pairs), packed.shape[2]) for q, pairs in into.items()}
        self._p2p(
            [(q, torch.stack(parts).view(-1)) for q, parts in out.items()],
            [(q, buf.view(-1)) for q, buf in bufs.items()],
        )
        for q, pairs in into.items():
            for (b, t), row in zip(pairs, bufs[q], strict=True):
                received[b, t] = row
        payload = packed.shape[2] * packed.element_size()
        sent = sum(len(parts) for parts in out.values()) * payload
        self.stats.add_round(*messages, payload, sent)
        parts = received.to(tensors[0].device).split(widths, dim=2)
        return [p.reshape(t.shape) for p, t in zip(parts, tensors, strict=True)]

    @property
    def slots(self) -> int:
        return self._check_exchange()

    def mix_posted(
        self, rounds: Sequence[Sequence[torch.Tensor]], bound: int
    ) -> list[torch.Tensor]:
        raise ValueError(
            f"delayed gossip keeps rows in flight per process: it needs one agent per process, "
            f"not {self.agents_per_process}; use DistributedCommunicator, or a gossip that is "
            "not delayed"
        )

    def mean(self, z: torch.Tensor) -> torch.Tensor:
        """Exact average over all agents of all ranks (for metrics)."""
        total = self._host(z.detach().sum(dim=0, keepdim=True))
        work = dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        what = "an average over all ranks (all_reduce)"
        self.await_collective(work, what, "a rank died, hung or disconnected")
        return (total / self.topology.n).to(z.device)
