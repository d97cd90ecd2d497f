"""How long a run is and where it is recorded: :class:`Plan` and :func:`record_steps`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["TAIL_POINTS", "Plan", "record_steps"]

#: Recorded steps spread evenly over the last 10 % of a log-spaced record.
TAIL_POINTS = 21


@dataclass(frozen=True)
class Plan:
    """How long a run is: its steps, the steps it records, and its epoch (if any)."""

    iterations: int
    record: tuple[int, ...]
    #: steps per epoch: losses are averaged and checkpoints written per epoch
    period: int | None = None


def record_steps(
    iterations: int, record: Literal["log", "all"] | int = "log", points: int = 100
) -> np.ndarray:
    """The step indices at which metrics are recorded (always including 0 and the end).

    ``"all"``: every step; an int ``k``: every k-th step; ``"log"``: about
    ``points`` log-spaced steps plus ``TAIL_POINTS`` evenly spaced over the last
    10 % of iterations, where steady-state statistics are taken.
    """
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0; got {iterations}")
    record = 1 if record == "all" else record
    if isinstance(record, int) and not isinstance(record, bool):
        if record < 1:
            raise ValueError(f"record every k steps needs k >= 1; got {record}")
        steps = np.arange(0, iterations + 1, record)
    elif record == "log":
        grid = np.unique(np.round(np.logspace(0, np.log10(max(iterations, 1)), points)).astype(int))
        # a dense final window, so that steady-state statistics rest on many points
        tail = np.round(np.linspace(0.9 * iterations, iterations, TAIL_POINTS)).astype(int)
        steps = np.concatenate([[0], grid[grid <= iterations], tail])
    else:
        raise ValueError(f"record must be 'log', 'all' or a positive int; got {record!r}")
    return np.unique(np.append(steps, iterations))
