"""The recorder: metrics on a grid of steps, and each epoch's mean mini-batch loss."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from decentopt.communicator import CommStats, Communicator
from decentopt.driver.result import Record

__all__ = ["Recorder"]


def column_values(value: Any) -> np.ndarray:
    """A metric as float64 numbers, one per column (Python floats keep their precision)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().to(torch.float64).cpu().numpy()
    return np.array(value, dtype=np.float64).reshape(-1)


def counts(stats: CommStats) -> tuple[int, float, int, int]:
    return stats.rounds, stats.bytes_per_agent, stats.busiest_messages, stats.busiest_bytes


@dataclass
class Recorder:
    """Keeps the records of a run and the running sum of the current epoch's losses.

    ``train_loss`` (with ``period``) is the paper's ``sum_i f_i(x_i)``: the number
    of agents times the mean over agents of each agent's mean mini-batch loss over
    the epoch so far.
    """

    metrics: Callable[[torch.Tensor], dict[str, Any]]
    comm: Communicator
    period: int | None
    lr_at: Callable[[int], float]
    sink: Callable[[Record], None] | None = None  # given each record as it is written
    records: list[Record] = field(default_factory=list, init=False)
    losses: torch.Tensor | None = field(default=None, init=False)  # over the current epoch
    #: when the run started (a resumed run's is moved back by its recorded wall seconds)
    started: float = field(default_factory=time.perf_counter, init=False)

    def add_loss(self, t: int, loss: torch.Tensor | None) -> None:
        """Add the losses of step ``t``; the first step of an epoch starts a new sum."""
        if loss is not None:
            loss = loss.detach()
            fresh = self.losses is None or (self.period and t % self.period == 0)
            self.losses = loss.clone() if fresh else self.losses.add_(loss)

    def note(self, t: int, x: torch.Tensor, timing: list[float], stopped: np.ndarray) -> None:
        """Record the metrics of ``x`` at step ``t`` (the ``stopped`` columns NaN)."""
        values = {k: column_values(v) for k, v in self.metrics(x).items()}
        if self.losses is not None and self.period:
            done = t - (t - 1) // self.period * self.period  # steps into the current epoch
            rows = self.losses.shape[0]  # agents here; one loss per column (run) each
            mean = self.comm.mean((self.losses / done).reshape(rows, -1).float())
            agents = self.comm.topology.n  # in total; a rank holds fewer
            values["train_loss"] = agents * mean.reshape(-1).double().cpu().numpy()
        for v in values.values():
            v[stopped] = np.nan
        lr = float(self.lr_at(max(t - 1, 0)))
        wall = time.perf_counter() - self.started
        self.records.append(Record(t, values, lr, *timing, *counts(self.comm.stats), wall))
        if self.sink is not None:
            self.sink(self.records[-1])

    def pad(self, steps: list[int], timing: list[float]) -> None:
        """NaN records for the steps a run stopped before (every column diverged)."""
        if not self.records:
            return
        for s in steps:
            if s > self.records[-1].step:
                nan = {k: np.full_like(v, np.nan) for k, v in self.records[-1].metrics.items()}
                lr = float(self.lr_at(s - 1))
                self.records.append(Record(s, nan, lr, *timing, *counts(self.comm.stats)))
