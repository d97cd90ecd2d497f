"""Per-agent mini-batches: each agent walks through its own shuffled share of the data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["AgentSampler"]


@dataclass
class AgentSampler:
    """Per-agent mini-batches without replacement within each agent's epoch.

    Each agent walks through a fresh permutation of its own indices and
    reshuffles when it runs out. Agent ``a`` draws from its own generator seeded
    by ``(seed, a)``, so a distributed rank holding agent ``a`` alone draws the
    same batches as the simulator does for it. The state (generators,
    permutations, positions) is checkpointed so that a resumed run draws the
    same batches.
    """

    indices: tuple[np.ndarray, ...]
    batch_size: int
    seed: int = 0
    agent_ids: tuple[int, ...] | None = None
    #: mean samples per agent over *all* agents (a rank holding one agent passes it,
    #: so that every rank takes the same number of steps per epoch)
    mean_share: float | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {self.batch_size}")
        small = [i for i, ix in enumerate(self.indices) if len(ix) < self.batch_size]
        if small:
            raise ValueError(
                f"agents {small[:5]} hold fewer samples than the batch size {self.batch_size}; "
                "lower the batch size or raise the split's min_share"
            )
        ids = self.agent_ids if self.agent_ids is not None else range(len(self.indices))
        self._rngs = [np.random.default_rng([self.seed, int(a)]) for a in ids]
        self._perm = [rng.permutation(ix) for rng, ix in zip(self._rngs, self.indices, strict=True)]
        self._pos = [0] * len(self.indices)

    def next(self) -> np.ndarray:
        """Sample indices ``(n, batch_size)`` for one step of every agent."""
        out = np.empty((len(self.indices), self.batch_size), dtype=np.int64)
        for i, ix in enumerate(self.indices):
            if self._pos[i] + self.batch_size > len(ix):
                self._perm[i] = self._rngs[i].permutation(ix)
                self._pos[i] = 0
            out[i] = self._perm[i][self._pos[i] : self._pos[i] + self.batch_size]
            self._pos[i] += self.batch_size
        return out

    @property
    def steps_per_epoch(self) -> int:
        """Steps for an average agent to see its data once."""
        mean = self.mean_share or float(np.mean([len(ix) for ix in self.indices]))
        return max(1, int(np.ceil(mean / self.batch_size)))

    def state_dict(self) -> dict[str, Any]:
        """Plain data and tensors (checkpoints are read with ``weights_only=True``)."""
        return {
            "rng": [rng.bit_generator.state for rng in self._rngs],
            "perm": [torch.from_numpy(p.copy()) for p in self._perm],
            "pos": list(self._pos),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for rng, saved in zip(self._rngs, state["rng"], strict=True):
            rng.bit_generator.state = saved
        self._perm = [np.asarray(p, dtype=np.int64) for p in state["perm"]]
        self._pos = list(state["pos"])
