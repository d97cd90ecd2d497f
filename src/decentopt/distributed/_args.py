"""Argument checks of ``DecentralizedOptimizer`` and ``wrap``: at construction, one line each.

What these catch would otherwise fail later and far from the mistake (a class
instead of an optimizer crashes at the first ``zero_grad()``, a topology instead
of a communicator at the first step) or not at all (an optimizer wrapped twice
gossips twice per step).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from decentopt.communicator import Communicator

__all__ = ["check_optimizer_args", "check_wrap_args"]


def _gossips(obj: Any) -> bool:
    """An optimizer that already combines with neighbours (this package's, or a wrapper)."""
    return isinstance(getattr(obj, "comm", None), Communicator)


def check_comm(comm: Any, owner: str) -> None:
    if not isinstance(comm, Communicator):
        raise TypeError(
            f"{owner}: comm must be a communicator, got {type(comm).__name__}; build one from "
            "the graph, e.g. dopt.comm.DistributedCommunicator(dopt.topology.ring(world))"
        )


def check_optimizer_args(params: Any, comm: Any, hyperparams: dict[str, Any]) -> None:
    """``DecentralizedOptimizer(params, algorithm, comm, **hyperparams)``'s arguments."""
    owner = "DecentralizedOptimizer"
    if isinstance(params, torch.optim.Optimizer) or _gossips(params):
        raise TypeError(
            f"{owner} takes the model's parameters, not an optimizer ({type(params).__name__}); "
            "to gossip a torch optimizer's updates use dopt.distributed.wrap(optimizer, ...)"
        )
    if isinstance(params, torch.nn.Module):
        raise TypeError(f"{owner} takes model.parameters(), not the module itself")
    check_comm(comm, owner)
    if "beta" in hyperparams and "momentum" in hyperparams:
        raise ValueError(
            f"{owner}: beta={hyperparams['beta']} and momentum={hyperparams['momentum']} "
            "name the same thing; give one of them"
        )


def check_wrap_args(base: Any, comm: Any) -> None:
    """``wrap(base, algorithm, comm)``'s arguments."""
    if inspect.isclass(base) and issubclass(base, torch.optim.Optimizer):
        raise TypeError(
            f"wrap takes an optimizer, not its class: wrap({base.__name__}(model.parameters(), "
            f"lr=...), ...)"
        )
    if _gossips(base):
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
