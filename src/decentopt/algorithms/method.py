"""A method: an update rule composed with a gossip, ``make("edm", gossip="push_sum")``.

Every method is a :class:`Method` -- exact mixing is the gossip :class:`Exact`, the
default -- and every method's state a :class:`MethodState`: the rule's own state, the
gossip's own state (its tensors by name), an outer optimizer's (SlowMo, DiLoCo:
:mod:`decentopt.algorithms.outer`) and the counter ``t``. A step binds the gossip to the
communicator and runs the rule's own step through it, then the outer optimizer's step
where one is due.

What a method declares is read from its parts, each in one place: what it needs of the
network (the rule's ``requires`` and the gossip's ``needs``), its per-agent fields, its
rounds per step, its step size, the fused update its step hands to the communicator
(:attr:`Method.fused`), and how it paces in the time model (:attr:`Method.pace`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple, cast

import torch

from decentopt._schema import prefixed
from decentopt.algorithms.gossips import Exact, Fields, Gossip
from decentopt.algorithms.outer import Outer
from decentopt.algorithms.outer import parse as parse_outer
from decentopt.communicator import Communicator, Relaying
from decentopt.updates import FusedUpdate

__all__ = ["Method", "MethodState", "as_method"]


class MethodState(NamedTuple):
    """A method's state: ``rule``, the rule's own (a named tuple ``(x, ..., t)``),
    ``gossip``, the gossip's own tensors by name (CHOCO's public copies, push-sum's
    weights), and ``outer``, an outer optimizer's (``outer_x``, ``outer_m``; empty without
    one).

    :meth:`tensors` is the one view of all its tensors, by their flat names -- the rule's
    fields, then the gossip's, then the outer optimizer's -- which the divergence guard,
    checkpoints, the optimizer's ``state_dict`` and the ranks' agreement read;
    :meth:`replace` changes them by the same names (and ``t``).
    """

    rule: Any
    gossip: Fields
    outer: Fields = {}  # noqa: RUF012  # never changed in place: a step makes a new one

    @property
    def x(self) -> torch.Tensor:
        """The iterate."""
        return self.rule.x

    @property
    def t(self) -> int:
        """The iterations done (the rule's counter)."""
        return self.rule.t

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor of the state by its flat name, ``x`` first."""
        own = {k: v for k, v in self.rule._asdict().items() if k != "t"}
        return own | self.gossip | self.outer

    def replace(self, **changes: Any) -> MethodState:
        """The state with the tensors (or ``t``) named in ``changes`` replaced."""
        mine = {k: v for k, v in changes.items() if k in self.gossip}
        outer = {k: v for k, v in changes.items() if k in self.outer}
        rest = {k: v for k, v in changes.items() if k not in mine and k not in outer}
        return MethodState(self.rule._replace(**rest), self.gossip | mine, self.outer | outer)

    def as_dict(self) -> dict[str, Any]:
        """:meth:`tensors` and ``t``: what a checkpoint holds (``replace(**saved)`` reads it)."""
        return self.tensors() | {"t": self.t}


@dataclass(frozen=True)
class Method:
    """An update rule composed with a gossip; ``alias`` is the published name of the pair
    (``"sgp"`` is DmSGD with push-sum), empty for a pair no paper names; ``outer`` an
    outer optimizer over the two (:mod:`decentopt.algorithms.outer`), or None.

    Made by :func:`decentopt.algorithms.make`, which refuses a pair that cannot work.
    """

    rule: Any
    gossip: Gossip = field(default_factory=Exact)
    alias: str = ""
    outer: Outer | None = None

    @property
    def name(self) -> str:
        exact = self.gossip == Exact()
        name = self.alias or (self.rule.name if exact else f"{self.rule.name}+{self.gossip.name}")
        return name if self.outer is None else f"{name}+{self.outer.name}"

    @property
    def needs(self) -> frozenset[str]:
        """What the network must offer: the rule's own needs and its gossip's."""
        return frozenset(self.rule.requires) | self.gossip.needs

    @property
    def agent_fields(self) -> tuple[str, ...]:
        """State fields with one value per agent (push-sum weights)."""
        return tuple(self.rule.agent_fields) + tuple(self.gossip.agent_fields)

    #: The rule's, as they are: what it sends in its one round per step (``None``: it mixes
    #: otherwise), its step size and its declarations.
    sends = property(attrgetter("rule.sends"))
    lr = property(attrgetter("rule.lr"))
    needs_psd = property(attrgetter("rule.needs_psd"))
    uses_momentum = property(attrgetter("rule.uses_momentum"))
    takes_direction = property(attrgetter("rule.takes_direction"))

    @property
    def rounds_per_step(self) -> int:
        return self.rule.rounds_per_step * self.gossip.rounds_per_call

    def lr_at(self, t: int) -> float:
        return self.rule.lr_at(t)

    @property
    def fused(self) -> FusedUpdate | None:
        """The fused update of the rule's step where it reaches the communicator as it is
        (a gossip that passes fused updates through), else None."""
        whole = self.gossip.passes_fused and self.outer is None  # else more than the update
        return self.rule.fused if whole else None

    @property
    def pace(self) -> tuple[int, bool]:
        """``(lag, asynchronous)`` in the time model: the age of the messages a step waits
        for (the gossip's), whether agents run at their own pace (the rule's)."""
        return self.gossip.lag, bool(self.rule.asynchronous)

    def talks(self, t: int) -> str:
        """What step ``t`` sends (:meth:`Gossip.talks`): ``"none"`` where the rule or the
        gossip takes a local step, ``"all"`` for an exact average over all agents; an outer
        optimizer's average after the step adds ``"all"`` (``"gossip+all"``, or ``"all"``
        after a local step)."""
        inner = self.gossip.talks(t) if self.rule.talks(t) else "none"
        if self.outer is None or not self.outer.fires(t):
            return inner
        return "all" if inner == "none" else f"{inner}+all"

    def hyperparams(self) -> dict[str, Any]:
        """The rule's and the gossip's hyper-parameters, by name."""
        parts = (self.rule, self.gossip)
        return {f.name: getattr(p, f.name) for p in parts for f in dataclasses.fields(p) if f.init}

    def with_hyperparams(self, **changes: Any) -> Method:
        """A copy with some hyper-parameters changed, the rule's and the gossip's
        (validated as at construction)."""
        mine = {f.name for f in dataclasses.fields(self.gossip) if f.init}
        gossip = dataclasses.replace(self.gossip, **{k: v for k, v in changes.items() if k in mine})
        rule = dataclasses.replace(self.rule, **{k: v for k, v in changes.items() if k not in mine})
        return dataclasses.replace(self, rule=rule, gossip=gossip)

    def with_outer(self, outer: str | Outer | None) -> Method:
        """The method under the outer optimizer ``outer`` (text such as
        ``"nesterov(lr=0.7, beta=0.9, every=500)"``; None: without one), or a one-line
        error saying why it cannot take one."""
        if outer is None:
            return dataclasses.replace(self, outer=None)
        with prefixed(self.name):
            parsed = parse_outer(outer)
        why = parsed.refuses(self.rule)
        if why:
            raise ValueError(f"{self.name} cannot take the outer optimizer {parsed.name}: {why}")
        return dataclasses.replace(self, outer=parsed)

    def init(self, x0: torch.Tensor, comm: Communicator | None = None) -> MethodState:
        """The state at ``x0``; with the communicator it will run on, the rule's
        :attr:`per_neighbour` fields are as wide as its neighbour slots from the start (a
        checkpoint's fit them), else sized at the first exchange."""
        inner = self.rule.init(x0)
        if comm is not None and self.rule.per_neighbour:
            slots = cast("Relaying", comm).slots
            zs = {k: getattr(inner, k) for k in self.rule.per_neighbour}  # as zeros, slots second
            wide = {k: z.new_zeros((z.shape[0], slots, *z.shape[2:])) for k, z in zs.items()}
            inner = inner._replace(**wide)
        extra = self.gossip.init(x0, self.rule.sends or ())
        outer = {} if self.outer is None else self.outer.init(x0)
        clash = sorted(set(inner._fields) & set(extra))
        clash = clash or sorted((set(inner._fields) | set(extra)) & set(outer))
        if clash:
            raise ValueError(
                f"the rule's state {type(inner).__name__} has a field named {clash[0]!r}, which "
                "the gossip or the outer optimizer keeps too: rename the rule's field"
            )
        return MethodState(inner, extra, outer)

    def step(self, state: MethodState, grad: torch.Tensor, comm: Communicator) -> MethodState:
        gossip = self.gossip.at(state.t)
        channel = gossip.bind(state.gossip, comm, state.x, self.rule.sends or ())
        rule = self.rule.step(state.rule, grad, channel)
        fields = {} if channel is comm else channel.state
        if self.outer is None or not self.outer.fires(state.t):
            return MethodState(rule, fields, state.outer)
        outer = self.outer.step(state.outer, rule.x, comm)
        x = outer["outer_x"]
        moved = {f: getattr(rule, f) + (x - rule.x) for f in self.rule.from_x0}
        return MethodState(rule._replace(x=x.clone(), **moved), fields, outer)


def as_method(method: Any) -> Method:
    """``method`` itself, or an update rule (a rule's instance, such as ``EDM(lr=0.1)``)
    with exact mixing."""
    return method if isinstance(method, Method) else Method(method)
