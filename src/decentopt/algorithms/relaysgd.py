"""RelaySGD: SGD whose models are summed exactly by relaying over a tree (Vogels et al., 2021)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms.base import MomentumHyperParams, check_initial_point, momentum_direction
from decentopt.algorithms.registry import register
from decentopt.communicator import Relaying
from decentopt.updates import add_scaled


class RelayState(NamedTuple):
    x: torch.Tensor
    x0: torch.Tensor  # the initial point: stands in for the agents not heard from yet
    m: torch.Tensor
    received: torch.Tensor  # (n, slots, ...): what each neighbour relayed last round
    counts: torch.Tensor  # (n, slots, 1, ...): how many agents' models each of those sums
    t: int = 0


def _nothing_received(x: torch.Tensor, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero sums ``(n, slots, ...)`` and counts ``(n, slots, 1, ...)`` for iterates ``x``."""
    n, rest = x.shape[0], x.shape[1:]
    return x.new_zeros((n, slots, *rest)), x.new_zeros((n, slots) + (1,) * len(rest))


@register
@dataclass(frozen=True)
class RelaySGD(MomentumHyperParams):
    """RelaySGD: every agent relays to each tree neighbour the sum of its own half-step
    model and what its other neighbours relayed, with a count of the models summed.

    .. math::
        M_i &= \\beta M_i + (1 - \\beta) g_i,
        \\qquad x_i^{(t+\\frac12)} = x_i^{(t)} - \\alpha_t M_i, \\\\
        m_{i\\to j}^{(t)} &= x_i^{(t+\\frac12)}
        + \\sum_{k \\in N_i \\setminus j} m_{k\\to i}^{(t-1)},
        \\qquad c_{i\\to j}^{(t)} = 1 + \\sum_{k \\in N_i \\setminus j} c_{k\\to i}^{(t-1)}, \\\\
        x_i^{(t+1)} &= \\frac1n\\Big(x_i^{(t+\\frac12)} + \\sum_{k \\in N_i} m_{k\\to i}^{(t)}
        + \\big(n - 1 - \\textstyle\\sum_{k} c_{k\\to i}^{(t)}\\big)\\, x_i^{(0)}\\Big),

    with ``m^{(-1)} = c^{(-1)} = 0``. On a tree each agent's model reaches every other
    exactly once: ``x_i^{(t+1)}`` is the uniform average over all agents ``j`` of
    ``x_j^{(t - k + 1/2)}`` with ``k = max(d(i, j) - 1, 0)`` (a neighbour's half step
    arrives in the same round, each further hop costs one; ``x^{(0)}`` for agents more
    than ``t + 1`` hops away), tested as that identity. One message per tree edge and
    direction per round (the count travels with it). ``beta = 0`` is the paper's
    Algorithm 1; its CIFAR experiments add local momentum, as ``beta > 0`` does here.
    Departure: the paper fills the agents not yet heard from with the common
    initial point; here each agent fills with its own (the same when agents start
    alike, as they do in every run of this library).

    Reference: T. Vogels, L. He, A. Koloskova, T. Lin, S. P. Karimireddy, S. U. Stich,
    M. Jaggi, "RelaySum for decentralized deep learning on heterogeneous data",
    NeurIPS 2021, Algorithm 1.
    """

    name: ClassVar[str] = "relaysgd"
    requires: ClassVar[frozenset[str]] = frozenset({"tree", "static"})
    sends: ClassVar[tuple[str, ...] | None] = None
    mixes: ClassVar[bool] = False  # one message of its own per neighbour (exchange)
    agent_fields: ClassVar[tuple[str, ...]] = ("counts",)
    per_neighbour: ClassVar[tuple[str, ...]] = ("received", "counts")

    def init(self, x0: torch.Tensor) -> RelayState:
        x0 = check_initial_point(x0, self.name)
        # no messages yet (m, c = 0): the slot axis is sized by Method.init for its
        # communicator, or else at the first exchange
        received, counts = _nothing_received(x0, 0)
        return RelayState(x0, x0.clone(), torch.zeros_like(x0), received, counts)

    def step(self, state: RelayState, grad: torch.Tensor, comm: Relaying) -> RelayState:
        m, direction = momentum_direction(state.m, grad, self)
        half = add_scaled(state.x, direction, -self.lr_at(state.t))
        received, counts = state.received, state.counts
        if received.shape[1] == 0:
            received, counts = _nothing_received(half, comm.slots)
        relay = (half + received.sum(dim=1)).unsqueeze(1) - received
        relay_counts = (1 + counts.sum(dim=1)).unsqueeze(1) - counts
        received, counts = comm.exchange([relay, relay_counts])
        n = comm.topology.n
        missing = n - 1 - counts.sum(dim=1)
        x = (half + received.sum(dim=1)).add_(missing * state.x0).div_(n)
        return RelayState(x=x, x0=state.x0, m=m, received=received, counts=counts, t=state.t + 1)
