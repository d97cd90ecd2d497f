"""``backend = "vmap"``: one batched forward and backward for every replica.

``torch.func.vmap`` of ``grad_and_value`` over the stacked parameters; dropout is
drawn independently per replica from torch's generator (``randomness="different"``:
statistically as the loop backend, not the same numbers). Models with buffers
(BatchNorm) are refused: use ``loop`` or ``grouped``. Channels-last images are laid
out before vmap (inside it, a layout change is not supported).
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from decentopt.problems.neural.base import Batch, GradientBackend, Options
from decentopt.problems.neural.layout import ParamLayout

__all__ = ["VmapBackend", "channels_last_rows"]


def channels_last_rows(images: torch.Tensor) -> torch.Tensor:
    """``(N, B, C, H, W)`` with every ``(B, C, H, W)`` slice in channels-last layout."""
    return images.permute(0, 1, 3, 4, 2).contiguous().permute(0, 1, 4, 2, 3)


class VmapBackend(GradientBackend):
    name: ClassVar[str] = "vmap"

    def __init__(self, model: nn.Module, layout: ParamLayout, replicas: int, options: Options):
        if any(True for _ in model.buffers()):
            raise ValueError(
                "backend 'vmap' needs a model without buffers (e.g. no BatchNorm); use "
                "backend 'grouped' or 'loop'"
            )
        super().__init__(model, layout, replicas, options)

        def forward(flat: torch.Tensor, xb: torch.Tensor) -> torch.Tensor:
            params = dict(zip(layout.names, layout.views(flat), strict=True))
            return torch.func.functional_call(model, params, (xb,))

        def loss(flat: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            with options.autocast():
                return F.cross_entropy(forward(flat, xb), yb)

        self._batched = torch.func.vmap(torch.func.grad_and_value(loss), randomness="different")
        self._logits = torch.func.vmap(forward, in_dims=(0, None))

    def gradients(self, x: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        self.model.train()
        images = batch.images
        if self.options.channels_last and images.ndim == 5:
            images = channels_last_rows(images)
        return self.run(self._batched, x, images, batch.labels)

    @torch.no_grad()
    def logits(self, x: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        self.model.eval()
        return self._logits(x, images)
