"""How a run is carried out, as one object: built once where a run starts, passed down whole.

:func:`~decentopt.simulate`, :func:`~decentopt.training.train`,
:func:`~decentopt.experiments.run_spec` and the command line each turn their
keyword arguments or flags into one :class:`RunOptions`; every layer below reads
what it needs from it, and a layer that changes something for its part (a unit's
seed, its checkpoint folder) hands down a copy made with :meth:`RunOptions.but`.
None of it changes what a run computes except ``seed`` and ``blowup``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """Everything about a run that is not the method, the problem or the network.

    Attributes:
        seed: seed of the generator handed to the gradient (the noise).
        threads: intra-op threads inside the loop (restored after); ``None``: one for
            small states, torch's setting from :data:`~decentopt.driver.THREADS_CROSSOVER`.
        progress: ``True`` for a progress bar, or a callable receiving each step.
        log: where messages go (one line each).
        blowup: see :class:`~decentopt.driver.guard.DivergenceGuard`.
        stop_after: end after this many steps, as an interruption would (tests).
        checkpoint_dir: write checkpoints there and resume from them.
        checkpoint_every: steps between checkpoints (default: each epoch).
        checkpoint_minutes: also write one when this many minutes have passed.
        jobs: worker processes for the units of a convex sweep.
        force: compute finished units again instead of resuming them.
    """

    seed: int = 0
    threads: int | None = None
    progress: bool | Callable[[int], None] = False
    log: Callable[[str], None] = print
    blowup: float = 1e10
    stop_after: int | None = None
    checkpoint_dir: str | Path | None = None
    checkpoint_every: int | None = None
    checkpoint_minutes: float | None = None
    jobs: int = 1
    force: bool = False

    def but(self, **changes: Any) -> RunOptions:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)
