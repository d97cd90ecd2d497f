"""The checkpointer: when a run writes its state, and how it finds the state to resume from."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from decentopt.comm.base import Communicator
from decentopt.distributed.checkpoint import load_latest, save_checkpoint

__all__ = ["CHECK_EVERY", "Checkpointer"]

#: How often (in steps) divergence and the checkpoint clock are checked between records.
CHECK_EVERY = 50


class Checkpointer:
    """Writes a checkpoint at the end of every epoch (``period``), or every ``every``
    steps instead, and whenever ``minutes`` have passed since the last one (checked every
    ``CHECK_EVERY`` steps, agreed by every rank); finds the newest one intact on every rank.
    """

    def __init__(
        self,
        folder: str | Path,
        comm: Communicator,
        *,
        period: int | None,
        every: int | None = None,
        minutes: float | None = None,
        device: torch.device | None = None,
    ) -> None:
        self.folder, self.comm, self.period = Path(folder), comm, period
        self.every, self.minutes = every, minutes
        self.device = device or torch.device("cpu")
        self.last = time.monotonic()

    def _all(self, flag: bool, rule: str) -> bool:
        """Every rank's ``flag`` combined: ``"all"`` true, or ``"any"`` true."""
        value = torch.tensor([[1.0 if flag else 0.0]], dtype=torch.float64, device=self.device)
        mean = float(self.comm.mean(value).item())
        return mean == 1.0 if rule == "all" else mean > 0

    def restore(self) -> dict[str, Any] | None:
        """The payload of the newest checkpoint every rank can read intact, or ``None``."""
        found = load_latest(self.folder, lambda ok: self._all(ok, "all"))
        return None if found is None else found[1]

    def due(self, step: int) -> bool:
        """Whether a checkpoint is written after ``step`` (every rank decides alike)."""
        if self.every:
            if step % self.every == 0:
                return True
        elif self.period and step % self.period == 0:
            return True
        if self.minutes and step % CHECK_EVERY == 0:
            late = time.monotonic() - self.last >= 60 * self.minutes
            return self._all(late, "any")  # any rank's clock decides for all
        return False

    def save(self, step: int, payload: dict[str, Any]) -> None:
        save_checkpoint(self.folder, step, payload, barrier=self.comm.barrier)
        self.last = time.monotonic()
