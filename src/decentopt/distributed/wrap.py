"""``wrap(base_optimizer, algorithm, comm)``: any torch optimizer's local update, gossiped.

The base optimizer (Adam, AdamW, SGD with Nesterov, LAMB, ...) computes each agent's
local step as it would alone; the decentralized algorithm then combines the
adapted point ``y = base(x)`` with the neighbours':

* ``"dsgd"`` (adapt then combine): ``x+ = W y``;
* ``"ed"`` / ``"edm"`` (exact diffusion): ``psi+ = y``, ``phi = psi+ + x - psi``,
  ``x+ = W phi`` with ``psi(0) = x(0)``: the local update takes the place of
  ``-alpha g`` in the bias-corrected recursion. ``"edm"`` is ED here: its momentum is
  the base optimizer's.

What the theory covers: ``wrap(SGD(lr), "dsgd")`` is DSGD and ``wrap(SGD(lr), "ed")`` is
ED/D², exactly (the same arithmetic as ``DecentralizedOptimizer``); with torch's
dampened momentum (``momentum = dampening = beta``) ``"ed"`` is EDM except for the
first step (torch starts the buffer at ``g``, EDM at ``(1 - beta) g``). With
adaptive optimizers (Adam, AdamW, LAMB) each agent's update is preconditioned by
its own statistics; no analysis here covers that, and the bias correction of ED
is exact only where the local update is a fixed linear function of the gradient.
On the complete graph with identical data every combination is the base optimizer
itself (tested). Learning-rate schedulers attach to the base optimizer.
"""

from __future__ import annotations

from typing import Any

import torch

from decentopt.algorithms.ed import corrected
from decentopt.comm.base import Communicator

__all__ = ["COMBINERS", "GossipOptimizer", "wrap"]

#: How each supported algorithm combines the adapted point with the neighbours'.
COMBINERS = ("dsgd", "ed", "edm")


class GossipOptimizer:
    """A base optimizer whose every step is followed by one gossip round (see :func:`wrap`)."""

    def __init__(self, base: torch.optim.Optimizer, algorithm: str, comm: Communicator) -> None:
        name = str(algorithm).lower()
        if name not in COMBINERS:
            raise ValueError(
                f"wrap combines a base optimizer's update with gossip as {', '.join(COMBINERS)}; "
                f"got {algorithm!r}. For momentum or tracking use the base optimizer's "
                "(SGD momentum, Adam) or DecentralizedOptimizer"
            )
        self.base, self.algorithm, self.comm = base, name, comm
        self.psi: dict[torch.Tensor, torch.Tensor] = {}  # ED's psi per parameter

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.base.param_groups

    @property
    def state(self) -> Any:
        return self.base.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.base.zero_grad(set_to_none=set_to_none)

    def _params(self) -> list[torch.nn.Parameter]:
        return [p for g in self.base.param_groups for p in g["params"] if p.requires_grad]

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        params = self._params()
        before = [p.detach().clone() for p in params] if self.algorithm != "dsgd" else []
        loss = self.base.step(closure)
        if not params:
            return loss
        y = torch.cat([p.detach().reshape(-1) for p in params]).unsqueeze(0)
        if self.algorithm == "dsgd":
            mixed = self.comm.mix(y)
        else:
            x = torch.cat([b.reshape(-1) for b in before]).unsqueeze(0)
            psi = torch.cat(
                [self.psi.get(p, b).reshape(-1) for p, b in zip(params, before, strict=True)]
            ).unsqueeze(0)
            mixed = self.comm.mix(corrected(x, psi, y))
            offset = 0
            for p in params:
                self.psi[p] = y[0, offset : offset + p.numel()].view_as(p).clone()
                offset += p.numel()
        offset = 0
        for p in params:
            p.copy_(mixed[0, offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        return loss

    def state_dict(self) -> dict[str, Any]:
        every = [p for g in self.base.param_groups for p in g["params"]]
        order = {id(p): i for i, p in enumerate(every)}
        return {
            "base": self.base.state_dict(),
            "algorithm": self.algorithm,
            "psi": {order[id(p)]: v for p, v in self.psi.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("algorithm") != self.algorithm:
            raise ValueError(
                f"checkpoint is for {state.get('algorithm')!r}, this wrapper runs "
                f"{self.algorithm!r}"
            )
        self.base.load_state_dict(state["base"])
        params = [p for g in self.base.param_groups for p in g["params"]]
        self.psi = {params[int(i)]: v.to(params[int(i)]) for i, v in state["psi"].items()}


def wrap(base: torch.optim.Optimizer, algorithm: str, comm: Communicator) -> GossipOptimizer:
    """``base``'s local updates combined with the neighbours' by ``algorithm`` (module doc)."""
    return GossipOptimizer(base, algorithm, comm)
