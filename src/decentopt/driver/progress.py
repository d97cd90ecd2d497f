"""Progress as lines: where a bar cannot be drawn (rank 0 of a distributed run, its output
a log file), one line every ``every`` steps with the pace and the time left::

    edm: step 200/1000  41.3 steps/s  about 19 s left
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch.distributed as dist

__all__ = ["LINES_PER_RUN", "ProgressLines", "in_a_job", "progress_line"]

#: Lines a run prints when no interval is given.
LINES_PER_RUN = 20


def in_a_job() -> bool:
    """Whether this process is one of several of a torch.distributed job."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def progress_line(step: int, total: int | None, rate: float) -> str:
    """``step 200/1000  41.3 steps/s  about 19 s left`` (no total: no time left)."""
    line = f"step {step}" + (f"/{total}" if total else "") + f"  {rate:.3g} steps/s"
    if total and rate > 0:
        line += f"  about {_duration((total - step) / rate)} left"
    return line


class ProgressLines:
    """A bar's ``update``/``close`` as one line every ``every`` steps (and at the last);
    ``every=None``: :data:`LINES_PER_RUN` lines over the run. The pace is that of the
    steps since the previous line."""

    def __init__(
        self,
        total: int | None,
        initial: int,
        say: Callable[[str], None],
        desc: str = "",
        every: int | None = None,
    ) -> None:
        self.total = total
        self.step = initial
        self.say = say
        self.desc = desc
        self.every = max(1, every or (total or 0) // LINES_PER_RUN)
        self.mark = (initial, time.perf_counter())

    def update(self, n: int) -> None:
        before = self.step
        self.step += n
        if self.step // self.every == before // self.every and self.step != self.total:
            return
        now = time.perf_counter()
        rate = (self.step - self.mark[0]) / max(now - self.mark[1], 1e-9)
        self.mark = (self.step, now)
        prefix = f"{self.desc}: " if self.desc else ""
        self.say(prefix + progress_line(self.step, self.total, rate))

    def close(self) -> None:
        pass
