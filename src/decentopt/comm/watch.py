"""What a run should hear early: a method that never gossips is purely local training
(say so once); bounded staleness in one process without a time model is the plain delay
(say so at the start).

A rule whose step never mixes through the communicator it is given (a plugin that
forgot to, a gossip that skips every round of a short run) would otherwise run as
``n`` agents each training alone, with no word but ``rounds = 0`` in the results.
The simulator's loop and :class:`~decentopt.distributed.DecentralizedOptimizer`
look at the communicator's round count after the first :data:`FIRST_STEPS` steps.
"""

from __future__ import annotations

import warnings
from typing import Any

from decentopt.algorithms.gossips.delayed import Delayed, MixesAged, SendsAhead
from decentopt.algorithms.method import as_method

__all__ = ["FIRST_STEPS", "GossipWatch", "staleness", "staleness_note"]

#: Steps after which a method that made no gossip round is warned about.
FIRST_STEPS = 10


class GossipWatch:
    """Warns once (a :class:`RuntimeWarning`) when ``comm`` counted no round in a method's
    first :data:`FIRST_STEPS` steps (from when the watch was made: a resumed run's own), or
    before its outer optimizer's first average where that comes later (DiLoCo's)."""

    def __init__(self, comm: Any, method: Any) -> None:
        method = as_method(method)
        self.comm = comm
        self.method = method.name
        self.first = FIRST_STEPS if method.outer is None else max(FIRST_STEPS, method.outer.every)
        self.start = int(comm.stats.rounds)
        self.done = False

    def after(self, steps: int) -> None:
        """Call after each step (or block of steps) with the steps made since the start."""
        if self.done or steps < self.first:
            return
        self.done = True
        if int(self.comm.stats.rounds) == self.start:
            warnings.warn(
                f"{self.method} made no gossip round in its first {steps} steps: every agent "
                "is training alone on its own data; check the method's gossip, and that its "
                "step mixes through the communicator it is given",
                RuntimeWarning,
                stacklevel=3,
            )


def staleness(algorithm: Any) -> tuple[int, int] | None:
    """``(tau, S)`` of a method whose gossip is ``delayed(tau, staleness=S)``, else None."""
    gossip = as_method(algorithm).gossip
    if isinstance(gossip, Delayed) and gossip.staleness is not None:
        return gossip.tau, gossip.staleness
    return None


def staleness_note(algorithm: Any, comm: Any) -> str | None:
    """The line a run of ``delayed(tau, staleness=S)`` in the simulator without a time model
    (a communicator that neither sends ahead nor knows the ages) should print: what it
    assumes instead of arrival times."""
    stale = staleness(algorithm)
    if stale is None or not stale[1] or isinstance(comm, SendsAhead | MixesAged):
        return None
    tau, bound = stale
    return (
        f"{algorithm.name}: without a [timing] model the simulator runs every agent at one "
        f"pace, so each neighbour's message is exactly tau = {tau} rounds old (the "
        f"iterates of delayed({tau})); give one (simulate(timing=...) or a [timing] "
        f"table) to simulate the ages up to staleness = {bound} that processes at "
        "their own pace use"
    )
