"""A method as an update rule composed with a gossip: ``make("edm", gossip="push_sum")``.

The composed method's state is the rule's state with the gossip's fields added (before
``t``), one flat named tuple, so everything that reads states (the simulator's guard and
checkpoints, the optimizer's ``state_dict``) treats it as any other method's. A step
binds the gossip to the communicator and runs the rule's own step through it.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from decentopt.algorithms.gossips import Gossip

if TYPE_CHECKING:
    from decentopt.comm.base import Communicator

__all__ = ["Composed", "state_type"]

_serial = itertools.count()


@functools.cache
def state_type(rule_state: type, extra: tuple[str, ...]) -> type:
    """The state of a rule whose state is ``rule_state`` composed with a gossip that keeps
    the fields ``extra``: ``rule_state``'s fields, then ``extra``, then ``t``."""
    own = [f for f in rule_state._fields if f != "t"]  # type: ignore[attr-defined]
    clash = sorted(set(own) & set(extra))
    if clash:
        raise ValueError(
            f"the rule's state {rule_state.__name__} has a field named {clash[0]!r}, which the "
            "gossip keeps too: rename the rule's field"
        )
    name = f"{rule_state.__name__}With_{'_'.join(extra)}_{next(_serial)}"
    cls = collections.namedtuple(name, [*own, *extra, "t"], defaults=(0,))  # type: ignore[misc]
    cls.__module__ = __name__
    cls.rule_state = rule_state  # type: ignore[attr-defined]
    globals()[name] = cls  # so that a state pickles (sweep workers return results by pickle)
    return cls


@dataclass(frozen=True)
class Composed:
    """An update rule composed with a gossip; ``alias`` is the published name of the pair
    (``"sgp"`` is DmSGD with push-sum), empty for a pair no paper names.

    Made by :func:`decentopt.algorithms.make` (which refuses a pair that cannot work).
    """

    rule: Any
    gossip: Gossip
    alias: str = ""

    @property
    def name(self) -> str:
        return self.alias or f"{self.rule.name}+{self.gossip.name}"

    def __getattr__(self, key: str) -> Any:
        # the rule's hyper-parameters and declarations (lr, beta, uses_momentum, sends, ...),
        # then the gossip's parameters (compression, gamma, ...)
        if key.startswith("__") or key in ("rule", "gossip", "alias"):
            raise AttributeError(key)
        for part in (self.rule, self.gossip):
            if hasattr(part, key):
                return getattr(part, key)
        raise AttributeError(f"{self.name} has no attribute {key!r}")

    @property
    def needs(self) -> frozenset[str]:
        return frozenset(self.rule.requires) | self.gossip.needs

    @property
    def agent_fields(self) -> tuple[str, ...]:
        return tuple(self.rule.agent_fields) + tuple(self.gossip.agent_fields)

    @property
    def rounds_per_step(self) -> int:
        return self.rule.rounds_per_step * self.gossip.rounds_per_call

    def with_hyperparams(self, **changes: Any) -> Composed:
        """A copy with some hyper-parameters changed, the rule's and the gossip's."""
        mine = {f.name for f in dataclasses.fields(self.gossip) if f.init}
        gossip = dataclasses.replace(self.gossip, **{k: v for k, v in changes.items() if k in mine})
        rule = self.rule.with_hyperparams(**{k: v for k, v in changes.items() if k not in mine})
        return dataclasses.replace(self, rule=rule, gossip=gossip)

    def hyperparams(self) -> dict[str, Any]:
        """The rule's and the gossip's hyper-parameters, by name."""
        parts = (self.rule, self.gossip)
        return {f.name: getattr(p, f.name) for p in parts for f in dataclasses.fields(p) if f.init}

    def init(self, x0: torch.Tensor) -> Any:
        inner = self.rule.init(x0)
        extra = self.gossip.init(x0, self.rule.sends or ())
        return state_type(type(inner), tuple(extra))(**inner._asdict(), **extra)

    def step(self, state: Any, grad: torch.Tensor, comm: Communicator) -> Any:
        rule_state = type(state).rule_state
        inner = rule_state(*(getattr(state, f) for f in rule_state._fields))
        own = set(rule_state._fields)
        fields = {f: getattr(state, f) for f in state._fields if f not in own}
        channel = self.gossip.bind(fields, comm, state.x, self.rule.sends or ())
        stepped = self.rule.step(inner, grad, channel)
        return type(state)(**stepped._asdict(), **channel.fields())
