"""The flat layout of a model's parameters: every replica's parameters are one row.

``x`` of shape ``(N, P)`` holds ``N`` replicas (agents, or agents x runs), each row the
concatenation of the model's parameters in ``named_parameters`` order; a parameter
of replica ``r`` is a view of ``x[r]``, and all replicas' copies of it one strided
view ``(N, *shape)`` of ``x``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["ParamLayout"]


@dataclass(frozen=True)
class ParamLayout:
    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, model: nn.Module) -> ParamLayout:
        named = list(model.named_parameters())
        return cls(
            tuple(n for n, _ in named),
            tuple(p.shape for _, p in named),
            tuple(p.numel() for _, p in named),
        )

    @property
    def dim(self) -> int:
        return int(sum(self.sizes))

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """``flat`` (``(P,)`` or ``(..., P)``) cut into parameter-shaped views."""
        lead = flat.shape[:-1]
        return [
            chunk.view(*lead, *shape)
            for chunk, shape in zip(flat.split(self.sizes, dim=-1), self.shapes, strict=True)
        ]

    def flatten(self, model: nn.Module) -> torch.Tensor:
        """A model's parameters as one ``(P,)`` row."""
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
