"""``wrap(base_optimizer, method, comm)``: any torch optimizer's local update, gossiped.

The base optimizer (Adam, AdamW, SGD with Nesterov, LAMB, ...) computes each agent's
local step as it would alone; the decentralized method then takes that step in place
of its own gradient step. Every registered method whose gradient enters its update
only as a step along it (``lr`` times the gradient, possibly through momentum or a
tracker: every built-in method, ``takes_direction``) can be wrapped: with ``x`` the
parameters before the base step and ``y`` after it, the method runs one step on the
pseudo-gradient ``d = x - y`` with ``lr = 1``, so that

* ``"dsgd"`` (adapt then combine): ``x+ = W y``;
* ``"ed"`` / ``"edm"`` (exact diffusion): ``psi+ = y``, ``phi = psi+ + x - psi``,
  ``x+ = W phi`` with ``psi(0) = x(0)``: the local update takes the place of
  ``-alpha g`` in the bias-corrected recursion;
* ``"dsgt"``: the tracker follows the average local update; ``"sgp"`` pushes ``y`` over
  a directed graph; a method composed with a gossip (``gossip="choco(qsgd(4))"``)
  sends its messages that way.

A method's own momentum is off unless ``beta`` is given (the momentum is the base
optimizer's): ``"edm"`` is ED here, ``"dmsgd"`` DSGD.

What the theory covers: ``wrap(SGD(lr), "dsgd")`` is DSGD and ``wrap(SGD(lr), "ed")`` is
ED/D² (to rounding: ``x - (x - y)`` is ``y`` exactly where the step is smaller than the
parameter, Sterbenz's lemma, and within one unit in the last place otherwise); with
torch's dampened momentum (``momentum = dampening = beta``) ``"ed"`` is EDM except for
the first step (torch starts the buffer at ``g``, EDM at ``(1 - beta) g``). With adaptive
optimizers (Adam, AdamW, LAMB) each agent's update is preconditioned by its own
statistics; no analysis here covers that, and the bias correction of ED is exact only
where the local update is a fixed linear function of the gradient. On the complete graph
with identical data every combination is the base optimizer itself (tested).
Learning-rate schedulers attach to the base optimizer.

``outer="nesterov(lr=0.7, beta=0.9, every=H)"`` adds an outer optimizer
(:mod:`decentopt.algorithms.outer`): every ``H`` steps the pseudo-gradient
``x_sync - mean(x)`` (one all-reduce) takes an outer Nesterov step and every agent restarts
from ``x_sync``. ``wrap(AdamW(...), "dsgd", comm, gossip=f"local({N})", outer=...)`` with
``N`` beyond the run is DiLoCo (inner AdamW, no communication between outer steps); with
DSGD's gossip on every step it is a decentralized DiLoCo. The base optimizer's state
(AdamW's moments) carries on across outer steps, as in DiLoCo.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from decentopt import algorithms
from decentopt.comm.grouped import AgentGroup
from decentopt.communicator import Communicator
from decentopt.distributed import agreement
from decentopt.distributed.optimizer import DecentralizedOptimizer, check_comm, gossips

__all__ = ["GossipOptimizer", "wrap"]


def _check_base(base: Any, comm: Any) -> None:
    """Refuse at construction what would fail later (a class instead of an optimizer, at the
    first ``zero_grad()``) or not at all (an optimizer wrapped twice gossips twice per step)."""
    if inspect.isclass(base) and issubclass(base, torch.optim.Optimizer):
        raise TypeError(
            f"wrap takes an optimizer, not its class: wrap({base.__name__}(model.parameters(), "
            f"lr=...), ...)"
        )
    if gossips(base):
        raise TypeError(
            f"wrap: {type(base).__name__} already gossips with its neighbours; wrapping it "
            "again would gossip twice per step. Wrap the plain torch optimizer instead"
        )
    if not isinstance(base, torch.optim.Optimizer):
        raise TypeError(
            f"wrap takes a torch optimizer built on the parameters, got {type(base).__name__}; "
            "e.g. wrap(torch.optim.AdamW(model.parameters()), 'edm', comm)"
        )
    check_comm(comm, "wrap")


class GossipOptimizer:
    """``base``'s local updates taken by ``method`` (a registered name or a method; its
    hyper-parameters other than ``lr``, e.g. ``gossip="push_sum"``), under the outer
    optimizer ``outer`` if given (``"nesterov(lr=0.7, beta=0.9, every=500)"``): a base
    optimizer whose every step is followed by one step of the method on the base step (see
    the module doc)."""

    def __init__(
        self,
        base: torch.optim.Optimizer,
        method: str | Any,
        comm: Communicator,
        outer: str | Any = None,
        **hyperparams: Any,
    ) -> None:
        _check_base(base, comm)
        self.base = base
        self.comm = comm
        params = [p for g in base.param_groups for p in g["params"]]
        # the base step is taken whole (lr = 1); the momentum is the base optimizer's
        if isinstance(method, str) and algorithms.resolve(method).uses_momentum:
            given = hyperparams.keys() & {"beta", "momentum"}
            hyperparams = hyperparams if given else {"beta": 0.0} | hyperparams
        hyperparams = {"lr": 1.0} | hyperparams
        self.gossip = DecentralizedOptimizer(params, method, comm, outer=outer, **hyperparams)
        self.algorithm = self.gossip.algorithm.name
        if not self.gossip.algorithm.takes_direction:
            raise ValueError(
                f"wrap hands the method a base optimizer's update in place of its gradient "
                f"step; {self.algorithm} uses the gradient otherwise (takes_direction is "
                "False): use DecentralizedOptimizer"
            )
        # the base optimizer's settings must match too (the inner optimizer checks the method's)
        fields = agreement.describe_algorithm(base, "base optimizer")
        fields |= agreement.describe_params(base.param_groups, sorted(base.defaults))
        agreement.agree(comm, fields, "the wrapped optimizer")

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.base.param_groups

    @property
    def state(self) -> Any:
        return self.base.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.base.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        params = [p for g in self.base.param_groups for p in g["params"] if p.requires_grad]
        if isinstance(self.comm, AgentGroup):  # the agent's gradient, as DDP's, for the base
            for p in params:
                if p.grad is not None:
                    p.grad.copy_(self.comm.average_gradients(p.grad))
        before = [p.detach().clone() for p in params]
        loss = self.base.step(closure)
        grads = [p.grad for p in params]
        for p, x in zip(params, before, strict=True):
            p.grad = x - p  # the base step as the method's direction: x - d = y
            p.copy_(x)
        try:
            self.gossip.step()
        finally:
            for p, g in zip(params, grads, strict=True):
                p.grad = g
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"base": self.base.state_dict(), "gossip": self.gossip.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "gossip" not in state:
            raise ValueError("not a state_dict of wrap(): it has no 'gossip' entry")
        self.gossip.load_state_dict(state["gossip"])
        self.base.load_state_dict(state["base"])


#: ``wrap(base, method, comm, outer=None, **hyperparams)``: the :class:`GossipOptimizer`.
wrap = GossipOptimizer
