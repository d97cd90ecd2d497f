"""``DecentralizedOptimizer``: any registered algorithm as a ``torch.optim`` optimizer.

Each parameter group's trainable parameters are re-pointed into one flat
``(1, P)`` row (the algorithm's ``x``), so a step is the algorithm's pure
``step`` on flat tensors plus one gossip round per group through the
communicator -- the same code the simulator runs on ``(n, P)``::

    opt = DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, beta=0.9)
    for xb, yb in loader:
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()

It follows ``torch.optim`` semantics:

* ``zero_grad()`` sets gradients to ``None`` by default (``set_to_none=False``
  zeroes them); a parameter whose ``.grad`` is ``None`` at ``step()`` counts as
  a zero gradient. Unlike ``torch.optim.SGD``, which skips such a parameter, it
  still moves: it gossips with its neighbours (consensus needs every row), and
  momentum and weight decay act on it.
* Parameter groups take their own ``lr``, ``weight_decay`` (coupled, added to
  the gradient as in ``torch.optim.SGD``) and, for methods with momentum,
  ``beta`` (``momentum`` is accepted as its alias). Each group is one gossip
  round per step.
* Parameters with ``requires_grad=False`` are left untouched.
* ``state_dict()`` has torch's format: ``state`` by parameter index (each
  algorithm buffer split per parameter, ``step`` the iteration counter) and
  ``param_groups``; every ``torch.optim.lr_scheduler`` works through
  ``param_groups[i]["lr"]``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from decentopt import algorithms
from decentopt._checks import as_real
from decentopt.algorithms.base import Algorithm
from decentopt.comm.base import Communicator

__all__ = ["DecentralizedOptimizer"]


@dataclass
class _Flat:
    """One parameter group packed into flat rows: the algorithm's state and a gradient row."""

    params: list[torch.nn.Parameter]
    sizes: list[int]
    grad: torch.Tensor
    state: Any
    algorithm: Any

    def views(self, row: torch.Tensor) -> list[torch.Tensor]:
        return [c.view_as(p) for c, p in zip(row.split(self.sizes), self.params, strict=True)]

    def bind(self) -> None:
        """Point every parameter's data at its slice of ``x``."""
        for p, v in zip(self.params, self.views(self.state.x[0]), strict=True):
            p.data = v


class DecentralizedOptimizer(torch.optim.Optimizer):
    """One agent's optimizer; neighbours are reached through ``comm``.

    .. math::
        g_i \\leftarrow \\nabla f_i(x_i) + \\lambda_{wd}\\, x_i, \\qquad
        \\text{state} \\leftarrow \\texttt{algorithm.step}(\\text{state}, g, \\texttt{comm})

    Args:
        params: parameters, or a list of parameter-group dicts as in ``torch.optim``.
        algorithm: a registered name (``"edm"``) or an algorithm instance.
        comm: a communicator whose ``mix`` combines this agent's row with its neighbours'.
        weight_decay: coupled L2 penalty added to the gradient (default 0).
        **hyperparams: the algorithm's hyper-parameters when given by name
            (``lr``, ``beta``/``momentum``, ``nesterov``, ...).
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter] | Iterable[dict[str, Any]],
        algorithm: str | Algorithm[Any],
        comm: Communicator,
        *,
        weight_decay: float = 0.0,
        **hyperparams: Any,
    ) -> None:
        if "momentum" in hyperparams:
            hyperparams["beta"] = hyperparams.pop("momentum")
        if isinstance(algorithm, str):
            alg = algorithms.make(algorithm, **hyperparams)
        elif hyperparams:
            alg = algorithm.with_hyperparams(**hyperparams)  # type: ignore[attr-defined]
        else:
            alg = algorithm
        if callable(alg.lr):
            raise ValueError(
                "give DecentralizedOptimizer a constant lr and use a torch.optim.lr_scheduler "
                "for schedules"
            )
        self.algorithm = alg
        self.comm = comm
        self._tunable = (
            ("lr", "beta") if "beta" in algorithms.hyperparameters(type(alg)) else ("lr",)
        )
        self._flats: list[_Flat] = []
        defaults: dict[str, Any] = {"lr": float(alg.lr), "weight_decay": weight_decay}
        if "beta" in self._tunable:
            defaults["beta"] = float(alg.beta)  # type: ignore[attr-defined]
        params = list(params)
        if not params:
            raise ValueError("DecentralizedOptimizer got an empty parameter list")
        super().__init__(params, defaults)

    # ----------------------------------------------------------------- groups
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (``torch.optim`` semantics) and pack its parameters into flat rows."""
        if "momentum" in param_group:
            param_group = dict(param_group)
            param_group["beta"] = param_group.pop("momentum")
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        group["weight_decay"] = as_real(group["weight_decay"], "weight_decay")
        if group["weight_decay"] < 0:
            raise ValueError(f"weight_decay must be >= 0; got {group['weight_decay']}")
        algorithm = self._algorithm_for(group)
        trainable = [p for p in group["params"] if p.requires_grad]
        if not trainable:
            self._flats.append(_Flat([], [], torch.empty(0), None, algorithm))
            return
        flat = torch.cat([p.detach().reshape(-1) for p in trainable]).unsqueeze(0)
        packed = _Flat(
            params=trainable,
            sizes=[p.numel() for p in trainable],
            grad=torch.zeros_like(flat),
            state=algorithm.init(flat),
            algorithm=algorithm,
        )
        packed.bind()
        self._flats.append(packed)

    def _algorithm_for(self, group: dict[str, Any]) -> Any:
        """The algorithm with this group's current hyper-parameters (the base one if unchanged)."""
        changes = {k: group[k] for k in self._tunable if group[k] != getattr(self.algorithm, k)}
        return self.algorithm.with_hyperparams(**changes) if changes else self.algorithm

    # ------------------------------------------------------------------- step
    def zero_grad(self, set_to_none: bool = True) -> None:
        """As ``torch.optim``: set gradients to ``None`` (default) or to zero."""
        super().zero_grad(set_to_none=set_to_none)

    def _gather_grad(self, packed: _Flat) -> torch.Tensor:
        """The group's gradient as one row; ``None`` counts as zero."""
        for p, slot in zip(packed.params, packed.views(packed.grad[0]), strict=True):
            g = p.grad
            if g is None:
                slot.zero_()
            elif g.is_sparse:
                raise RuntimeError("DecentralizedOptimizer does not support sparse gradients")
            elif g.data_ptr() != slot.data_ptr():
                slot.copy_(g)
        return packed.grad.clone()

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, packed in zip(self.param_groups, self._flats, strict=True):
            if not packed.params:
                continue
            grad = self._gather_grad(packed)
            if group["weight_decay"]:
                grad.add_(packed.state.x, alpha=group["weight_decay"])
            packed.algorithm = self._algorithm_for(group)  # follows schedulers' changes
            packed.state = packed.algorithm.step(packed.state, grad, self.comm)
            packed.bind()
        return loss

    @property
    def algorithm_state(self) -> Any:
        """The algorithm state of the first parameter group (flat ``(1, P)`` rows)."""
        return self._flats[0].state

    # ------------------------------------------------------------ checkpoints
    def _state_fields(self, packed: _Flat) -> list[str]:
        return [k for k in packed.state._fields if k not in ("x", "t")]

    def state_dict(self) -> dict[str, Any]:
        """torch's format: per-parameter slices of every algorithm buffer, plus ``step``."""
        self.state.clear()
        for packed in self._flats:
            if not packed.params:
                continue
            fields = self._state_fields(packed)
            split = {k: packed.views(getattr(packed.state, k)[0]) for k in fields}
            for i, p in enumerate(packed.params):
                self.state[p] = {"step": packed.state.t} | {k: split[k][i] for k in fields}
        saved = super().state_dict()
        saved["algorithm"] = self.algorithm.name
        return saved

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; the iterate is the model's current parameters."""
        saved_alg = state_dict.get("algorithm")
        if saved_alg != self.algorithm.name:
            raise ValueError(
                f"checkpoint is for {saved_alg!r}, this optimizer runs {self.algorithm.name!r}"
            )
        state_dict = {k: v for k, v in state_dict.items() if k != "algorithm"}
        super().load_state_dict(state_dict)
        for group, packed in zip(self.param_groups, self._flats, strict=True):
            if not packed.params:
                continue
            fields = self._state_fields(packed)
            missing = [p for p in packed.params if not set(fields) <= set(self.state.get(p, {}))]
            if missing:
                raise ValueError(
                    f"the checkpoint has no {self.algorithm.name} state for {len(missing)} "
                    "parameter(s); was it saved by a DecentralizedOptimizer over the same model?"
                )
            x = torch.cat([p.detach().reshape(-1) for p in packed.params]).unsqueeze(0)
            buffers = {
                k: torch.cat([self.state[p][k].reshape(-1) for p in packed.params]).unsqueeze(0)
                for k in fields
            }
            step = int(self.state[packed.params[0]]["step"])
            packed.state = type(packed.state)(x=x, t=step, **buffers)
            packed.algorithm = self._algorithm_for(group)
            packed.bind()
        self.state.clear()
