"""AD-PSGD: asynchronous decentralized parallel SGD (Lian, Zhang, Zhang & Liu, ICML 2018)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from decentopt._schema import bounded
from decentopt.algorithms.base import HyperParams
from decentopt.algorithms.dsgd import DSGDState
from decentopt.algorithms.registry import register
from decentopt.communicator import Communicator
from decentopt.updates import add_scaled

__all__ = ["ADPSGD", "ADPSGDState", "random_matching"]


#: AD-PSGD keeps DSGD's state.
ADPSGDState = DSGDState


def random_matching(neighbors: tuple[tuple[int, ...], ...], seed: int, t: int) -> np.ndarray:
    """``partner[i]``: the neighbour agent ``i`` averages with in iteration ``t`` (``-1``:
    none): a maximal matching of the graph's edges taken in a random order drawn from
    ``(seed, t)``, the same on every process."""
    edges = np.array([(i, j) for i, peers in enumerate(neighbors) for j in peers if i < j])
    partner = np.full(len(neighbors), -1, dtype=np.int64)
    for i, j in edges[np.random.default_rng([seed, t]).permutation(len(edges))]:
        if partner[i] < 0 and partner[j] < 0:
            partner[i], partner[j] = j, i
    return partner


@register
@dataclass(frozen=True)
class ADPSGD(HyperParams):
    """AD-PSGD: each update averages with one random neighbour, then steps along a gradient
    computed on the iterate read before that averaging.

    The paper's update, agent ``i`` picking neighbour ``j`` while it computes
    ``g_i = grad F_i(\\hat x_i)`` on the copy ``\\hat x_i`` it read earlier:

    .. math::
        x_i, x_j \\leftarrow \\tfrac12 (x_i + x_j), \\qquad
        x_i \\leftarrow x_i - \\alpha\\, g_i, \\qquad \\text{i.e.} \\qquad
        X^{(k+1)} = W_k X^{(k)} - \\alpha\\, \\partial F(\\hat X^{(k)}),

    with ``W_k`` the pairwise averaging of one edge. Synchronous equivalent here: every
    iteration, all agents of a random maximal matching of the graph (``random_matching``,
    drawn from ``seed`` and ``t``) average in pairs while their gradients are computed on
    the iterates before the averaging, ``X^{(t+1)} = W_t X^{(t)} - alpha G(X^{(t)})``.
    Departures: the paper's agents update one at a time at their own pace, with staleness
    from the updates of others in between; here the staleness is one averaging and every
    agent makes one update per iteration (the time model charges the agents' throughput
    instead, :mod:`decentopt.driver.timeline`). The pair's messages travel through
    ``exchange``, so a round is counted as one message to every neighbour (an upper bound
    on the paper's one).

    Reference: X. Lian, W. Zhang, C. Zhang, J. Liu, "Asynchronous decentralized parallel
    stochastic gradient descent", ICML 2018, Algorithm 1.
    """

    seed: int = bounded(0, minimum=0)

    name: ClassVar[str] = "ad_psgd"
    State: ClassVar[type] = ADPSGDState
    requires: ClassVar[frozenset[str]] = frozenset({"static"})
    sends: ClassVar[tuple[str, ...] | None] = None
    mixes: ClassVar[bool] = False
    asynchronous: ClassVar[bool] = True
    reference: ClassVar[str] = "Lian, Zhang, Zhang & Liu, ICML 2018"

    def step(self, state: ADPSGDState, grad: torch.Tensor, comm: Communicator) -> ADPSGDState:
        x = state.x
        neighbors = comm.topology.neighbors
        partner = random_matching(neighbors, self.seed, state.t)
        rows = x.shape[0]
        first = 0 if rows == len(neighbors) else int(getattr(comm, "rank", 0))
        # the rows paired this iteration, and the slot of each one's partner
        mine = enumerate(range(first, first + rows))
        pairs = [(r, sorted(neighbors[i]).index(partner[i])) for r, i in mine if partner[i] >= 0]
        paired, where = torch.tensor(pairs, dtype=torch.int64, device=x.device).reshape(-1, 2).T
        sent = torch.zeros((rows, comm.slots, *x.shape[1:]), dtype=x.dtype, device=x.device)
        sent[paired, where] = x[paired]
        got = comm.exchange([sent])[0]
        averaged = x.clone()
        averaged[paired] = (x[paired] + got[paired, where]) / 2
        return ADPSGDState(x=add_scaled(averaged, grad, -self.lr_at(state.t)), t=state.t + 1)
