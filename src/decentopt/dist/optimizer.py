"""``DecentralizedOptimizer``: any registered algorithm as a ``torch.optim`` optimizer.

The model's parameters are re-pointed into one flat ``(1, P)`` row (the
algorithm's ``x``) and their ``.grad`` into a matching row, so a step is the
algorithm's pure ``step`` on two flat tensors plus one gossip round through
the communicator -- the same code the simulator runs on ``(n, P)``::

    opt = DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, beta=0.9)
    for xb, yb in loader:
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()

Learning-rate schedulers work through ``param_groups[0]["lr"]``;
``state_dict``/``load_state_dict`` carry the algorithm state for checkpoints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch

from decentopt import algorithms
from decentopt.algorithms.base import Algorithm
from decentopt.comm.base import Communicator

__all__ = ["DecentralizedOptimizer"]


class DecentralizedOptimizer(torch.optim.Optimizer):
    """One agent's optimizer; neighbours are reached through ``comm``.

    Args:
        params: the model's parameters (one group).
        algorithm: a registered name (``"edm"``) or an algorithm instance.
        comm: a communicator whose ``mix`` combines this agent's row with its neighbours'.
        **hyperparams: the algorithm's hyper-parameters when given by name.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        algorithm: str | Algorithm[Any],
        comm: Communicator,
        **hyperparams: Any,
    ) -> None:
        alg = algorithms.make(algorithm, **hyperparams) if isinstance(algorithm, str) else algorithm
        if callable(alg.lr):
            raise ValueError(
                "give DecentralizedOptimizer a constant lr and use a torch.optim.lr_scheduler "
                "for schedules"
            )
        params = list(params)
        if not params:
            raise ValueError("DecentralizedOptimizer got an empty parameter list")
        super().__init__(params, {"lr": float(alg.lr)})
        self.algorithm = alg
        self.comm = comm
        self._params = [p for p in params if p.requires_grad]
        self._sizes = [p.numel() for p in self._params]
        ref = self._params[0]
        flat = torch.cat([p.detach().reshape(-1) for p in self._params]).unsqueeze(0)
        self._grad = torch.zeros_like(flat)
        self._alg_state = alg.init(flat)
        self._bind(self._alg_state.x)
        for p, g in zip(self._params, self._views(self._grad[0]), strict=True):
            p.grad = g
        self.dim = flat.shape[1]
        self._device = ref.device

    def _views(self, row: torch.Tensor) -> list[torch.Tensor]:
        return [
            chunk.view_as(p)
            for chunk, p in zip(row.split(self._sizes), self._params, strict=True)
        ]

    def _bind(self, x: torch.Tensor) -> None:
        for p, v in zip(self._params, self._views(x[0]), strict=True):
            p.data = v

    def zero_grad(self, set_to_none: bool = False) -> None:
        # the .grad tensors are views of one flat row: keep them, zero the row
        self._grad.zero_()

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        lr = float(self.param_groups[0]["lr"])
        alg = self.algorithm if lr == self.algorithm.lr else dataclasses.replace(
            self.algorithm, lr=lr
        )
        self._alg_state = alg.step(self._alg_state, self._grad.clone(), self.comm)
        self._bind(self._alg_state.x)
        return loss

    @property
    def algorithm_state(self) -> Any:
        return self._alg_state

    def state_dict(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm.name,
            "lr": self.param_groups[0]["lr"],
            "state": {k: v for k, v in self._alg_state._asdict().items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("algorithm") != self.algorithm.name:
            raise ValueError(
                f"checkpoint is for {state_dict.get('algorithm')!r}, this optimizer runs "
                f"{self.algorithm.name!r}"
            )
        saved = state_dict["state"]
        if saved["x"].shape != self._alg_state.x.shape:
            raise ValueError(
                f"checkpoint holds {saved['x'].shape[1]} parameters, the model {self.dim}"
            )
        self._alg_state = type(self._alg_state)(
            **{k: v.to(self._device) if isinstance(v, torch.Tensor) else v for k, v in saved.items()}
        )
        self.param_groups[0]["lr"] = state_dict["lr"]
        self._bind(self._alg_state.x)
