"""The one loop: every simulation and every training run steps through :func:`run_loop`.

It composes what each kind of run needs around ``algorithm.step``: a
:class:`~decentopt.driver.recorder.Recorder` (metrics on a grid of steps, each
epoch's mean mini-batch loss), a :class:`~decentopt.driver.guard.DivergenceGuard`
(a column that blows up is stopped, reported with its step and recorded as NaN
while the others go on), a :class:`~decentopt.driver.checkpointer.Checkpointer`
(exact resumption), timing (gradient vs the rest) and progress. The problem
supplies gradients and metrics (:class:`~decentopt.problems.Problem`), the
communicator the mixing; :func:`~decentopt.simulate` and
:func:`~decentopt.training.train` are thin entry points over it, and all return
one :class:`~decentopt.driver.result.Result`.

Columns: a problem's metrics have one value per *column* (a repetition of a
stacked convex problem; a run of a neural problem).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from decentopt.algorithms.base import Algorithm
from decentopt.algorithms.registry import check_network
from decentopt.comm.base import Communicator
from decentopt.driver.checkpointer import CHECK_EVERY, Checkpointer
from decentopt.driver.guard import DivergenceGuard
from decentopt.driver.recorder import Recorder
from decentopt.driver.result import Record, Result
from decentopt.perf import keep_freed_memory
from decentopt.plan import Plan
from decentopt.topology.advice import mixing_warning

if TYPE_CHECKING:
    from decentopt.problems.base import Problem

__all__ = [
    "LARGE_STATE_BYTES",
    "THREADS_CROSSOVER",
    "check_gradient",
    "intra_op_threads",
    "run_loop",
]

#: State size (entries) from which the loop keeps torch's intra-op threads. Measured on a
#: 2-core machine: below it a second thread gains at most 2x when the machine is idle and
#: costs 5-24x when another process is busy (benchmarks/bench_peers.py).
THREADS_CROSSOVER = 2**20
#: From this many bytes of state, freed blocks stay in the process
#: (:func:`~decentopt.perf.keep_freed_memory`): glibc would otherwise return each
#: step's tensors to the system and page-fault fresh ones in on the next.
LARGE_STATE_BYTES = 8 << 20


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


@contextmanager
def intra_op_threads(threads: int | None, numel: int) -> Iterator[int]:
    """Run a block with ``threads`` intra-op threads (or the policy's choice), then restore."""
    previous = torch.get_num_threads()
    chosen = threads or (1 if numel < THREADS_CROSSOVER else previous)
    torch.set_num_threads(chosen)
    try:
        yield chosen
    finally:
        torch.set_num_threads(previous)


def run_loop(
    algorithm: Algorithm[Any],
    problem: Problem,
    comm: Communicator,
    plan: Plan,
    *,
    gradient: Callable[[torch.Tensor, torch.Generator], tuple[torch.Tensor, Any]] | None = None,
    metrics: Callable[[torch.Tensor], dict[str, Any]] | None = None,
    seed: int = 0,
    x0: torch.Tensor | None = None,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    checkpoint_minutes: float | None = None,
    blowup: float = 1e10,
    stop_after: int | None = None,
    threads: int | None = None,
    progress: bool | Callable[[int], None] = False,
    labels: list[dict[str, Any]] | None = None,
    log: Callable[[str], None] = print,
) -> Result:
    """Step ``algorithm`` on ``problem`` for ``plan.iterations`` steps; record at ``plan.record``.

    ``plan.period`` (steps per epoch, if any): mini-batch losses are averaged over
    the current epoch (``train_loss``, the sum over agents of their mean losses)
    and a checkpoint is written at its end when ``checkpoint_dir`` is given --
    or every ``checkpoint_every`` steps instead, and also whenever
    ``checkpoint_minutes`` have passed since the last one.

    Args:
        gradient: ``(x, generator) -> (gradients, losses or None)``; by default
            ``problem.gradient_and_loss``.
        metrics: ``x -> {name: one value per column}``; by default
            ``problem.metrics(x, comm)``.
        seed: seed of the generator handed to ``gradient``.
        x0: the starting stack; ``problem.initial_point()`` if omitted.
        blowup: see :class:`~decentopt.driver.guard.DivergenceGuard`.
        stop_after: end after this many steps, as an interruption would (tests).
        threads: intra-op threads inside the loop (the caller's setting is restored
            after); by default one thread for states below ``THREADS_CROSSOVER``
            entries, where threads only add synchronisation (and collapse on a busy
            machine), else torch's setting.
        progress: ``True`` for a progress bar, or a callable receiving the step.
        labels: what each column is, for :attr:`Result.rows`.
    """
    iterations, period = plan.iterations, plan.period
    gradient = gradient or problem.gradient_and_loss
    metrics = metrics or (lambda z: problem.metrics(z, comm))
    x = problem.initial_point() if x0 is None else x0
    if x.device.type == "cpu" and x.numel() * x.element_size() >= LARGE_STATE_BYTES:
        keep_freed_memory()
    # timings on a GPU need the queued kernels finished
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    check_network(algorithm, comm.topology)
    state = algorithm.init(x)
    generator = torch.Generator().manual_seed(int(seed))
    warning = mixing_warning(comm.topology, algorithm.name, algorithm.needs_psd)
    if warning is not None:
        log(warning)
    guard = DivergenceGuard(x, problem.x_star, comm, blowup)
    recorder = Recorder(metrics, comm, period, algorithm.lr_at)
    timing = [0.0, 0.0]  # gradient, everything else
    saver = None
    start_step = 0
    if checkpoint_dir is not None:
        saver = Checkpointer(
            checkpoint_dir,
            comm,
            period=period,
            every=checkpoint_every,
            minutes=checkpoint_minutes,
            device=x.device,
        )
        saved = saver.restore(like=state)
        if saved is not None:
            state = type(state)(**saved["state"])
            problem.load_state_dict(saved["problem"])
            generator.set_state(saved["generator"])
            torch.set_rng_state(saved["torch_rng"])
            recorder.records = [Record.from_dict(r) for r in saved["records"]]
            if recorder.records:  # the wall clock goes on from the last record
                recorder.offset = recorder.records[-1].wall_seconds
            recorder.losses = saved["losses"]
            guard.diverged_at = np.asarray(saved["diverged_at"], dtype=np.int64)
            timing = list(saved["timing"])
            comm.stats.__dict__.update(saved["rounds"])  # W_t goes on from its round
            start_step = int(saved["step"])
            log(f"resuming {algorithm.name} from step {start_step}")
    bar = None
    if progress is True:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=iterations, initial=start_step, desc=algorithm.name, leave=False, disable=None
        )
    recorded = set(plan.record)
    with intra_op_threads(threads, x.numel()):
        wall = time.perf_counter()
        if start_step == 0 and 0 in recorded:
            state = guard.check(state, 0)
            recorder.note(0, state.x, timing, guard.blank)
        last = start_step
        for t in range(start_step, iterations):
            last = t + 1
            t0 = time.perf_counter()
            grad, loss = gradient(state.x, generator)
            if t == start_step:
                check_gradient(grad, state.x, type(problem).__name__)
            sync()
            t1 = time.perf_counter()
            state = algorithm.step(state, grad, comm)
            recorder.add_loss(loss)
            sync()
            timing[0] += t1 - t0
            timing[1] += time.perf_counter() - t1
            step = t + 1
            if step in recorded:
                state = guard.check(state, step)
                recorder.note(step, state.x, timing, guard.blank)
            elif step % CHECK_EVERY == 0 or (period and step % period == 0):
                state = guard.check(state, step)
            recorder.end_of_step(step)
            if saver is not None and saver.due(step):
                saver.save(
                    step,
                    {
                        "state": dict(state._asdict()),  # type: ignore[attr-defined]
                        "problem": problem.state_dict(),
                        "generator": generator.get_state(),
                        "torch_rng": torch.get_rng_state(),
                        "records": [r.to_dict() for r in recorder.records],
                        "diverged_at": guard.diverged_at.tolist(),
                        "timing": list(timing),
                        "rounds": dict(vars(comm.stats)),
                        "losses": recorder.losses,  # a checkpoint may fall inside an epoch
                        "step": step,
                    },
                )
            if bar is not None:
                bar.update(1)
            elif callable(progress):
                progress(step)
            if guard.alive == 0:
                log(f"{algorithm.name} diverged at step {step}; stopping this run")
                break
            if stop_after is not None and step >= stop_after:
                break
        wall = time.perf_counter() - wall
    state = guard.check(state, last)
    if bar is not None:
        bar.close()
    if guard.alive == 0:  # records after an early stop are NaN
        recorder.pad(sorted(recorded), timing)
    return Result(
        algorithm=algorithm.name,
        records=recorder.records,
        diverged_at=guard.diverged_at,
        final_state=state,
        comm=comm.stats,
        wall_time=wall,
        resumed_from=start_step,
        labels=list(labels or []),
        period=period,
    )
