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

``make("edm", lr=0.05, gossip="choco(top_k(0.1), gamma=0.4)")`` composes a rule with one;
:func:`parse` reads the text, :data:`GOSSIPS` holds them by name (a plugin may add its own
with :func:`register_gossip`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from decentopt._checks import unknown_name
from decentopt._schema import call_value, split_call
from decentopt.algorithms.gossips.base import SUM, VALUE, Channel, Exact, Fields, Gossip
from decentopt.algorithms.gossips.choco import Choco
from decentopt.algorithms.gossips.delayed import Delayed
from decentopt.algorithms.gossips.multi_round import MultiRound
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
    "MultiRound",
    "PushSum",
    "parse",
    "register_gossip",
]

G = TypeVar("G", bound=type)

#: The gossips by name.
GOSSIPS: dict[str, type[Gossip]] = {}


def register_gossip(cls: G) -> G:
    """Class decorator: add a :class:`Gossip` under its ``name``."""
    if cls.name in GOSSIPS:  # type: ignore[attr-defined]
        raise ValueError(f"a gossip named {cls.name!r} is already registered")  # type: ignore[attr-defined]
    GOSSIPS[cls.name] = cls  # type: ignore[attr-defined]
    return cls


for _cls in (Exact, Choco, PushSum, MultiRound, Delayed):
    register_gossip(_cls)


def parse(spec: str | Gossip) -> Gossip:
    """A gossip from text (``"choco(top_k(0.1), gamma=0.4)"``, ``"push_sum"``,
    ``"multi_round(3)"``) or a gossip itself. Positional arguments follow the fields'
    order (``choco``: compression, gamma; ``multi_round``: rounds, acceleration)."""
    if isinstance(spec, Gossip):
        return spec
    if not isinstance(spec, str):
        raise TypeError(
            f"gossip must be text such as 'choco(top_k(0.1), gamma=0.4)' or a gossip of "
            f"decentopt.algorithms.gossips; got {type(spec).__name__} {spec!r}"
        )
    call = split_call(spec)
    if call is None:
        raise ValueError(
            f"gossip {spec!r}: write NAME or NAME(ARGS), e.g. 'push_sum', 'choco(sign)'"
        )
    name, args = call
    if name not in GOSSIPS:
        raise ValueError(unknown_name("gossip", name, GOSSIPS))
    cls = GOSSIPS[name]
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs: dict[str, Any] = {}
    named = False  # positional arguments only before the first keyword
    for k, (key, raw) in enumerate(args):
        named = named or key is not None
        if key is None and (named or k >= len(fields)):
            raise ValueError(f"gossip {spec!r}: {name} takes {', '.join(fields) or 'no arguments'}")
        kwargs[key or fields[k]] = call_value(raw)
    unknown = [key for key in kwargs if key not in fields]
    if unknown:
        raise ValueError(f"gossip {spec!r}: {unknown_name(f'{name} argument', unknown[0], fields)}")
    return cls(**kwargs)
