"""The divergence guard: a column that blows up is stopped, reported and recorded as NaN."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from decentopt.communicator import Communicator

__all__ = ["GROWTH", "OUTLIER", "DivergenceGuard"]

#: A column also diverges when mean_i ||x_i||^2 exceeds this many times the median of
#: the others (relative to each column's start): a run blowing up slowly is not averaged in.
OUTLIER = 1e6
#: ... or this many times its own starting scale, whatever ``blowup`` says: every column
#: of a run may grow together, without overflowing (CHOCO-SGD with top-k(0.1) and
#: gamma = 1 on ring(32) reached 5e8 times its start in 1,000 steps, finite).
GROWTH = 1e6


def column_norms(x: torch.Tensor, comm: Communicator) -> torch.Tensor:
    """``mean_i ||x_i||^2`` per column over all agents (collective under torch.distributed)."""
    return comm.mean(x.pow(2).sum(-1).unsqueeze(-1).double()).reshape(-1).cpu()


class DivergenceGuard:
    """Stops the columns whose iterates leave every sensible bound.

    A column diverges when ``mean_i ||x_i||^2`` is not finite, exceeds
    ``min(blowup, GROWTH) * (1 + mean_i ||x_i(0)||^2 + ||x*||^2)`` (its starting scale),
    or exceeds ``OUTLIER`` times the median of the other columns (each relative to its
    start). A stopped column is
    zeroed so that it cannot overflow, and its step kept in :attr:`diverged_at`.
    """

    def __init__(
        self, x0: torch.Tensor, x_star: torch.Tensor | None, comm: Communicator, blowup: float
    ) -> None:
        self.comm = comm
        self.scale = 1.0 + column_norms(x0, comm)
        if x_star is not None:
            self.scale = self.scale + x_star.pow(2).sum(-1).reshape(-1).cpu()
        self.scale = self.scale.numpy()
        self.limit = min(blowup, GROWTH) * self.scale
        self.diverged_at = np.full(len(self.scale), -1, dtype=np.int64)

    @property
    def alive(self) -> int:
        """Columns still running."""
        return int((self.diverged_at < 0).sum())

    def check(self, state: Any, t: int) -> Any:
        """Mark the columns diverged by step ``t``; returns the state with them zeroed."""
        # in NumPy: a few numbers each, where every torch operation costs microseconds
        sq = column_norms(state.x, self.comm).numpy()
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(sq) | (sq > self.limit)
            if len(sq) > 2 and (~bad).any():  # or far above the median of the others
                rel = sq / self.scale
                ok = np.sort(rel[~bad])
                bad |= rel > OUTLIER * max(ok[(len(ok) - 1) // 2], 1e-300)  # torch's lower median
        new = bad & (self.diverged_at < 0)
        self.diverged_at[new] = t
        if self.alive == len(self.diverged_at):
            return state
        keep = torch.from_numpy(self.diverged_at < 0).view(1, -1, 1)
        zeroed = {}  # the stopped columns of every stacked (n, R, d) tensor
        for name, value in state.tensors().items():
            if value.ndim == 3:
                zeroed[name] = torch.where(keep.to(value.device), value, 0.0)
        return state.replace(**zeroed)
