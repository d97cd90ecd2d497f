"""A user's own method, outside the package: DSGD with gossiped momentum.

Load it with ``decentopt run SPEC --plugin examples/plugin_method.py``, with
``plugins = ["plugin_method.py"]`` in a specification, or by importing this file.
``docs/extending.md`` explains every line.
"""

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from decentopt.algorithms import MomentumHyperParams, momentum_direction, register
from decentopt.comm.base import Communicator


class GossipedMomentumState(NamedTuple):
    x: torch.Tensor  # the iterate, (n, ...) agent-first
    m: torch.Tensor  # the momentum buffer, gossiped with x
    t: int = 0  # the iteration counter


@register
@dataclass(frozen=True)
class GossipedMomentumDSGD(MomentumHyperParams):
    """DSGD with gossiped momentum: the agents mix their momentum buffers with their iterates.

    .. math::
        M^{(t+1)} &= W\\big(\\beta M^{(t)} + (1 - \\beta) G^{(t)}\\big), \\\\
        X^{(t+1)} &= W\\big(X^{(t)} - \\alpha_t (\\beta M^{(t)} + (1 - \\beta) G^{(t)})\\big),
        \\qquad M^{(0)} = 0.

    Both products with W travel in one gossip round. The averages follow momentum
    SGD on the mean of the agents' gradients. Any gossip that takes a round of an
    iterate and a buffer whose sum matters composes with it: ``gossip="choco(qsgd(4))"``
    sends both compressed, ``gossip="push_sum"`` runs it on directed graphs.
    """

    name: ClassVar[str] = "gossiped_momentum"
    reference: ClassVar[str] = "Worked example of docs/extending.md"
    # what its one round per step sends, in mix_many's order: the iterate's next value,
    # then a buffer whose sum over agents must be kept
    sends: ClassVar[tuple[str, ...]] = ("value", "sum")

    def init(self, x0: torch.Tensor) -> GossipedMomentumState:
        return GossipedMomentumState(x=x0, m=torch.zeros_like(x0))

    def step(
        self, state: GossipedMomentumState, grad: torch.Tensor, comm: Communicator
    ) -> GossipedMomentumState:
        m, direction = momentum_direction(state.m, grad, self)  # beta m + (1 - beta) g
        x, m = comm.mix_many([state.x - self.lr_at(state.t) * direction, m])
        return GossipedMomentumState(x=x, m=m, t=state.t + 1)
