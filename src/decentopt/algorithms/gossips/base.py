"""The gossip protocol: how the agents combine what an update rule sends.

A method is an update rule composed with a gossip. The rule (DSGD, EDM, ...) says
what each agent computes and which tensors it sends, through the communicator
calls ``mix`` / ``mix_many`` / ``mix_map``; the gossip says how those tensors are
combined over the network. :class:`Exact` mixes with ``W`` itself (the default, and
what a bare rule does); :class:`~decentopt.algorithms.gossips.choco.Choco` sends
compressed differences, :class:`~decentopt.algorithms.gossips.push_sum.PushSum`
keeps push-sum weights over column-stochastic graphs,
:class:`~decentopt.algorithms.gossips.multi_round.MultiRound` runs several rounds
per mix.

A gossip is a frozen dataclass of its parameters with pure ``init`` and ``bind``:
``init(x0, sends)`` gives the tensors it keeps per agent (its state fields, added to
the rule's state), and ``bind(fields, comm, x)`` gives a :class:`Channel`, a
communicator through which the rule's step runs; ``channel.state`` then holds the
gossip's state after the step. What a gossip needs of the network and of the rule is
declared once, in :attr:`Gossip.needs` and :meth:`Gossip.refuses`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from decentopt._schema import check_fields, prefixed
from decentopt.communicator import CommStats, Communicator, Elementwise

__all__ = ["SUM", "VALUE", "Around", "Channel", "Exact", "Fields", "Gossip", "Sends"]

#: What a rule sends, per tensor of its one gossip round (the rule's ``sends``):
#: ``VALUE``, an estimate the agents should agree on (an iterate); ``SUM``, a
#: tracker whose sum over agents must be kept (gradient tracking's ``y``).
VALUE = "value"
SUM = "sum"

#: The state a gossip keeps: field name -> tensor.
Fields = dict[str, torch.Tensor]
#: What a rule sends, one kind per tensor of its round (``VALUE`` or ``SUM``).
Sends = tuple[str, ...]


class Channel:
    """A communicator that routes a rule's mixes through a gossip.

    Subclasses implement :meth:`round` (one gossip round of the tensors of one call);
    everything else is the wrapped communicator's (``mean``, ``barrier``, the counts).
    """

    #: Whether the rule may mix only once per step through this channel.
    one_round: ClassVar[bool] = True

    def __init__(
        self, comm: Communicator, fields: Fields, sends: Sends = (), gossip: Any = None
    ) -> None:
        self.comm = comm
        self.gossip = gossip  # the gossip whose round this is, if it needs it
        #: The gossip's state: its fields at the start of the step, after it once run.
        self.state = dict(fields)
        self.sends = sends
        self.rounds_done = 0

    # What the channel takes from its communicator as it is, spelled out (typed): never
    # its fused rounds (``choco_round``, ``mix_posted``), which would bypass the gossip.
    @property
    def stats(self) -> CommStats:
        return self.comm.stats

    @property
    def topology(self) -> Any:
        return self.comm.topology

    def mean(self, z: torch.Tensor) -> torch.Tensor:
        return self.comm.mean(z)

    def barrier(self, stage: str) -> None:
        self.comm.barrier(stage)

    def round(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """One gossip round of ``zs`` (the rule's tensors in the order of its ``sends``)."""
        raise NotImplementedError

    def _start_round(self) -> None:
        """Count a round of this step (refused when the gossip takes one and had it)."""
        if self.rounds_done and self.one_round:
            raise ValueError(
                "this gossip combines one round per step, and the rule mixed twice in one step: "
                "pack its tensors into one call (mix_many), or use the exact gossip"
            )
        self.rounds_done += 1

    def _one_round(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        self._start_round()
        if self.sends and len(zs) > len(self.sends):
            raise ValueError(
                f"the rule mixed {len(zs)} tensors in one round but declares {len(self.sends)} "
                "in its `sends`"
            )
        return self.round(zs)

    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        mixed = self._one_round([z])[0]
        return mixed if out is None else out.copy_(mixed)

    def mix_many(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return self._one_round(list(zs))

    def mix_map(
        self, fn: Elementwise, tensors: Sequence[torch.Tensor], scalars: Sequence[Any] = ()
    ) -> tuple[torch.Tensor, ...]:
        first, *rest = fn(*tensors, *scalars)
        return (self.mix(first), *rest)

    def mix_compressed(
        self, z: torch.Tensor, compression: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise ValueError("a rule composed with a gossip sends through mix, mix_many or mix_map")


@dataclass(frozen=True)
class Gossip:
    """Base of the gossip components (see the module docstring)."""

    #: The name in text (``"choco(top_k(0.1), gamma=0.4)"``) and in the registry.
    name: ClassVar[str] = ""
    #: What the network must offer (:attr:`decentopt.topology.Topology.offers`).
    needs: ClassVar[frozenset[str]] = frozenset({"symmetric"})
    #: Whether the composed method must still mix the same tensors every step, in one round.
    one_round: ClassVar[bool] = True
    #: State fields with one value per agent (push-sum weights), not one per coordinate.
    agent_fields: ClassVar[tuple[str, ...]] = ()
    #: Rounds of the network per call of the rule (for fair comparisons).
    rounds_per_call: ClassVar[int] = 1
    #: Whether the rule's fused update reaches the communicator as it is (its kernels).
    passes_fused: ClassVar[bool] = False
    #: The age of the neighbours' messages a step waits for (the time model's lag).
    lag: ClassVar[int] = 0

    __post_init__ = check_fields

    def refuses(self, rule: Any) -> str:
        """Why ``rule`` cannot take this gossip ("" when it can)."""
        if not rule.mixes:
            return f"{rule.name} sends its own message per neighbour instead of mixing"
        if self.one_round and rule.sends is None:
            return (
                f"{rule.name} does not send the same tensors in one round every step "
                "(its `sends` is None)"
            )
        return ""

    def init(self, x0: torch.Tensor, sends: Sends) -> Fields:
        """The state fields this gossip adds for a rule that sends ``sends``, at ``x0``."""
        return {}

    def bind(self, fields: Fields, comm: Communicator, x: torch.Tensor, sends: Sends) -> Channel:
        """The communicator for one step of a rule that sends ``sends``, from the gossip's
        state ``fields`` and the iterate ``x`` at the start of the step: a :class:`Channel`,
        whose ``state`` holds the gossip's state after the step, or ``comm`` itself for a
        gossip that keeps no state and changes nothing."""
        raise NotImplementedError

    def label(self) -> str:
        """The gossip in text, as :func:`decentopt.algorithms.gossips.parse` reads it."""
        return self.name

    def at(self, t: int) -> Gossip:
        """The gossip of step ``t``: itself, or for a gossip that communicates on some steps
        only (``local(H)``) what it does on that step (its state's fields stay the same)."""
        return self

    def talks(self, t: int) -> str:
        """What step ``t`` sends: ``"gossip"`` (rounds with neighbours), ``"none"`` (a local
        step) or ``"all"`` (an exact average over all agents, an all-reduce); the time model
        reads it."""
        return "gossip"


@dataclass(frozen=True)
class Exact(Gossip):
    """Mixing with ``W`` itself: every call of the rule is one round of the communicator.

    .. math:: \\text{mix}(Z) = W Z

    Every call of the rule goes to the communicator as it is: its fused updates
    (``mix_map``) reach the communicator's kernels unchanged.
    """

    name: ClassVar[str] = "exact"
    one_round: ClassVar[bool] = False
    passes_fused: ClassVar[bool] = True

    def refuses(self, rule: Any) -> str:
        return ""

    def bind(self, fields: Fields, comm: Communicator, x: torch.Tensor, sends: Sends) -> Any:
        return comm


@dataclass(frozen=True)
class Around(Gossip):
    """Base of the gossips around an inner one (``delayed``, ``local``,
    ``periodic_global``): their ``inner`` field, text or a gossip, is parsed at
    construction, and refused there in one line where :meth:`refuses_inner` says why."""

    def __post_init__(self) -> None:
        super().__post_init__()
        from decentopt.algorithms.gossips import parse  # the package imports this module

        with prefixed(self.name):
            inner = parse(self.inner)  # type: ignore[attr-defined]  # every subclass's field
        why = self.refuses_inner(inner)
        if why:
            raise ValueError(f"{self.name}: {why}")
        object.__setattr__(self, "inner", inner)

    @property
    def _wrapped(self) -> Gossip:
        return self.inner  # type: ignore[attr-defined, no-any-return]  # parsed above

    def refuses_inner(self, inner: Gossip) -> str:
        """Why ``inner`` cannot be the inner gossip ("" when it can)."""
        return ""

    def _inner_text(self) -> str:
        """``", inner"`` for the label, nothing for exact gossip."""
        return "" if isinstance(self._wrapped, Exact) else f", {self._wrapped.label()}"
