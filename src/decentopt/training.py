"""Training loop for simulated agents of a neural network, with exact checkpoint/resume.

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

Checkpoints (``checkpoint.pt`` in the run folder, written atomically after
each epoch) hold the algorithm state, the sampler and random-number states and
the rows so far; a rerun resumes from the last complete epoch and produces
exactly the rows of an uninterrupted run.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from decentopt.algorithms.base import Algorithm
from decentopt.comm.simulated import SimulatedCommunicator
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


def _save_atomic(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ckpt.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Train and return one row per evaluation (see the module docstring).

    ``stop_after_epoch`` ends the call early (as an interruption would), for tests.
    """
    if topology.n != problem.n:
        raise ValueError(
            f"the topology has n = {topology.n} agents but the problem has n = {problem.n}"
        )
    if epochs < 1 or eval_every < 1:
        raise ValueError("epochs and eval_every must be >= 1")
    comm = SimulatedCommunicator(topology)
    steps = problem.sampler.steps_per_epoch
    labels = dict(labels or {})
    ckpt = Path(checkpoint_dir) / "checkpoint.pt" if checkpoint_dir else None

    state = algorithm.init(problem.initial_point())
    rows: list[dict[str, Any]] = []
    start_epoch = 0
    if ckpt is not None and ckpt.is_file():
        saved = torch.load(ckpt, weights_only=False)
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
        if not bool(torch.isfinite(state.x).all()):
            log(f"{algorithm.name} diverged in epoch {epoch + 1}; stopping this run")
            rows.append({**labels, "algorithm": algorithm.name, "epoch": epoch + 1, "diverged": 1})
            break
        if (epoch + 1) % eval_every == 0 or epoch + 1 == epochs:
            x = state.x
            test_loss, test_acc = problem.evaluate(problem.load_average(x))
            agent_loss, agent_acc = problem.evaluate_agents(x)
            lr = algorithm.lr(state.t - 1) if callable(algorithm.lr) else algorithm.lr
            rows.append(
                {
                    **labels,
                    "algorithm": algorithm.name,
                    "epoch": epoch + 1,
                    "step": state.t,
                    "lr": float(lr),
                    "train_loss": float((losses / steps).sum()),
                    "test_loss": test_loss,
                    "test_acc": test_acc,
                    "agent_test_loss": float(agent_loss.mean()),
                    "agent_test_acc": float(agent_acc.mean()),
                    "consensus": float((x - x.mean(0)).pow(2).sum(1).mean()),
                    "grad_seconds": grad_time,
                    "other_seconds": other_time,
                    "diverged": 0,
                }
            )
            bar.set_postfix_str(f"test acc {test_acc:.3f}")
        if ckpt is not None:
            _save_atomic(
                {
                    "state": {k: v for k, v in state._asdict().items()},
                    "sampler": problem.sampler.state_dict(),
                    "generator": problem.generator.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    "rows": rows,
                    "epoch": epoch + 1,
                },
                ckpt,
            )
        if stop_after_epoch is not None and epoch + 1 >= stop_after_epoch:
            break
    bar.close()
    return rows
