"""The simulator's communicator for bounded staleness: every agent mixes each neighbour's
message of the age it would have used over processes.

Under ``delayed(tau, staleness=S)`` a rank uses each neighbour's newest message that has
arrived by its own clock (:mod:`decentopt.comm.posted`); which one depends on the agents'
compute times and the links, which a time model gives
(:func:`decentopt.driver.timeline.stale_timeline`). :class:`AgedCommunicator` takes that
schedule of ages ``delta_ij(t)`` and mixes, in one counted round,

.. math:: w_{ii} Z_i^{(t - \\tau)} + \\sum_{j \\ne i} w_{ij} Z_j^{(t - \\delta_{ij}(t))}
    = (W Z^{(t-\\tau)})_i + \\sum_{j:\\ \\delta_{ij}(t) > \\tau}
      w_{ij} \\big(Z_j^{(t - \\delta_{ij}(t))} - Z_j^{(t-\\tau)}\\big),

the delayed gossip's own-row correction then giving ``w_ii Z_i(t)``. A round whose ages are
all ``tau`` is the plain delay's mix, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.topology import Network, TopologySchedule

__all__ = ["AgedCommunicator", "Ages"]

#: ``(payload, steps) -> (steps, n, K)`` the ages of the messages each agent uses from its
#: neighbours (in the order of ``topology.neighbors``), for messages of ``payload`` bytes
#: per column; the first ``steps`` rows of a longer schedule are the same.
Ages = Callable[[float, int], np.ndarray]


class AgedCommunicator(SimulatedCommunicator):
    """A :class:`SimulatedCommunicator` whose delayed gossip under bounded staleness mixes
    the neighbours' messages at the ages ``schedule`` gives (module docstring).

    Args:
        topology: a static graph (bounded staleness needs one).
        schedule: the ages (:data:`Ages`), asked once the first round's payload is known.
        steps: how many rounds to ask for at first (more are asked for when a run goes on).
        columns: the columns (repetitions) of a row: a message's payload is per column.
        kernel: as :class:`SimulatedCommunicator`.
    """

    def __init__(
        self, topology: Network, schedule: Ages, steps: int, columns: int = 1, kernel: str = "auto"
    ) -> None:
        if isinstance(topology, TopologySchedule):
            raise ValueError(
                "bounded staleness needs a static graph; give delayed(tau) no staleness"
            )
        super().__init__(topology, kernel=kernel)
        self.schedule = schedule
        self.planned = max(1, steps)
        self.columns = max(1, columns)
        #: ``(planned rounds, n, K)``: the ages of the schedule, round by round (asked for
        #: at the first round); ``ages[t, i, k]`` is that of ``topology.neighbors[i][k]``
        self.ages: np.ndarray | None = None
        self._payload = 0.0
        peers = [(i, k, j) for i, row in enumerate(topology.neighbors) for k, j in enumerate(row)]
        self._links = torch.tensor(peers, dtype=torch.int64).reshape(-1, 3)
        self._weights = topology.W[self._links[:, 0], self._links[:, 2]]

    def _ages_at(self, t: int, payload: float) -> np.ndarray:
        if self.ages is None:
            self._payload = payload
            self.ages = self.schedule(payload, self.planned)
        while t >= self.ages.shape[0]:  # a run longer than planned: the same schedule, longer
            self.planned *= 2
            self.ages = self.schedule(self._payload, self.planned)
        return self.ages[t]

    def mix_aged(self, rounds: Sequence[Sequence[torch.Tensor]], tau: int) -> list[torch.Tensor]:
        """Per tensor, ``w_ii z_i(t - tau) + sum_j w_ij z_j(t - delta_ij(t))``: ``rounds[a]``
        are the tensors sent ``tau + a`` rounds ago; one round, counted as the plain mix."""
        fresh = rounds[0]
        row = sum(z[0].numel() * z.element_size() for z in fresh)
        ages = self._ages_at(self.stats.rounds, row / self.columns)
        edges = self._links
        age = torch.from_numpy(ages)[edges[:, 0], edges[:, 1]]
        out = self.mix_many(fresh)
        for a in age[age > tau].unique().tolist():
            late = edges[age == a].to(fresh[0].device)
            w = self._weights[age == a]
            for s, (now, then) in enumerate(zip(fresh, rounds[a - tau], strict=True)):
                scale = w.to(device=now.device, dtype=now.dtype).view((-1,) + (1,) * (now.ndim - 1))
                gap = then[late[:, 2]] - now[late[:, 2]]
                out[s] = out[s].index_add(0, late[:, 0], scale * gap)
        return out
