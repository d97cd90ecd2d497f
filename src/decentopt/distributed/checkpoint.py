"""Per-rank checkpoints that are only used once every rank has written its part.

Layout: ``DIR/step-00000123/rank0.pt ... rankN.pt`` and a ``COMPLETE`` marker
that rank 0 writes after a barrier, i.e. after every rank's file is on disk.
A restarted job loads the newest step that has the marker, so a crash in the
middle of writing never leaves ranks at different steps. ``DIR`` must be
visible to every rank (a shared file system on several nodes).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["latest_checkpoint", "load_checkpoint", "save_checkpoint"]

_MARKER = "COMPLETE"


def _step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def save_checkpoint(root: str | Path, step: int, payload: dict[str, Any], *, keep: int = 2) -> None:
    """Collective: every rank writes its payload; rank 0 marks the step complete."""
    root = Path(root)
    rank = dist.get_rank() if dist.is_initialized() else 0
    folder = _step_dir(root, step)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".rank{rank}.", suffix=".tmp")
    os.close(fd)
    torch.save(payload, tmp)
    os.replace(tmp, folder / f"rank{rank}.pt")
    if dist.is_initialized():
        dist.barrier()
    if rank == 0:
        (folder / _MARKER).touch()
        complete = sorted(p for p in root.glob("step-*") if (p / _MARKER).is_file())
        for old in complete[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    if dist.is_initialized():
        dist.barrier()


def latest_checkpoint(root: str | Path) -> int | None:
    """The newest step whose checkpoint every rank finished, or None."""
    steps = [
        int(p.name.split("-")[1]) for p in Path(root).glob("step-*") if (p / _MARKER).is_file()
    ]
    return max(steps) if steps else None


def load_checkpoint(root: str | Path, step: int) -> dict[str, Any]:
    rank = dist.get_rank() if dist.is_initialized() else 0
    path = _step_dir(Path(root), step) / f"rank{rank}.pt"
    if not path.is_file():
        raise FileNotFoundError(
            f"rank {rank}: no checkpoint file {path}; was the job restarted with another "
            "number of processes?"
        )
    return torch.load(path, weights_only=False)
