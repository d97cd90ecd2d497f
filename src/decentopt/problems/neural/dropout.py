"""Dropout with one random stream per replica.

Each replica (an agent of a run) draws its dropout masks from its own
``torch.Generator``, seeded from the run's noise seed and the agent's id. So the
loop backend (one replica at a time) and the grouped backend (all replicas layer
by layer) draw the same masks, and a distributed rank holding agent ``a`` draws
what the simulator draws for it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["ReplicaDropout", "dropout_seed", "replica_dropout", "swap_dropout"]


def dropout_seed(noise_seed: int, agent: int) -> int:
    """The dropout seed of ``agent`` in a run whose noise generator is seeded ``noise_seed``."""
    return int(np.random.SeedSequence([int(noise_seed), int(agent), 0xD0]).generate_state(1)[0])


def replica_dropout(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """``x`` times a Bernoulli(1 - p) mask from ``generator``, scaled by ``1 / (1 - p)``."""
    if p <= 0:
        return x
    if p >= 1:
        return torch.zeros_like(x)
    mask = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    mask.bernoulli_(1 - p, generator=generator)
    return x * mask * (1.0 / (1 - p))


class ReplicaDropout(nn.Module):
    """``nn.Dropout`` drawing from one replica's generator (in training mode)."""

    def __init__(self, p: float, generator: torch.Generator) -> None:
        super().__init__()
        self.p = float(p)
        self.generator = generator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return replica_dropout(x, self.p, self.generator) if self.training else x


def swap_dropout(module: nn.Module, generator: torch.Generator) -> None:
    """Replace every ``nn.Dropout`` of ``module`` (in place) by a :class:`ReplicaDropout`."""
    for name, child in module.named_children():
        if type(child) is nn.Dropout:
            setattr(module, name, ReplicaDropout(child.p, generator))
        else:
            swap_dropout(child, generator)
