"""The one result type of every run: simulations, trainings and the units of a sweep."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decentopt.communicator import CommStats

__all__ = ["Record", "Result"]


@dataclass
class Record:
    """Metrics at one step, one value per column, with the time and gossip rounds so far."""

    step: int
    metrics: dict[str, np.ndarray]
    lr: float
    grad_seconds: float
    other_seconds: float
    rounds: int = 0
    bytes_per_agent: float = 0.0
    busiest_messages: int = 0
    busiest_bytes: int = 0
    #: seconds since the run started (this process), evaluations and checkpoints included
    wall_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers and lists (for checkpoints that load without unpickling code)."""
        metrics = {k: np.asarray(v, dtype=np.float64).tolist() for k, v in self.metrics.items()}
        return vars(self) | {"metrics": metrics}

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> Record:
        metrics = {k: np.asarray(v, dtype=np.float64) for k, v in saved["metrics"].items()}
        return cls(**(saved | {"metrics": metrics}))


@dataclass
class Result:
    """What a run returns: recorded metrics per column, divergences, state and costs.

    Attributes:
        algorithm: the algorithm's name (a sweep's variant label).
        records: one :class:`Record` per recorded step.
        diverged_at: ``(columns,)`` step at which each column was stopped, -1 if none.
        final_state: the algorithm state after the last step.
        comm: communication totals (rounds, bytes) of the run.
        wall_time: seconds spent in the loop.
        resumed_from: the step a resumed run started from (0: from the start).
        labels: what each column is (``{"run": r}``, a heterogeneity level, ...).
        period: steps per epoch, if the run has epochs.
        clock: simulated seconds at each step under a time model
            (:mod:`decentopt.driver.timeline`), ``sim_time`` in the rows.

    ``steps`` and ``history`` (metric -> ``(len(steps), columns)``, NaN after
    divergence) are the records as arrays; ``rows`` is the tidy table.
    """

    algorithm: str
    records: list[Record]
    diverged_at: np.ndarray
    final_state: Any
    comm: CommStats
    wall_time: float
    resumed_from: int = 0
    labels: list[dict[str, Any]] = field(default_factory=list)
    period: int | None = None
    #: how the steps ran: "step", "block" or "native" (:mod:`decentopt.driver.block`)
    path: str = "step"
    #: ``(steps + 1,)`` simulated seconds at each step, under a time model (``sim_time``)
    clock: np.ndarray | None = None

    @property
    def columns(self) -> int:
        return len(self.diverged_at)

    @property
    def diverged(self) -> np.ndarray:
        """``(columns,)`` whether each column was stopped."""
        return self.diverged_at >= 0

    @property
    def steps(self) -> np.ndarray:
        """The recorded step indices (0 is the initial point)."""
        return np.array([r.step for r in self.records], dtype=np.int64)

    @property
    def history(self) -> dict[str, np.ndarray]:
        """Metric name -> array ``(len(steps), columns)``."""
        if not self.records:
            return {}
        return {k: np.stack([r.metrics[k] for r in self.records]) for k in self.records[0].metrics}

    def final(self, metric: str) -> np.ndarray:
        """The metric at the last recorded step, per column ``(columns,)``."""
        return self.records[-1].metrics[metric]

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Tidy rows: one per recorded step and column, the column's label first.

        Communication columns are per column (a stacked problem mixes all its
        columns in one message): ``rounds``, ``bytes_per_agent`` (sent, mean over
        agents), ``busiest_messages`` and ``busiest_bytes`` (summed over rounds,
        the busiest agent of each; what a network model turns into time).
        """
        labels = self.labels or [{"run": c} for c in range(self.columns)]
        columns = len(labels)
        rows = []
        for col, label in enumerate(labels):
            for rec in self.records:
                row = {**label, "algorithm": self.algorithm, "step": rec.step}
                if self.period:
                    row["epoch"] = rec.step // self.period
                row |= {k: float(v[col]) for k, v in rec.metrics.items()}
                row |= {
                    "rounds": rec.rounds,
                    "bytes_per_agent": rec.bytes_per_agent / columns,
                    "busiest_messages": rec.busiest_messages,
                    "busiest_bytes": rec.busiest_bytes / columns,
                    "lr": rec.lr,
                    "grad_seconds": rec.grad_seconds,
                    "other_seconds": rec.other_seconds,
                    "wall_seconds": rec.wall_seconds,
                    "diverged_at": int(self.diverged_at[col]),
                }
                if self.clock is not None:
                    row["sim_time"] = float(self.clock[rec.step])
                rows.append(row)
        return rows
