"""TensorBoard: one event folder per run, ``FOLDER/GROUP/NAME`` (``tensorboard:FOLDER``).

Scalars are written with their step; the hyper-parameters twice, in the hparams plugin
(TensorBoard's HPARAMS tab) and as a JSON text summary ``params``; figures as images.
A resumed run writes into the same folder with ``purge_step = resumed_from + 1``:
TensorBoard then drops the events of the steps after it that an interrupted writer
left, and each step appears once. Needs ``pip install decentopt[tensorboard]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from decentopt.integrations.loggers.base import Logger, RunInfo, needs, safe_name

__all__ = ["TensorBoardLogger"]


class TensorBoardLogger(Logger):
    """Runs as TensorBoard event folders under ``folder``."""

    def __init__(self, folder: str | Path) -> None:
        needs("tensorboard", "tensorboard", "the tensorboard logger")
        self.folder = Path(folder)
        self.writer: Any = None

    def start(self, run: RunInfo) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        where = self.folder / safe_name(run.group) if run.group else self.folder
        # a fresh start purges every earlier event of the folder; a resume those after it
        purge = run.resumed_from + 1 if run.resumed_from else 0
        self.writer = SummaryWriter(str(where / safe_name(run.name)), purge_step=purge)
        if not run.resumed_from:
            for summary in hparams(run.params, {}):
                self.writer.file_writer.add_summary(summary)
            self.writer.add_text("params", json.dumps(run.params, sort_keys=True), 0)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def figure(self, name: str, path: Path) -> None:
        from matplotlib.image import imread

        image = np.atleast_3d(imread(str(path)))  # (H, W, 1) grey, or (H, W, 3 or 4) colour
        self.writer.add_image(name, image[..., :3], 0, dataformats="HWC")

    def finish(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
