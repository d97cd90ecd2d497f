"""``backend = "loop"``: one module replica per agent, one forward and backward each.

The replicas' parameters are views of the rows of ``x`` and their ``.grad`` views of
the rows of a gradient buffer, so nothing is copied in or out. Buffers (BatchNorm
statistics) live in each replica: per agent, never mixed. Dropout draws from each
replica's own generator (:mod:`.dropout`). Any model runs this way; it is the
reference the other backends are tested against. ``compile`` is refused: it would
compile ``N`` separate modules.
"""

from __future__ import annotations

import copy
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from decentopt.problems.neural.base import Batch, GradientBackend, Options
from decentopt.problems.neural.dropout import ReplicaDropout, swap_dropout
from decentopt.problems.neural.layout import ParamLayout
from decentopt.problems.neural.vmap import channels_last_rows

__all__ = ["LoopBackend"]


class LoopBackend(GradientBackend):
    name: ClassVar[str] = "loop"

    def __init__(self, model: nn.Module, layout: ParamLayout, replicas: int, options: Options):
        if options.compile:
            raise ValueError(
                "compile = true needs backend 'vmap' or 'grouped' (the loop backend runs one "
                "module per agent); set backend, or compile = false"
            )
        super().__init__(model, layout, replicas, options)
        self.replicas = [copy.deepcopy(model) for _ in range(replicas)]
        for replica in self.replicas:
            swap_dropout(replica, torch.Generator())  # each call gives the replica's own
        self._dropouts = [
            [m for m in r.modules() if isinstance(m, ReplicaDropout)] for r in self.replicas
        ]
        dtype = next(model.parameters()).dtype
        self._grad = torch.zeros(replicas, layout.dim, device=options.device, dtype=dtype)
        for replica, row in zip(self.replicas, self._grad, strict=True):
            for p, g in zip(replica.parameters(), layout.views(row), strict=True):
                p.grad = g

    def bind(self, x: torch.Tensor) -> None:
        """Point every replica's parameters at its row of ``x`` (no copy)."""
        for replica, row in zip(self.replicas, x, strict=True):
            for p, v in zip(replica.parameters(), self.layout.views(row), strict=True):
                p.data = v

    def gradients(self, x: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        self.bind(x)
        self._grad.zero_()
        images = batch.images
        if self.options.channels_last and images.ndim == 5:
            images = channels_last_rows(images)
        losses = torch.empty(len(self.replicas), device=x.device, dtype=torch.float32)
        for i, replica in enumerate(self.replicas):
            replica.train()
            for m in self._dropouts[i]:
                m.generator = batch.dropout[i]
            with self.options.autocast():
                loss = F.cross_entropy(replica(images[i]), batch.labels[i])
            loss.backward()
            losses[i] = loss.detach()
        return self._grad.clone(), losses

    @torch.no_grad()
    def logits(self, x: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        self.bind(x)
        for replica in self.replicas:
            replica.eval()
        return torch.stack([replica(images) for replica in self.replicas])

    def buffers(self) -> list[list[torch.Tensor]]:
        return [list(r.buffers()) for r in self.replicas]
