"""The checkpointer: when a run writes its state, and how it finds the state to resume from."""

from __future__ import annotations

import time
import warnings
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import torch

from decentopt.communicator import Communicator
from decentopt.distributed.checkpoint import load_latest, save_checkpoint

__all__ = ["CHECK_EVERY", "Checkpointer"]

#: How often (in steps) divergence and the checkpoint clock are checked between records.
CHECK_EVERY = 50


@dataclass
class Checkpointer:
    """Writes a checkpoint at the end of every epoch (``period``), or every ``every``
    steps instead, and whenever ``minutes`` have passed since the last one (checked every
    ``CHECK_EVERY`` steps, agreed by every rank); finds the newest one intact on every rank.
    """

    folder: str | Path
    comm: Communicator
    _: KW_ONLY
    period: int | None
    every: int | None = None
    minutes: float | None = None
    device: torch.device | None = None  # of the ranks' agreement (None: the CPU)
    last: float = field(default_factory=time.monotonic, init=False)

    def _share(self, flag: bool) -> float:
        """The share of the ranks whose ``flag`` is true (1.0: all of them). ``comm.mean``
        averages over agents, not ranks (a rank may hold several): the flag's mean over the
        ranks' one-row means of ``[flag, 1]``."""
        one = [1.0 if flag else 0.0, 1.0]
        value = torch.tensor([one], dtype=torch.float64, device=self.device or "cpu")
        shares = self.comm.mean(value).reshape(-1)
        return float(shares[0] / shares[1])

    def restore(self, like: Any = None) -> dict[str, Any] | None:
        """The payload of the newest checkpoint every rank can read intact, or ``None``.

        ``like``: the run's fresh state; a checkpoint whose state differs from it in a field,
        shape or dtype (copied from a run of other agents or sizes) is left with a warning
        naming its folder, and the run starts afresh."""
        found = load_latest(self.folder, lambda ok: self._share(ok) == 1.0)
        if found is None:
            return None
        step, payload = found
        why = None if like is None else _mismatch(payload.get("state"), like)
        if self._share(why is None) != 1.0:
            warnings.warn(
                f"{self.folder}: the checkpoint of step {step} is of another run "
                f"({why or 'on another rank'}); starting afresh",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        return payload

    def due(self, step: int) -> bool:
        """Whether a checkpoint is written after ``step`` (every rank decides alike)."""
        every = self.every or self.period  # every so many steps, else every epoch
        if every and step % every == 0:
            return True
        if self.minutes and step % CHECK_EVERY == 0:
            late = time.monotonic() - self.last >= 60 * self.minutes
            return self._share(late) > 0  # any rank's clock decides for all
        return False

    def save(self, step: int, payload: dict[str, Any]) -> None:
        save_checkpoint(self.folder, step, payload, barrier=self.comm.barrier)
        self.last = time.monotonic()


def _mismatch(saved: Any, like: Any) -> str | None:
    """Why a saved state cannot stand for ``like`` (a method's state), or None."""
    if not isinstance(saved, dict):
        return "it holds no algorithm state"
    for name, mine in like.tensors().items():
        theirs = saved.get(name)
        if not isinstance(theirs, torch.Tensor):
            return f"no tensor {name!r}"
        if theirs.shape != mine.shape or theirs.dtype != mine.dtype:
            return (
                f"{name!r} is {tuple(theirs.shape)} {theirs.dtype}, this run's "
                f"{tuple(mine.shape)} {mine.dtype}"
            )
    return None
