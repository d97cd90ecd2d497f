"""Training agents of a neural network: the entry point over the one loop.

:func:`train` runs one algorithm for a number of epochs on a
:class:`~decentopt.problems.neural.NeuralProblem` through
:func:`decentopt.driver.run_loop`, evaluating every ``eval_every`` epochs the
averaged model and each agent's own model. An epoch is the number of steps in
which an average agent sees its data once.

Recorded per evaluation (tidy rows):

* ``train_loss``: the paper's training loss ``sum_i f_i(x_i)``, estimated by the
  mean of each agent's mini-batch losses over the epoch, summed over agents;
* ``test_loss``/``test_acc`` of the averaged model, and the mean over agents of
  ``agent_test_loss``/``agent_test_acc`` of their own models;
* ``consensus``: ``(1/n) sum_i ||x_i - xbar||^2``;
* ``lr``, and the seconds spent so far in gradients and in everything else.

Checkpoints (``step-STEP/rankR.pt`` in ``checkpoint_dir``, written atomically
after each epoch and marked complete once every rank has written its part)
hold the algorithm state, the sampler and random-number states and the records
so far; a rerun resumes from the last complete epoch and produces exactly the
rows of an uninterrupted run. The same loop runs all agents in one process or
one agent per process (a communicator as ``network``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from decentopt.algorithms.base import Algorithm
from decentopt.comm.base import Communicator
from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.driver import run_loop
from decentopt.problems.neural import NeuralProblem
from decentopt.schedules import epoch_schedule
from decentopt.topology.topology import Topology

__all__ = ["epoch_schedule", "train"]


def train(
    algorithm: Algorithm[Any],
    problem: NeuralProblem,
    network: Topology | Communicator,
    *,
    epochs: int,
    eval_every: int = 1,
    checkpoint_dir: str | Path | None = None,
    labels: dict[str, Any] | None = None,
    progress: bool = True,
    stop_after_epoch: int | None = None,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Train and return one row per evaluation (see the module docstring).

    ``network``: a topology (all of ``problem``'s agents are simulated in this
    process), or a communicator; with a :class:`~decentopt.comm.DistributedCommunicator`
    the problem holds this rank's agent only and every metric is averaged across
    ranks through ``comm.mean``. ``seed`` drives the augmentation; dropout draws from
    torch's global generator. ``stop_after_epoch`` ends the call early (as an
    interruption would), for tests.
    """
    if isinstance(network, Topology):
        if network.n != problem.n:
            raise ValueError(
                f"the topology has n = {network.n} agents but the problem has n = {problem.n}"
            )
        network = SimulatedCommunicator(network)
    if epochs < 1 or eval_every < 1:
        raise ValueError("epochs and eval_every must be >= 1")
    spe = problem.sampler.steps_per_epoch
    evals = {e for e in range(1, epochs + 1) if e % eval_every == 0} | {epochs}
    run = run_loop(
        algorithm,
        problem,
        network,
        iterations=epochs * spe,
        record=sorted(e * spe for e in evals),
        seed=seed,
        period=spe,
        checkpoint_dir=checkpoint_dir,
        stop_after=None if stop_after_epoch is None else stop_after_epoch * spe,
        progress=progress,
        log=log,
    )
    return run.rows([dict(labels or {})], algorithm.name, spe)
