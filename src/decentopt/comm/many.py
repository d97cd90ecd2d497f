"""Several agents per process: rank ``r`` owns agents ``r k, ..., r k + k - 1``, ``(k, ...)`` rows.

With ``n`` agents on ``N`` processes (``k = n / N`` each), a gossip round forms, for every
agent ``i`` this rank owns,

.. math::
    (W z)_i = w_{ii} z_i + \\sum_{j \\in N_i} w_{ij} z_j ,

taking the rows of agents on this rank from memory and the others from the ranks that
own them: one message per pair of ranks that share an edge, carrying the rows (each
once) of the sender's agents that some agent of the receiver reads, all in one
``batch_isend_irecv`` (:mod:`~decentopt.comm.routes`). Time-varying graphs work as with one
agent per process (every rank derives ``W_t`` alone), and compressed gossip sends each agent's
encoded message (decoded by the receiver with the sender agent's random stream), so the
iterates are the simulator's.

``stats.bytes_sent`` counts what this process sent over the network (rows read by
agents of the same process cost nothing); the per-agent totals are the graph's, as in
the simulator. RelaySGD's and AD-PSGD's per-neighbour messages (:meth:`exchange`) travel
the same way, one slot per pair of agents. Delayed gossip (rows kept in flight per
process) needs one agent per process and is refused in one line.
"""

from __future__ import annotations

import torch.distributed as dist

from decentopt.comm.distributed import DistributedCommunicator
from decentopt.topology import Network

__all__ = ["ManyAgentCommunicator"]


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
