"""Training agents of a neural network: the entry point over the one loop.

:func:`train` runs one algorithm for some epochs (an epoch: the steps in which an
average agent sees its data once) through :func:`decentopt.driver.run_loop` and
returns its :class:`~decentopt.driver.Result`, whose ``rows`` hold one tidy row per
evaluation: ``train_loss`` (the paper's ``sum_i f_i(x_i)``,
from each agent's mini-batch losses over the epoch), test loss and accuracy of
the averaged model and (mean over agents) of each agent's own, ``consensus``,
``lr`` and the seconds spent in gradients and in the rest. Checkpoints after
every epoch make a rerun resume exactly (``docs/training.md``), with all agents
in one process or one agent per process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from decentopt._checks import same_agents
from decentopt.algorithms.base import Algorithm
from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.communicator import Communicator
from decentopt.driver import Result, RunOptions, run_loop
from decentopt.plan import Plan
from decentopt.problems.neural import NeuralProblem
from decentopt.schedules import epoch_schedule
from decentopt.topology import Graph, Network, TopologySchedule

__all__ = ["epoch_schedule", "train"]


def train(
    algorithm: Algorithm[Any],
    problem: NeuralProblem,
    network: Network | Communicator,
    *,
    epochs: int,
    eval_every: int = 1,
    checkpoint_dir: str | Path | None = None,
    labels: dict[str, Any] | None = None,
    progress: bool = True,
    stop_after_epoch: int | None = None,
    seed: int = 0,
    threads: int | None = None,
    log: Callable[[str], None] = print,
) -> Result:
    """Train; the result's ``rows`` hold one row per evaluation (see the module docstring).

    ``network``: a topology (all of ``problem``'s agents are simulated in this
    process), or a communicator; with a :class:`~decentopt.comm.DistributedCommunicator`
    the problem holds this rank's agent only and every metric is averaged across
    ranks through ``comm.mean``. ``seed`` drives the augmentation; dropout draws from
    torch's global generator. ``threads``: intra-op threads while it trains (by default
    one for small models; see :func:`decentopt.driver.run_loop`). ``stop_after_epoch``
    ends the call early (as an interruption would), for tests.
    """
    if isinstance(network, Graph | TopologySchedule):
        same_agents(network, problem)
        network = SimulatedCommunicator(network)
    if epochs < 1 or eval_every < 1:
        raise ValueError("epochs and eval_every must be >= 1")
    spe = problem.sampler.steps_per_epoch
    evals = {e for e in range(1, epochs + 1) if e % eval_every == 0} | {epochs}
    return run_loop(
        algorithm,
        problem,
        network,
        Plan(epochs * spe, tuple(sorted(e * spe for e in evals)), spe),
        RunOptions(
            seed=seed,
            threads=threads,
            progress=progress,
            log=log,
            stop_after=None if stop_after_epoch is None else stop_after_epoch * spe,
            checkpoint_dir=checkpoint_dir,
        ),
        labels=[dict(labels or {})],
    )
