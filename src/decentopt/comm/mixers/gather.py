"""``kernel="gather"``: the round's ``W_t`` of a time-varying topology in gather form.

``(W_t z)_i = s_i z_i + sum_slot w_{slot,i} z_{peer(slot,i)}``: linear in ``n`` (one
indexed read per peer slot), whatever ``W_t`` is this round
(:class:`~decentopt.topology.TopologySchedule`).
"""

from __future__ import annotations

import torch

from decentopt.comm.mixers.base import MixerBase, need, register
from decentopt.topology import Network, TopologySchedule

__all__ = ["GatherMixer"]


@register
class GatherMixer(MixerBase):
    name = "gather"

    def __init__(self, network: Network) -> None:
        need(network, TopologySchedule, self.name, "a time-varying topology")
        self.schedule = network
        self._forms: dict[tuple[int, torch.dtype, torch.device], tuple] = {}
        self._gathered: tuple[tuple, torch.Tensor] | None = None

    def _form(self, t: int, flat: torch.Tensor) -> tuple:
        period = self.schedule.period
        if period is None:  # drawn afresh every round
            return self.schedule.at(t).torch_form(flat.dtype, flat.device)
        key = (t % period, flat.dtype, flat.device)
        if key not in self._forms:
            self._forms[key] = self.schedule.at(t).torch_form(flat.dtype, flat.device)
        return self._forms[key]

    def mix(self, flat: torch.Tensor, out: torch.Tensor | None, t: int) -> torch.Tensor:
        target = torch.empty_like(flat) if out is None else out
        self_weight, peers, weights = self._form(t, flat)
        torch.mul(flat, self_weight, out=target)
        key = (flat.shape, flat.dtype, flat.device)
        if self._gathered is None or self._gathered[0] != key:  # one buffer, reused every round
            self._gathered = (key, torch.empty_like(flat))
        gathered = self._gathered[1]
        for slot in range(peers.shape[0]):
            torch.index_select(flat, 0, peers[slot], out=gathered)
            target.addcmul_(gathered, weights[slot])
        return target
