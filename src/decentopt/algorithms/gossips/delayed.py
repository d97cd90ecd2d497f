"""Delayed gossip: each agent mixes its own current value with its neighbours' values from
``tau`` rounds ago, so that a message may travel while the next step computes (the overlap
of OSGP, Assran, Loizou, Ballas & Rabbat, ICML 2019, Algorithm 3).

For a tensor ``Z`` the rule sends in round ``t`` (``D = diag(W)``, the self-weights):

.. math::
    \\text{mix}(Z)_i = w_{ii} Z_i^{(t)} + \\sum_{j \\ne i} w_{ij} Z_j^{(t - \\tau)},
    \\qquad \\text{i.e.} \\qquad \\text{mix}(Z) = D Z^{(t)} + (W - D) Z^{(t-\\tau)},

with ``Z^{(s)} = X^{(0)}`` for ``s < 0`` (before round 0 every agent knows its neighbours'
initial iterates; a common initialisation). ``tau = 0`` is the inner gossip itself, bit for
bit. Average dynamics: with ``c = 1^T (W - D)`` (``c_j = 1 - w_jj`` for a column-stochastic
``W``) the mass including the messages in flight,
``Phi^{(t)} = 1^T X^{(t)} + sum_{s=t-tau}^{t-1} c^T Z^{(s)}``, moves as
``Phi^{(t+1)} = Phi^{(t)} + 1^T (Z^{(t)} - X^{(t)})`` for a rule whose iterate is
``X^{(t+1)} = mix(Z^{(t)})``: under DSGD ``Phi / n`` is centralized SGD on the mean gradient,
under DmSGD momentum SGD, exactly. The plain average ``1^T X / n`` is not: it lags by the
mass in flight.

``delayed(tau)`` delays exact mixing; ``delayed(tau, push_sum)`` delays push-sum's
numerators and weights together (so the de-biasing ratio stays consistent), which with
DmSGD is OSGP (``osgp``). CHOCO's public copies must equal what the neighbours received and
multi-round gossip is several rounds per step, so neither is delayed (refused in one line).
The rule must send the same tensors in one round every step, all of them values: a delayed
sum-tracker (gradient tracking's ``y``) would lose the mass in flight.

A communicator that sends ahead (``mix_posted``: :mod:`decentopt.comm.posted` over
torch.distributed) posts ``Z(t)`` without waiting and waits only for the messages of round
``t - tau``. ``staleness=S`` (``S >= tau >= 1``) bounds the age instead of fixing it: each
neighbour's newest message of age ``tau`` to ``S``, waiting only for the one of age ``S``,

.. math::
    \\text{mix}(Z)_i = w_{ii} Z_i^{(t)} + \\sum_{j \\ne i} w_{ij} Z_j^{(t - \\delta_{ij}(t))},
    \\qquad \\tau \\le \\delta_{ij}(t) \\le S.

Under a bound the gossip keeps the sent tensors of the last ``S`` rounds. The ages depend on
when messages arrive, so such runs over processes do not repeat bit for bit; a communicator
that knows the ages (``mix_aged``: the simulator under a time model,
:mod:`decentopt.comm.aged`) mixes with them, and one that knows neither (the simulator
without a time model) runs every agent at one pace, ``delta = tau``. Push-sum takes no bound
(its weights must arrive exactly once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from decentopt._schema import bounded
from decentopt.algorithms.gossips.base import SUM, Around, Channel, Exact, Fields, Gossip, Sends
from decentopt.algorithms.gossips.push_sum import PushSum, push_weights
from decentopt.communicator import Communicator

__all__ = ["Delayed", "MixesAged", "SendsAhead", "self_weights"]


@runtime_checkable
class SendsAhead(Protocol):
    """A communicator that posts each round's messages ahead (torch.distributed's
    ``isend``/``irecv``) and waits only for those ``bound`` rounds old; ``rounds`` are the
    tensors sent ``tau, ..., 1`` rounds ago and now (see
    :meth:`decentopt.comm.DistributedCommunicator.mix_posted`)."""

    def mix_posted(
        self, rounds: Sequence[Sequence[torch.Tensor]], bound: int
    ) -> list[torch.Tensor]: ...


@runtime_checkable
class MixesAged(Protocol):
    """A communicator that knows the age ``delta_ij(t)`` of each neighbour's message under
    bounded staleness; ``rounds`` are the tensors sent ``tau, tau + 1, ..., S`` rounds ago
    (see :meth:`decentopt.comm.AgedCommunicator.mix_aged`)."""

    def mix_aged(
        self, rounds: Sequence[Sequence[torch.Tensor]], tau: int
    ) -> list[torch.Tensor]: ...


def self_weights(comm: Any, rows: int) -> torch.Tensor:
    """The self-weights ``w_ii`` of the round about to run, for the rows this process owns
    (all agents in the simulator, its own on a rank of torch.distributed)."""
    diag = torch.as_tensor(comm.topology.at(comm.stats.rounds).self_weight)
    rank = int(getattr(comm, "rank", 0))
    return diag[rank : rank + rows]


def _history(k: int, lag: int) -> str:
    return f"z{k}_lag{lag}"


@dataclass(frozen=True)
class Delayed(Around):
    """Neighbours' values from ``tau`` rounds ago, one's own current one (module docstring):
    ``delayed(2)``, ``delayed(1, push_sum)``; ``delayed(1, staleness=4)``: from 1 to 4 rounds
    ago, whichever is newest where processes run at their own pace."""

    tau: int = bounded(1, minimum=0)
    inner: str | Gossip = "exact"
    staleness: int | None = bounded(None, minimum=0)

    name: ClassVar[str] = "delayed"

    def refuses_inner(self, inner: Gossip) -> str:
        if self.staleness is not None and self.tau == 0:
            return (
                "bounded staleness needs a delay tau >= 1 (messages of the current round are "
                "never waited for); give delayed(1, staleness=S)"
            )
        if self.staleness is not None and self.staleness < self.tau:
            return (
                f"the staleness bound ({self.staleness}) is below the delay tau ({self.tau}); "
                f"give staleness >= {self.tau}"
            )
        if not isinstance(inner, Exact | PushSum):
            return (
                f"{inner.name} gossip cannot be delayed (CHOCO's public copies must match what "
                "neighbours received; multi-round is several rounds a step): use exact or "
                "push_sum inside delayed"
            )
        return ""

    @property  # type: ignore[misc]
    def needs(self) -> frozenset[str]:  # type: ignore[override]
        return self._wrapped.needs | ({"static"} if self.staleness else set())

    @property  # type: ignore[misc]
    def lag(self) -> int:  # type: ignore[override]
        """The age of the messages a step waits for: the staleness bound, else ``tau``."""
        return self.staleness or self.tau

    @property  # type: ignore[misc]
    def agent_fields(self) -> tuple[str, ...]:  # type: ignore[override]
        if not isinstance(self._wrapped, PushSum):
            return ()
        # push-sum takes rules that send one value: its weights travel second (slot 1)
        return ("w", *(_history(1, lag) for lag in range(1, self.tau + 1)))

    def _slots(self, sends: Sends) -> int:
        """Tensors that travel per round: the rule's, and push-sum's weights."""
        return len(sends) + isinstance(self._wrapped, PushSum)

    def refuses(self, rule: Any) -> str:
        if rule.sends is not None and SUM in rule.sends:
            return (
                f"{rule.name} sends a sum-tracker, whose delayed mix would lose the mass in "
                "flight (delay only rules that send values)"
            )
        wrapped = self._wrapped.refuses(rule)
        if self.staleness and isinstance(self._wrapped, PushSum):
            return (
                "push-sum's weights must arrive exactly once, and bounded staleness skips "
                "messages: give delayed(tau, push_sum) no staleness"
            )
        if wrapped or self.tau == 0 or not rule.needs_symmetric:
            return wrapped or Gossip.refuses(self, rule)
        return (
            f"{rule.name}'s correction extrapolates from its neighbours' current values; on "
            "stale ones it is unstable (spectral radius 1.12 on ring(8) at tau = 1: it "
            "diverges at any step size)"
        )

    def init(self, x0: torch.Tensor, sends: Sends) -> Fields:
        fields = dict(self._wrapped.init(x0, sends))
        for k in range(self._slots(sends)):
            start = push_weights(x0) if k == len(sends) else x0
            fields |= {_history(k, lag): start.clone() for lag in range(1, self.lag + 1)}
        return fields

    def bind(self, fields: Fields, comm: Communicator, x: torch.Tensor, sends: Sends) -> Channel:
        if self.tau == 0:  # the inner gossip itself, no history kept
            return self._wrapped.bind(fields, comm, x, sends)
        late = _LateComm(comm, fields, self, self._slots(sends))
        channel = self._wrapped.bind(fields, late, x, sends)
        late.state = channel.state  # one dict: the inner gossip's fields and the history
        return channel

    def label(self) -> str:
        bound = "" if self.staleness is None else f", staleness={self.staleness}"
        return f"delayed({self.tau}{self._inner_text()}{bound})"


class _LateComm(Channel):
    """A communicator whose one round a step mixes ``D Z(t) + (W - D) Z(t - tau)`` (ages from
    ``tau`` to the bound where the communicator knows them), keeping the sent tensors of the
    last ``bound`` rounds (its ``state``)."""

    def __init__(self, comm: Communicator, fields: Fields, gossip: Delayed, slots: int) -> None:
        super().__init__(comm, fields, gossip=gossip)
        self.slots_sent = slots

    def round(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if len(zs) != self.slots_sent:
            raise ValueError(
                f"the rule mixed {len(zs)} tensors in one round; delayed gossip keeps the "
                f"history of {self.slots_sent}"
            )
        tau = self.gossip.tau
        bound = self.gossip.lag
        sent_at = [
            [self.state[_history(k, a)] for k in range(len(zs))] for a in range(1, bound + 1)
        ]
        old = sent_at[tau - 1]
        diag = self_weights(self.comm, zs[0].shape[0])
        sent = [z.detach().clone() for z in zs]
        if isinstance(self.comm, SendsAhead):
            mixed = self.comm.mix_posted([*sent_at[tau - 1 :: -1], sent], bound)
        elif bound > tau and isinstance(self.comm, MixesAged):
            mixed = self.comm.mix_aged(sent_at[tau - 1 :], tau)
        else:
            mixed = self.comm.mix_many(old)
        for lag, row in enumerate([sent, *sent_at[:-1]], 1):  # every kept round one older
            self.state |= {_history(k, lag): z for k, z in enumerate(row)}
        return [
            wz + diag.to(z).view((-1,) + (1,) * (z.ndim - 1)) * (z - late)
            for z, late, wz in zip(zs, old, mixed, strict=True)
        ]
