"""Vectorised simulation: all agents and repetitions of one algorithm in one process.

Iterates are ``(n, R, d)``; each step draws stochastic gradients for every agent
and repetition, applies the algorithm's pure ``step`` and mixes through a
:class:`~decentopt.comm.SimulatedCommunicator`. Metrics are recorded on a grid
of steps. A repetition whose iterates become non-finite or blow up is stopped
(its columns are zeroed so they cannot overflow), reported as diverged with
its step, and recorded as NaN from then on; the other repetitions go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from decentopt._checks import as_count
from decentopt.algorithms.base import Algorithm, AlgorithmState
from decentopt.comm.base import CommStats
from decentopt.comm.simulated import Kernel, SimulatedCommunicator
from decentopt.problems.base import StackedProblem
from decentopt.topology.topology import Topology

__all__ = ["SimulationResult", "check_gradient", "record_steps", "simulate"]

#: Recorded steps spread evenly over the last 10 % of a log-spaced record.
TAIL_POINTS = 21
#: How often (in steps) divergence is checked between recorded steps.
_CHECK_EVERY = 50


@dataclass
class SimulationResult:
    """Metric trajectories of one simulated run.

    Attributes:
        algorithm: the algorithm's registered name.
        steps: the recorded step indices (0 is the initial point).
        history: metric name -> array ``(len(steps), R)``; NaN after divergence.
        diverged: ``(R,)`` bool, whether each repetition was stopped.
        diverged_at: ``(R,)`` step at which divergence was detected (-1 if none).
        final_state: the algorithm state after the last step.
        comm: communication totals (rounds, bytes) of the run.
        wall_time: seconds spent in the loop.
    """

    algorithm: str
    steps: np.ndarray
    history: dict[str, np.ndarray]
    diverged: np.ndarray
    diverged_at: np.ndarray
    final_state: Any
    comm: CommStats
    wall_time: float
    meta: dict[str, Any] = field(default_factory=dict)

    def final(self, metric: str) -> np.ndarray:
        """The metric at the last recorded step, per repetition ``(R,)``."""
        return self.history[metric][-1]


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
    if record == "all":
        steps = np.arange(iterations + 1)
    elif isinstance(record, int) and not isinstance(record, bool):
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


def _broadcast_x0(x0: torch.Tensor | None, problem: StackedProblem) -> torch.Tensor:
    target = (problem.n, problem.repetitions, problem.dim)
    if x0 is None:
        return problem.initial_point()
    x0 = torch.as_tensor(x0, dtype=problem.dtype)
    if x0.shape == (problem.dim,):
        x0 = x0.expand(target)
    elif x0.shape == (problem.n, problem.dim):
        x0 = x0.unsqueeze(1).expand(target)
    if tuple(x0.shape) != target:
        raise ValueError(
            f"x0 must have shape (d,) = ({problem.dim},), (n, d) or (n, R, d) = {target}; "
            f"got {tuple(x0.shape)}"
        )
    if not bool(torch.isfinite(x0).all()):
        raise ValueError("x0 contains NaN or inf entries; start from a finite point")
    return x0.clone()


def check_gradient(grad: object, x: torch.Tensor, owner: str) -> None:
    """Refuse a gradient whose shape or dtype differs from the iterate's.

    Every algorithm would otherwise broadcast an ``(n, R, 1)`` gradient over an
    ``(n, R, d)`` state and return silently wrong results.
    """
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"{owner}.gradient returned {type(grad).__name__}; it must return a tensor")
    if grad.shape != x.shape or grad.dtype != x.dtype:
        raise ValueError(
            f"{owner}.gradient returned shape {tuple(grad.shape)} and dtype {grad.dtype} for "
            f"iterates of shape {tuple(x.shape)} and dtype {x.dtype}; it must return one "
            "gradient per agent and repetition, of the iterates' shape and dtype"
        )


def _zero_columns(state: AlgorithmState, mask: torch.Tensor) -> AlgorithmState:
    """Zero the repetitions in ``mask`` in every tensor of the state (repetition axis 1)."""
    keep = (~mask).view(1, -1, 1)
    updates = {
        name: torch.where(keep, value, 0.0)
        for name, value in state._asdict().items()  # type: ignore[attr-defined]
        if isinstance(value, torch.Tensor) and value.ndim == 3
    }
    return state._replace(**updates)


def simulate(
    algorithm: Algorithm[Any],
    problem: StackedProblem,
    topology: Topology,
    iterations: int,
    seed: int = 0,
    *,
    x0: torch.Tensor | None = None,
    record: Literal["log", "all"] | int = "log",
    points: int = 100,
    kernel: Kernel = "auto",
    blowup: float = 1e10,
    progress: bool | Callable[[int], None] = False,
) -> SimulationResult:
    """Run one algorithm on all agents and repetitions of a problem.

    Args:
        algorithm: a registered algorithm instance (``algorithms.make``).
        problem: a stacked problem such as :class:`~decentopt.problems.Quadratic`.
        topology: the graph; its ``n`` must equal the problem's.
        iterations: number of steps.
        seed: seed of the gradient noise (the problem's data has its own seed).
        x0: starting point, ``(d,)``, ``(n, d)`` or ``(n, R, d)``; zeros if omitted.
        record: ``"log"`` (about ``points`` log-spaced steps), ``"all"``, or every k.
        kernel: mixing kernel, see :class:`~decentopt.comm.SimulatedCommunicator`.
        blowup: a repetition diverges when ``mean_i ||x_i||^2`` exceeds
            ``blowup * (1 + mean_i ||x_i(0)||^2 + ||x*||^2)`` (``x*`` where known)
            or is not finite.
        progress: ``True`` for a progress bar, or a callable receiving the step.
    """
    if topology.n != problem.n:
        raise ValueError(
            f"the topology has n = {topology.n} agents but the problem has n = {problem.n}; "
            "build both with the same number of agents"
        )
    iterations = as_count(iterations, "simulate: iterations")
    seed = as_count(seed, "simulate: seed")
    if not blowup > 1:
        raise ValueError(f"blowup must be > 1; got {blowup}")
    steps = record_steps(iterations, record, points)
    recorded = set(steps.tolist())
    comm = SimulatedCommunicator(topology, kernel=kernel)
    generator = torch.Generator().manual_seed(int(seed))
    x = _broadcast_x0(x0, problem)
    state = algorithm.init(x)
    R = problem.repetitions

    scale = 1.0 + x.pow(2).sum(-1).mean(0)
    if problem.x_star is not None:
        scale = scale + problem.x_star.pow(2).sum(-1)
    limit = blowup * scale

    history: dict[str, list[np.ndarray]] = {}
    diverged = torch.zeros(R, dtype=torch.bool)
    diverged_at = np.full(R, -1, dtype=np.int64)

    def check(t: int) -> None:
        nonlocal state
        sq = state.x.pow(2).sum(-1).mean(0)
        bad = ~torch.isfinite(sq) | (sq > limit)
        new = bad & ~diverged
        if bool(new.any()):
            diverged_at[new.numpy()] = t
            diverged.logical_or_(new)
        if bool(diverged.any()):
            # stopped repetitions restart from zero each check so they never overflow
            state = _zero_columns(state, diverged)

    def log(t: int) -> None:
        check(t)
        for name, value in problem.metrics(state.x).items():
            row = value.detach().to(torch.float64).cpu().numpy().copy()
            row[diverged.numpy()] = np.nan
            history.setdefault(name, []).append(row)

    bar = None
    if progress is True:
        from tqdm.auto import tqdm

        bar = tqdm(total=iterations, desc=algorithm.name, leave=False, disable=None)
    start = time.perf_counter()
    log(0)
    for t in range(iterations):
        grad = problem.gradient(state.x, generator)
        if t == 0:
            check_gradient(grad, state.x, type(problem).__name__)
        state = algorithm.step(state, grad, comm)
        if t + 1 in recorded:
            log(t + 1)
        elif (t + 1) % _CHECK_EVERY == 0:
            check(t + 1)
        if bar is not None:
            bar.update(1)
        elif callable(progress):
            progress(t + 1)
        if bool(diverged.all()):
            break
    wall = time.perf_counter() - start
    check(iterations)
    if bar is not None:
        bar.close()
    # Steps after an early stop (all repetitions diverged) are NaN.
    n_rec = len(next(iter(history.values())))
    for name in history:
        history[name].extend([np.full(R, np.nan)] * (len(steps) - n_rec))
    return SimulationResult(
        algorithm=algorithm.name,
        steps=steps,
        history={k: np.stack(v) for k, v in history.items()},
        diverged=diverged.numpy().copy(),
        diverged_at=diverged_at,
        final_state=state,
        comm=comm.stats,
        wall_time=wall,
    )
