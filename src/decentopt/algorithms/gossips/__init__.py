"""Gossips: how the agents combine what an update rule sends (one module each).

===================== ====================================================== ==============
text                  what travels                                           network
===================== ====================================================== ==============
``exact``             ``W Z`` (the default)                                   symmetric
``choco(Q, gamma=g)`` compressed differences, error-compensated (CHOCO)     symmetric, static
``push_sum``          numerators and push-sum weights over ``P``              column-stochastic
``multi_round(K)``    ``K`` rounds per mix, Chebyshev-accelerated or plain   symmetric
``delayed(tau)``      own value now, neighbours' from ``tau`` rounds ago       as the inner
``delayed(tau, G)``   the same, around ``G`` (``exact`` or ``push_sum``)       as ``G``
===================== ====================================================== ==============

``delayed(tau, staleness=S)`` bounds the age of the neighbours' values between ``tau`` and
``S`` rounds where processes run at their own pace (a static graph; the delay alone in one
process).

``local(H, G)``: ``G`` (exact by default) on every ``H``-th step and no communication between;
``periodic_global(H, G)``: an exact average over all agents on every ``H``-th step (one
all-reduce), ``G`` otherwise (Gossip-PGA).

``make("edm", lr=0.05, gossip="choco(top_k(0.1), gamma=0.4)")`` composes a rule with one;
:func:`parse` reads the text, :data:`GOSSIPS` holds them by name (a plugin may add its own
with :func:`register_gossip`).
"""

from __future__ import annotations

from decentopt._registry import Registry
from decentopt._schema import read_call
from decentopt.algorithms.gossips.base import SUM, VALUE, Channel, Exact, Fields, Gossip
from decentopt.algorithms.gossips.choco import Choco
from decentopt.algorithms.gossips.delayed import Delayed
from decentopt.algorithms.gossips.local import Local, PeriodicGlobal
from decentopt.algorithms.gossips.multi_round import MultiRound, RoundsChannel
from decentopt.algorithms.gossips.push_sum import PushSum

__all__ = [
    "GOSSIPS",
    "SUM",
    "VALUE",
    "Channel",
    "Choco",
    "Delayed",
    "Exact",
    "Fields",
    "Gossip",
    "Local",
    "MultiRound",
    "PeriodicGlobal",
    "PushSum",
    "RoundsChannel",
    "parse",
    "register_gossip",
]

#: The gossips by name (a plugin adds its own with :func:`register_gossip`).
GOSSIPS: Registry[type[Gossip]] = Registry("gossip")
#: Class decorator: add a :class:`Gossip` under its ``name``.
register_gossip = GOSSIPS.register

for _cls in (Exact, Choco, PushSum, MultiRound, Delayed, Local, PeriodicGlobal):
    register_gossip(_cls)


def parse(spec: str | Gossip) -> Gossip:
    """A gossip from text (``"choco(top_k(0.1), gamma=0.4)"``, ``"push_sum"``,
    ``"multi_round(3)"``) or a gossip itself. Positional arguments follow the fields'
    order (``choco``: compression, gamma; ``multi_round``: rounds, acceleration)."""
    if isinstance(spec, Gossip):
        return spec
    _, cls, kwargs = read_call(
        spec,
        GOSSIPS,
        "gossip",
        "'push_sum', 'choco(top_k(0.1), gamma=0.4)'",
        "a gossip of decentopt.algorithms.gossips",
    )
    return cls(**kwargs)
