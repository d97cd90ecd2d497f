"""Training loop for agents of a neural network, with exact checkpoint/resume.

One call trains one algorithm for a number of epochs on a
:class:`~decentopt.problems.neural.NeuralProblem`, evaluating every
``eval_every`` epochs the averaged model and each agent's own model. An epoch
is the number of steps in which an average agent sees its data once.

Recorded per evaluation (tidy rows):

* ``train_loss``: the paper's training loss ``sum_i f_i(x_i)``, estimated by the
  mean of each agent's mini-batch losses over the epoch, summed over agents;
* ``test_loss``/``test_acc`` of the averaged model, and the mean over agents of
  ``agent_test_loss``/``agent_test_acc`` of their own models;
* ``consensus``: ``(1/n) sum_i ||x_i - xbar||^2``.

Checkpoints (``step-EPOCH/rankR.pt`` in the run folder, written atomically
after each epoch and marked complete once every rank has written its part)
hold the algorithm state, the sampler and random-number states and the rows
so far; a rerun resumes from the last complete epoch and produces exactly the
rows of an uninterrupted run. The same loop runs all agents in one process or
one agent per process (``comm``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from decentopt.algorithms.base import Algorithm
from decentopt.comm.base import Communicator
from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.dist.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from decentopt.problems.neural import NeuralProblem
from decentopt.schedules import MultiStep
from decentopt.topology.topology import Topology

__all__ = ["epoch_schedule", "train"]


def epoch_schedule(
    lr: float,
    steps_per_epoch: int,
    *,
    milestones: tuple[int, ...] = (),
    gamma: float = 0.1,
    warmup_epochs: int = 0,
) -> MultiStep:
    """A step-indexed :class:`MultiStep` from epoch milestones and warm-up epochs."""
    return MultiStep(
        lr,
        milestones=tuple(m * steps_per_epoch for m in milestones),
        gamma=gamma,
        warmup=warmup_epochs * steps_per_epoch,
    )


def train(
    algorithm: Algorithm[Any],
    problem: NeuralProblem,
    topology: Topology,
    *,
    epochs: int,
    eval_every: int = 1,
    checkpoint_dir: str | Path | None = None,
    labels: dict[str, Any] | None = None,
    progress: bool = True,
    stop_after_epoch: int | None = None,
    comm: Communicator | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Train and return one row per evaluation (see the module docstring).

    ``comm`` defaults to a simulated communicator over all of ``problem``'s
    agents; with a :class:`~decentopt.comm.DistributedCommunicator` the problem
    holds this rank's agent only and every metric is averaged across ranks
    through ``comm.mean``. ``stop_after_epoch`` ends the call early (as an
    interruption would), for tests.
    """
    if comm is None:
        if topology.n != problem.n:
            raise ValueError(
                f"the topology has n = {topology.n} agents but the problem has n = {problem.n}"
            )
        comm = SimulatedCommunicator(topology)
    if epochs < 1 or eval_every < 1:
        raise ValueError("epochs and eval_every must be >= 1")
    n_total = topology.n
    steps = problem.sampler.steps_per_epoch
    labels = dict(labels or {})

    def across_agents(values: torch.Tensor) -> float:
        """Mean over all agents of per-local-agent values (exact, collective)."""
        return float(comm.mean(values.reshape(-1, 1).to(problem.device).float()).reshape(-1)[0])

    state = algorithm.init(problem.initial_point())
    rows: list[dict[str, Any]] = []
    start_epoch = 0
    last = latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
    if last is not None:
        saved = load_checkpoint(checkpoint_dir, last)  # type: ignore[arg-type]
        state = type(state)(**saved["state"])
        problem.sampler.load_state_dict(saved["sampler"])
        problem.generator.set_state(saved["generator"])
        torch.set_rng_state(saved["torch_rng"])
        rows, start_epoch = saved["rows"], saved["epoch"]
        log(f"resuming {algorithm.name} from epoch {start_epoch}")

    from tqdm.auto import tqdm

    bar = tqdm(
        total=epochs * steps,
        initial=start_epoch * steps,
        desc=algorithm.name,
        disable=None if progress else True,
        leave=False,
    )
    grad_time = other_time = 0.0

    def sync() -> None:  # timings on a GPU need the queued kernels finished
        if problem.device.type == "cuda":
            torch.cuda.synchronize()

    for epoch in range(start_epoch, epochs):
        losses = torch.zeros(problem.n, device=problem.device)
        for _ in range(steps):
            t0 = time.perf_counter()
            grads, batch_losses = problem.gradient_and_loss(state.x)
            sync()
            t1 = time.perf_counter()
            state = algorithm.step(state, grads, comm)
            losses += batch_losses
            sync()
            grad_time += t1 - t0
            other_time += time.perf_counter() - t1
            bar.update(1)
        finite = bool(torch.isfinite(state.x).all())
        if across_agents(torch.tensor([0.0 if finite else 1.0])) > 0:  # every rank agrees
            log(f"{algorithm.name} diverged in epoch {epoch + 1}; stopping this run")
            rows.append({**labels, "algorithm": algorithm.name, "epoch": epoch + 1, "diverged": 1})
            break
        if (epoch + 1) % eval_every == 0 or epoch + 1 == epochs:
            x = state.x
            average = comm.mean(x)
            test_loss, test_acc = problem.evaluate(problem.load_average(average))
            agent_loss, agent_acc = problem.evaluate_agents(x)
            lr = algorithm.lr_at(state.t - 1)
            rows.append(
                {
                    **labels,
                    "algorithm": algorithm.name,
                    "epoch": epoch + 1,
                    "step": state.t,
                    "lr": float(lr),
                    "train_loss": n_total * across_agents(losses / steps),
                    "test_loss": test_loss,
                    "test_acc": test_acc,
                    "agent_test_loss": across_agents(torch.from_numpy(agent_loss)),
                    "agent_test_acc": across_agents(torch.from_numpy(agent_acc)),
                    "consensus": across_agents((x - average).pow(2).sum(1)),
                    "grad_seconds": grad_time,
                    "other_seconds": other_time,
                    "diverged": 0,
                }
            )
            bar.set_postfix_str(f"test acc {test_acc:.3f}")
        if checkpoint_dir is not None:
            save_checkpoint(
                checkpoint_dir,
                epoch + 1,
                {
                    "state": dict(state._asdict()),
                    "sampler": problem.sampler.state_dict(),
                    "generator": problem.generator.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    "rows": rows,
                    "epoch": epoch + 1,
                },
                keep=1,
            )
        if stop_after_epoch is not None and epoch + 1 >= stop_after_epoch:
            break
    bar.close()
    return rows
