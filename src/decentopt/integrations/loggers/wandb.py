"""Weights & Biases: one W&B run per run, in ``project`` (``wandb:PROJECT``).

The run's id is a digest of the project, the group and the name, so a resumed run
(``resumed_from > 0``) continues the same W&B run (``resume="allow"``) rather than
starting a second; runs of a sweep share its name as their W&B group. Steps are logged
as the value ``step`` (every metric's x axis, ``define_metric``), so a step logged again
after an interruption replaces nothing and breaks no ordering. Where the runs go is W&B's
own setting: ``WANDB_MODE=offline`` writes them under ``WANDB_DIR`` (or the working
folder) with no network call, for ``wandb sync`` later. Needs ``pip install decentopt[wandb]``.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from decentopt.integrations.loggers.base import Logger, RunInfo, needs

__all__ = ["WandbLogger", "run_id"]


def run_id(project: str, run: RunInfo) -> str:
    """The W&B id of ``run`` in ``project``: the same for every restart of the run."""
    return hashlib.sha256(f"{project}\0{run.key}".encode()).hexdigest()[:16]


class WandbLogger(Logger):
    """Runs as W&B runs of ``project``."""

    def __init__(self, project: str) -> None:
        self.wandb = needs("wandb", "wandb", "the wandb logger")
        self.project = project or "decentopt"
        self.run: Any = None

    def start(self, run: RunInfo) -> None:
        # wandb.init replaces sys.exit and sys.excepthook (to record the exit code) and
        # leaves them replaced after finish(): put the process's own back then
        self._exit = sys.exit
        self._excepthook = sys.excepthook
        self.run = self.wandb.init(
            project=self.project,
            id=run_id(self.project, run),
            name=run.key,
            group=run.group or None,
            config=run.params,
            resume="allow",
            reinit="create_new",
            # W&B's own settings, read at each start (the library keeps its first otherwise)
            dir=os.environ.get("WANDB_DIR"),
            mode=os.environ.get("WANDB_MODE"),
        )
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self.run.log({"step": int(step), **values})

    def figure(self, name: str, path: Path) -> None:
        self.run.log({name: self.wandb.Image(str(path))})

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
            sys.exit = self._exit
            sys.excepthook = self._excepthook
