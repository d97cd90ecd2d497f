"""Communicating on some steps only: local steps (``local(H)``) and periodic global averaging
(``periodic_global(H)``, Gossip-PGA), around any inner gossip.

Step ``t`` (counted from 0) is a *communicating* step when ``(t + 1) mod H = 0``: the agents
first take ``H - 1`` steps on their own, then communicate.

* ``local(H, inner)``: the inner gossip (``exact`` by default) on the communicating steps,
  no communication on the others, where every mix is the identity (``W_t = I``):

  .. math:: \\text{mix}_t(Z) = \\begin{cases} \\text{inner}(Z) & (t + 1) \\bmod H = 0 \\\\
            Z & \\text{otherwise.} \\end{cases}

  With DSGD on the complete graph this is Local SGD (Stich, ICLR 2019; Lin, Stich, Patel &
  Jaggi, ICLR 2020, post-local SGD), over a graph decentralized SGD with local updates
  (Koloskova et al., ICML 2020, "A unified theory of decentralized SGD").
* ``periodic_global(H, inner)``: an exact average over all agents on the communicating steps,
  the inner gossip on every other step (Gossip-PGA: Chen, Yuan, Zhang, Pan, Xu & Yin,
  ICML 2021, "Accelerating gossip SGD with periodic global averaging"):

  .. math:: \\text{mix}_t(Z) = \\begin{cases} \\tfrac{1}{n} 1 1^T Z & (t + 1) \\bmod H = 0 \\\\
            \\text{inner}(Z) & \\text{otherwise.} \\end{cases}

Push-sum's identity round is a round with ``P = I`` (the numerators keep the weights, so the
de-biased iterate moves by the rule's change over ``w``), and its global round averages the
numerators and the weights together; every other inner gossip is left untouched by a local
or global step (CHOCO's public copies keep what the neighbours last received). Nothing is
sent on a local step: no round, no byte, no call on the network. A global average is one
all-reduce, counted as a ring all-reduce: every agent sends ``2 (n - 1)`` messages of
``1/n`` of its payload (reduce-scatter, then all-gather).

Rules whose correction relies on one fixed ``W`` (Exact Diffusion, EDM, NIDS, EXTRA,
DecentLaM, Momentum Tracking) are refused: skipped rounds make their ``W_t`` alternate
between ``I`` and ``W``, and the correction no longer cancels the heterogeneity. K-GT and LED
are their sound local-step relatives (``k_gt``, ``led``, with their own local steps).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from decentopt._schema import bounded
from decentopt.algorithms.gossips.base import Around, Channel, Fields, Gossip, Sends
from decentopt.algorithms.gossips.push_sum import PushSum
from decentopt.communicator import Communicator

__all__ = ["Local", "PeriodicGlobal", "count_all_reduce"]


def count_all_reduce(comm: Any, zs: Sequence[torch.Tensor]) -> None:
    """Count an exact average of ``zs`` over all agents as one ring all-reduce: each agent
    sends ``2 (n - 1)`` messages of ``ceil(P / n)`` bytes (``P``: its payload)."""
    n = int(comm.topology.n)
    if n == 1:
        return
    payload = sum(z[0].numel() * z.element_size() for z in zs)
    part = math.ceil(payload / n)
    messages = 2 * (n - 1)
    comm.stats.add_round(float(messages), messages, part, zs[0].shape[0] * messages * part)


class Silent(Channel):
    """A round with ``W = I``: every mix returns its input, nothing is sent or counted."""

    one_round: ClassVar[bool] = False

    def round(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return [z.clone() for z in zs]


class Averaging(Silent):
    """A round that averages exactly over all agents: one all-reduce (``comm.mean``) of the
    tensors of a call, packed, counted by :func:`count_all_reduce`."""

    def round(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        flats = [z.reshape(z.shape[0], -1) for z in zs]
        mean = self.comm.mean(torch.cat(flats, dim=1))
        count_all_reduce(self.comm, zs)
        parts = mean.split([f.shape[1] for f in flats], dim=1)
        return [
            p.expand(f.shape).reshape(z.shape).clone()
            for p, f, z in zip(parts, flats, zs, strict=True)
        ]


@dataclass(frozen=True)
class _Periodic(Around):
    """What ``local`` and ``periodic_global`` share: the period and the inner gossip (a
    step binds the gossip that :meth:`at` gives for it: the inner one, or this one, whose
    :meth:`bind` is its own step)."""

    every: int = bounded(4, minimum=1)
    inner: str | Gossip = "exact"

    one_round: ClassVar[bool] = False
    #: What its own steps do (the others are the inner gossip's): average exactly over all
    #: agents on every ``every``-th step (``periodic_global``), or else nothing on the steps
    #: between (``local``, ``W_t = I``).
    average: ClassVar[bool] = False

    def refuses_inner(self, inner: Gossip) -> str:
        if isinstance(inner, Around):
            return (
                f"{inner.name} gossip cannot be the inner gossip (its rounds are counted by "
                "step): use exact, choco, push_sum or multi_round inside"
            )
        return ""

    def communicates(self, t: int) -> bool:
        """Whether step ``t`` is one of every ``every``-th (``(t + 1) mod every = 0``)."""
        return (t + 1) % self.every == 0

    def at(self, t: int) -> Gossip:
        own = self.communicates(t) == self.average  # its own step, not the inner gossip's
        return self if own else self._wrapped

    def bind(self, fields: Fields, comm: Communicator, x: torch.Tensor, sends: Sends) -> Channel:
        """Its own step around the inner gossip, keeping the inner gossip's fields."""
        kind = Averaging if self.average else Silent
        if isinstance(self._wrapped, PushSum):  # a round over P = I, or over the exact average
            return self._wrapped.bind(fields, kind(comm, {}), x, sends)
        return kind(comm, fields, sends)

    def talks(self, t: int) -> str:
        if self.communicates(t) != self.average:
            return self._wrapped.talks(t)
        return "all" if self.average else "none"

    @property  # type: ignore[misc]
    def needs(self) -> frozenset[str]:  # type: ignore[override]
        return self._wrapped.needs

    @property  # type: ignore[misc]
    def agent_fields(self) -> tuple[str, ...]:  # type: ignore[override]
        return self._wrapped.agent_fields

    @property  # type: ignore[misc]
    def rounds_per_call(self) -> int:  # type: ignore[override]
        return self._wrapped.rounds_per_call

    @property  # type: ignore[misc]
    def passes_fused(self) -> bool:  # type: ignore[override]
        """Every step the inner gossip's (``local(1)``), so its fused updates too."""
        return self.every == 1 and not self.average and self._wrapped.passes_fused

    def refuses(self, rule: Any) -> str:
        if rule.takes_local_steps:
            return f"{rule.name} takes its own local steps: give it its local-step count instead"
        if rule.needs_symmetric and self.every > 1:
            return (
                f"{rule.name}'s correction relies on one fixed W, and {self.name} changes W_t "
                f"from step to step ({'the exact average' if self.average else 'I'} on some), "
                "which leaves it biased or unstable: use k_gt (K-GT) or led (local Exact "
                "Diffusion), which take local steps soundly"
            )
        return Gossip.refuses(self, rule) or self._wrapped.refuses(rule)

    def init(self, x0: torch.Tensor, sends: Sends) -> Fields:
        return self._wrapped.init(x0, sends)

    def label(self) -> str:
        return f"{self.name}({self.every}{self._inner_text()})"


@dataclass(frozen=True)
class Local(_Periodic):
    """The inner gossip every ``every``-th step, no communication between (module
    docstring): ``local(4)``, ``local(8, push_sum)``."""

    name: ClassVar[str] = "local"


@dataclass(frozen=True)
class PeriodicGlobal(_Periodic):
    """Gossip-PGA: an exact average over all agents every ``every``-th step, the inner
    gossip otherwise (module docstring): ``periodic_global(8)``."""

    name: ClassVar[str] = "periodic_global"
    average: ClassVar[bool] = True
