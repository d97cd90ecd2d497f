"""A training loop's scalars under torch.distributed, logged on rank 0, with a progress line.

Every ``log_every`` steps (and at the last) each rank's own scalars travel to rank 0 in one
small collective (a ``gather`` of one float64 vector per rank), and rank 0 logs the agents'
mean as ``mean/NAME`` and each rank's value as ``rank{r}/NAME``, then prints one line::

    step 200/1000  41.3 steps/s  about 19 s left

(steps per second over the last ``log_every`` steps; the time left at that pace)::

    monitor = Monitor(["tensorboard:runs/tb"], log_every=50, total=steps, name="edm")
    for xb, yb in loader:
        ...; opt.step()
        monitor.step(loss=loss)          # every rank, the same names each step
    monitor.close()

Without torch.distributed (or with one process) the same runs with one agent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from decentopt.driver.progress import ProgressLines, progress_line
from decentopt.integrations.loggers import Loggers, make

__all__ = ["Monitor", "progress_line"]


class Monitor:
    """Scalars of every rank, logged on rank 0 every ``log_every`` steps (module docstring).

    Args:
        loggers: ``NAME:TARGET`` strings or a :class:`~decentopt.integrations.loggers.Loggers`
            (none: only the progress line).
        log_every: steps between logs and progress lines.
        total: the steps the run will take (for the time left).
        name, group, params: the run as loggers name it, and its hyper-parameters.
        start: the step the run resumes from (0: a new run); a resumed run continues.
        say: where the progress line goes (``print``; ``None``: nowhere).
    """

    def __init__(
        self,
        loggers: Sequence[str] | Loggers = (),
        *,
        log_every: int = 50,
        total: int | None = None,
        name: str = "train",
        group: str = "",
        params: dict[str, Any] | None = None,
        start: int = 0,
        say: Callable[[str], None] | None = print,
    ) -> None:
        if int(log_every) < 1:
            raise ValueError(f"log_every must be a positive number of steps; got {log_every}")
        self.log_every = int(log_every)
        self.total = total
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world = dist.get_world_size() if self.distributed else 1
        hub = loggers if isinstance(loggers, Loggers) else make(list(loggers))
        self.loggers = hub.bind(name, group, params) if self.rank == 0 else None
        self.t = self.start = int(start)
        self.opened = False
        self.lines = None if say is None else ProgressLines(total, self.t, say, every=log_every)

    def step(self, **scalars: float | torch.Tensor) -> None:
        """One step done, with this rank's ``scalars`` (the same names on every rank)."""
        self.t += 1
        if self.t % self.log_every and self.t != self.total:
            return
        names = sorted(scalars)
        device = "cuda" if self.distributed and dist.get_backend() == "nccl" else "cpu"
        values = [float(torch.as_tensor(scalars[k]).detach()) for k in names]
        mine = torch.tensor(values, dtype=torch.float64, device=device)
        every = self._gather(mine)  # (world, len(names)) on rank 0
        if every is None or self.loggers is None:
            return
        logged = {f"mean/{k}": float(v) for k, v in zip(names, every.mean(0), strict=True)}
        for r in range(self.world):
            logged |= {f"rank{r}/{k}": float(v) for k, v in zip(names, every[r], strict=True)}
        if not self.opened:
            self.loggers.start(self.start, [])
            self.opened = True
        self.loggers.scalars(self.t, logged)
        if self.lines is not None:
            self.lines.update(self.t - self.lines.step)

    def _gather(self, mine: torch.Tensor) -> torch.Tensor | None:
        """Every rank's vector on rank 0, in one collective (None elsewhere)."""
        if self.world == 1:
            return mine[None].cpu()
        parts = [torch.empty_like(mine) for _ in range(self.world)] if self.rank == 0 else None
        dist.gather(mine, parts, dst=0)
        return None if parts is None else torch.stack(parts).cpu()

    def close(self) -> None:
        """Finish the run (rank 0)."""
        if self.loggers is not None and self.opened:
            for logger in self.loggers.loggers:
                logger.finish()
            self.opened = False
