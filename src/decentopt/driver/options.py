"""How a run is carried out, as one object built where a run starts and passed down whole.

:func:`~decentopt.simulate`, :func:`~decentopt.training.train`,
:func:`~decentopt.experiments.run_spec` and the command line each turn their keyword
arguments or flags into one :class:`RunOptions`; a layer that changes a field for its
part (a unit's seed or checkpoint folder) hands down a copy (:meth:`RunOptions.but`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from decentopt.driver.result import Record, Result

__all__ = ["RecordSink", "RunOptions"]


class RecordSink(Protocol):
    """Told of a run as it goes (loggers: :mod:`decentopt.integrations.loggers`); a sweep
    hands each of its units the sink ``unit(spec, variant, run, folder)`` returns.
    ``targets``: the ``NAME:TARGET`` strings that make it again in a process of its own
    (units computed by a SLURM job or a dask worker are logged from there; empty: they
    are not logged)."""

    targets: tuple[str, ...]

    def unit(self, spec: Any, variant: Any, run: int | None, folder: Path) -> RecordSink | None: ...

    def start(self, resumed_from: int, labels: list[dict[str, Any]]) -> None: ...

    def record(self, record: Record) -> None: ...

    def finish(self, result: Result) -> None: ...


@dataclass(frozen=True)
class RunOptions:
    """Everything about a run that is not the method, the problem or the network."""

    seed: int = 0  # of the generator handed to the gradient (the noise)
    threads: int | None = None  # intra-op threads; None: one for small states (THREADS_CROSSOVER)
    progress: bool | Callable[[int], None] = False  # a bar, or a callable given each step
    log: Callable[[str], None] = print  # where messages go, one line each
    blowup: float = 1e10  # see DivergenceGuard
    stop_after: int | None = None  # end after this many steps, as an interruption would
    checkpoint_dir: str | Path | None = None  # write checkpoints there, resume from them
    checkpoint_every: int | None = None  # steps between checkpoints (default: each epoch)
    checkpoint_minutes: float | None = None  # also one when this many minutes have passed
    path: str = "auto"  # steps one by one or in blocks: see decentopt.driver.block
    jobs: int = 1  # worker processes for the units of a convex sweep or of CPU training
    force: bool = False  # compute finished units again instead of resuming them
    monitor: RecordSink | None = None  # told of the run's start, each record and its end
    log_every: int | None = None  # steps between progress lines (distributed runs' rank 0)

    def but(self, **changes: Any) -> RunOptions:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)
