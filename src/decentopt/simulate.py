"""Vectorised simulation: all agents and repetitions of one algorithm in one process.

Iterates are ``(n, R, d)``; each step draws stochastic gradients for every agent
and repetition, applies the algorithm's pure ``step`` and mixes through a
:class:`~decentopt.comm.SimulatedCommunicator`. :func:`simulate` is the entry
point for convex problems over the one loop, :func:`decentopt.driver.run_loop`,
which records metrics on a grid of steps and stops a diverging repetition
(reported with its step, NaN from then on) while the others go on.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Literal

import torch

from decentopt._checks import as_count, same_agents
from decentopt.algorithms.base import Algorithm
from decentopt.driver import Result, RunOptions, TimeModel, check_gradient, run_loop, timed
from decentopt.driver.timeline import simulated_communicator
from decentopt.plan import TAIL_POINTS, Plan, record_steps
from decentopt.problems.base import BlockProblem, StackedProblem
from decentopt.topology import Network

__all__ = [
    "TAIL_POINTS",
    "Result",
    "SimulationResult",
    "check_gradient",
    "record_steps",
    "simulate",
]


#: What :func:`simulate` returns: the one result type of every run.
SimulationResult = Result


def _broadcast_x0(x0: torch.Tensor | None, problem: StackedProblem) -> torch.Tensor:
    if x0 is None:
        return problem.initial_point()
    target = tuple(problem.initial_point().shape)
    x0 = torch.as_tensor(x0, dtype=problem.dtype)
    if x0.shape == target[-1:]:
        x0 = x0.expand(target)
    elif x0.shape == (target[0], target[-1]):
        x0 = x0.unsqueeze(1).expand(target)
    if tuple(x0.shape) != target:
        raise ValueError(
            f"x0 must have shape (d,) = ({target[-1]},), (n, d) or (n, R, d) = {target}; "
            f"got {tuple(x0.shape)}"
        )
    if not bool(torch.isfinite(x0).all()):
        raise ValueError("x0 contains NaN or inf entries; start from a finite point")
    return x0.clone()


def _checked(
    topology: Network,
    problem: StackedProblem,
    iterations: int,
    seed: int,
    blowup: float,
    record: Literal["log", "all"] | int,
    points: int,
) -> tuple[Plan, int]:
    """:func:`simulate`'s plan of steps and seed, once its arguments agree; else a
    ValueError naming the fix."""
    same_agents(topology, problem)
    iterations = as_count(iterations, "simulate: iterations")
    seed = as_count(seed, "simulate: seed")
    if not blowup > 1:
        raise ValueError(f"blowup must be > 1; got {blowup}")
    steps = record_steps(iterations, record, points)
    return Plan(iterations, tuple(steps.tolist())), seed


def _stepwise(
    problem: StackedProblem, x: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, None]:
    """The problem's gradient as ``run_loop`` takes it step by step (no loss); a
    :class:`BlockProblem` is given none: it draws its own noise, in blocks where it can."""
    return problem.gradient(x, generator), None


def simulate(
    algorithm: Algorithm[Any],
    problem: StackedProblem,
    topology: Network,
    iterations: int,
    seed: int = 0,
    *,
    x0: torch.Tensor | None = None,
    record: Literal["log", "all"] | int = "log",
    points: int = 100,
    kernel: str = "auto",
    path: str = "auto",
    blowup: float = 1e10,
    threads: int | None = None,
    progress: bool | Callable[[int], None] = False,
    timing: TimeModel | None = None,
) -> Result:
    """Run one algorithm on all agents and repetitions of a problem.

    Args:
        algorithm: a registered algorithm instance (``algorithms.make``).
        problem: a stacked problem such as :class:`~decentopt.problems.Quadratic`, or
            any object with ``gradient(x, generator)``, ``metrics(x)``,
            ``initial_point()`` and ``x_star`` (:class:`~decentopt.problems.StackedProblem`).
        topology: the graph; its ``n`` must equal the problem's.
        iterations: number of steps.
        seed: seed of the gradient noise (the problem's data has its own seed).
        x0: starting point, ``(d,)``, ``(n, d)`` or ``(n, R, d)``; zeros if omitted.
        record: ``"log"`` (about ``points`` log-spaced steps), ``"all"``, or every k.
        kernel: mixing kernel, see :class:`~decentopt.comm.SimulatedCommunicator`.
        path: ``"auto"``, ``"native"``, ``"block"`` or ``"step"``: how many steps run per
            call (:mod:`decentopt.driver.block`); ``Result.path`` says which ran.
        blowup: a repetition diverges when ``mean_i ||x_i||^2`` exceeds
            ``blowup * (1 + mean_i ||x_i(0)||^2 + ||x*||^2)`` (``x*`` where known;
            ``blowup`` capped at ``driver.guard.GROWTH`` = 1e6) or is not finite.
        threads: intra-op threads while it runs (the caller's setting is restored);
            by default one for small states (see :func:`decentopt.driver.run_loop`).
        progress: ``True`` for a progress bar, or a callable receiving the step.
        timing: a :class:`~decentopt.driver.TimeModel`: every row then carries ``sim_time``,
            the simulated seconds at its step (:mod:`decentopt.driver.timeline`). Under
            bounded staleness (``delayed(tau, staleness=S)``) it also sets which message
            each agent mixes: each neighbour's newest arrived by its own clock
            (:mod:`decentopt.driver.arrivals`); without it every message is ``tau`` old.
    """
    plan, seed = _checked(topology, problem, iterations, seed, blowup, record, points)
    comm = simulated_communicator(
        algorithm, topology, timing, plan.iterations, problem.repetitions, kernel
    )
    result = run_loop(
        algorithm,
        problem,
        comm,
        plan,
        RunOptions(seed=seed, threads=threads, progress=progress, blowup=blowup, path=path),
        gradient=None if isinstance(problem, BlockProblem) else partial(_stepwise, problem),
        metrics=problem.metrics,
        x0=_broadcast_x0(x0, problem),
        labels=[{"run": r} for r in range(problem.repetitions)],
    )
    return result if timing is None else timed(result, timing, topology, algorithm)
