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

import bisect
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from decentopt.algorithms.base import Algorithm
from decentopt.algorithms.method import Method, as_method
from decentopt.algorithms.registry import check_network
from decentopt.comm.base import Communicator
from decentopt.comm.watch import GossipWatch, staleness_note
from decentopt.driver.block import (
    THREADS_CROSSOVER,
    BlockRunner,
    check_gradient,
    check_step,
    choose,
)
from decentopt.driver.checkpointer import CHECK_EVERY, Checkpointer
from decentopt.driver.guard import DivergenceGuard
from decentopt.driver.options import RunOptions
from decentopt.driver.progress import ProgressLines, in_a_job
from decentopt.driver.recorder import Recorder
from decentopt.driver.result import Record, Result
from decentopt.perf import keep_freed_memory
from decentopt.plan import Plan
from decentopt.topology.advice import mixing_warning

if TYPE_CHECKING:
    from decentopt.problems.base import Problem

__all__ = ["LARGE_STATE_BYTES", "intra_op_threads", "run_loop"]

#: From this many bytes of state, freed blocks stay in the process
#: (:func:`~decentopt.perf.keep_freed_memory`): glibc would otherwise return each
#: step's tensors to the system and page-fault fresh ones in on the next.
LARGE_STATE_BYTES = 8 << 20


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


class _Loop:
    """The parts of one run around ``algorithm.step``, and the steps between them."""

    def __init__(
        self,
        algorithm: Method,
        problem: Problem,
        comm: Communicator,
        plan: Plan,
        options: RunOptions,
        x: torch.Tensor,
        metrics: Callable,
    ) -> None:
        self.algorithm = algorithm
        self.problem = problem
        self.comm = comm
        self.plan = plan
        self.options = options
        self.recorded = set(plan.record)
        self.record_order = sorted(self.recorded)
        # timings on a GPU need the queued kernels finished
        self.sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
        self.generator = torch.Generator().manual_seed(int(options.seed))
        warning = mixing_warning(comm.topology, algorithm.name, algorithm.needs_psd)
        for note in (warning, staleness_note(algorithm, comm)):
            if note is not None:
                options.log(note)
        self.guard = DivergenceGuard(x, problem.x_star, comm, options.blowup)
        sink = None if options.monitor is None else options.monitor.record
        self.recorder = Recorder(metrics, comm, plan.period, algorithm.lr_at, sink)
        self.timing = [0.0, 0.0]  # gradient, everything else
        self.start_step = 0
        self.bar = None
        self.runner = BlockRunner("step")  # or a block path (decentopt.driver.block)
        self.saver: Checkpointer | None = None
        if options.checkpoint_dir is not None:
            self.saver = Checkpointer(
                options.checkpoint_dir,
                comm,
                period=plan.period,
                every=options.checkpoint_every,
                minutes=options.checkpoint_minutes,
                device=x.device,
            )

    def resume(self, state: Any) -> Any:
        """The state of the newest intact checkpoint (everything else restored with it)."""
        saved = None if self.saver is None else self.saver.restore(like=state)
        if saved is None:
            return state
        self.problem.load_state_dict(saved["problem"])
        self.generator.set_state(saved["generator"])
        torch.set_rng_state(saved["torch_rng"])
        recorder = self.recorder
        recorder.records = [Record.from_dict(r) for r in saved["records"]]
        if recorder.records:  # the wall clock goes on from the last record
            recorder.started -= recorder.records[-1].wall_seconds
        recorder.losses = saved["losses"]
        self.guard.diverged_at = np.asarray(saved["diverged_at"], dtype=np.int64)
        self.timing = list(saved["timing"])
        self.comm.stats.__dict__.update(saved["rounds"])  # W_t goes on from its round
        self.start_step = int(saved["step"])
        self.options.log(f"resuming {self.algorithm.name} from step {self.start_step}")
        return state.replace(**saved["state"])

    def save(self, step: int, state: Any) -> None:
        assert self.saver is not None
        payload = {
            "state": state.as_dict(),
            "problem": self.problem.state_dict(),
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "records": [r.to_dict() for r in self.recorder.records],
            "diverged_at": self.guard.diverged_at.tolist(),
            "timing": list(self.timing),
            "rounds": dict(vars(self.comm.stats)),
            "losses": self.recorder.losses,  # a checkpoint may fall inside an epoch
            "step": step,
        }
        self.saver.save(step, payload)

    def open_bar(self) -> None:
        if self.options.progress is not True:
            return
        total = self.plan.iterations
        start = self.start_step
        name = self.algorithm.name
        if in_a_job() and not sys.stdout.isatty():  # rank 0 of a distributed run, to a log
            self.bar = ProgressLines(total, start, self.options.log, name, self.options.log_every)
        else:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=start, desc=name, leave=False, disable=None)

    def step(self, t: int, state: Any, gradient: Callable) -> Any:
        """Step ``t`` -> ``t + 1``: the gradient, the method's step, their timings."""
        t0 = time.perf_counter()
        grad, loss = gradient(state.x, self.generator)
        if t == self.start_step:
            check_gradient(grad, state.x, type(self.problem).__name__)
        self.sync()
        t1 = time.perf_counter()
        new = self.algorithm.step(state, grad, self.comm)
        if t == self.start_step:
            check_step(new, state, self.algorithm)
        self.recorder.add_loss(t, loss)
        self.sync()
        self.timing[0] += t1 - t0
        self.timing[1] += time.perf_counter() - t1
        return new

    def after(self, step: int, state: Any) -> tuple[Any, bool]:
        """Record, guard and checkpoint after ``step``; whether to stop."""
        period = self.plan.period
        if step in self.recorded:
            state = self.guard.check(state, step)
            self.recorder.note(step, state.x, self.timing, self.guard.diverged_at >= 0)
        elif step % CHECK_EVERY == 0 or (period and step % period == 0):
            state = self.guard.check(state, step)
        if self.saver is not None and self.saver.due(step):
            self.save(step, state)
        if self.guard.alive == 0:
            self.options.log(f"{self.algorithm.name} diverged at step {step}; stopping this run")
            return state, True
        stop = self.options.stop_after
        return state, stop is not None and step >= stop

    def steps(self, state: Any, gradient: Callable) -> tuple[Any, int]:
        """Every step from the start (or the resumed step) on; the state and the last step."""
        watch = GossipWatch(self.comm, self.algorithm)  # a method that never gossips
        if self.start_step == 0 and 0 in self.recorded:
            state = self.guard.check(state, 0)
            self.recorder.note(0, state.x, self.timing, self.guard.diverged_at >= 0)
        t = last = self.start_step
        while t < self.plan.iterations:
            last = self.block_end(t)  # t + 1 on the step path
            state = self.runner.run(self, state, t, last, gradient)  # up to the next event
            watch.after(last - self.start_step)
            if self.bar is not None:  # the progress of steps t + 1 .. last
                self.bar.update(last - t)
            elif callable(self.options.progress):
                for s in range(t + 1, last + 1):
                    self.options.progress(s)
            state, stop = self.after(last, state)
            if stop:
                break
            t = last
        return state, last

    def block_end(self, t: int) -> int:
        """The first step after ``t`` at which the loop does more than step (:meth:`after`):
        a recorded step, a divergence check, an epoch's or a checkpoint's end, the stop."""
        every = self.saver.every if self.saver is not None else None
        ends = [(t // k + 1) * k for k in (CHECK_EVERY, self.plan.period, every) if k]
        later = bisect.bisect_right(self.record_order, t)
        ends += self.record_order[later : later + 1]  # the next recorded step, if any
        if self.options.stop_after is not None:
            ends.append(max(self.options.stop_after, t + 1))
        return min(self.plan.iterations, t + self.runner.limit, *ends)

    def finish(self, state: Any, wall: float, labels: list[dict[str, Any]] | None) -> Result:
        if self.bar is not None:
            self.bar.close()
        if self.guard.alive == 0:  # records after an early stop are NaN
            self.recorder.pad(self.record_order, self.timing)
        return Result(
            algorithm=self.algorithm.name,
            records=self.recorder.records,
            diverged_at=self.guard.diverged_at,
            final_state=state,
            comm=self.comm.stats,
            wall_time=wall,
            resumed_from=self.start_step,
            labels=list(labels or []),
            period=self.plan.period,
            path=self.runner.path,
        )


def run_loop(
    algorithm: Algorithm[Any],
    problem: Problem,
    comm: Communicator,
    plan: Plan,
    options: RunOptions | None = None,
    *,
    gradient: Callable[[torch.Tensor, torch.Generator], tuple[torch.Tensor, Any]] | None = None,
    metrics: Callable[[torch.Tensor], dict[str, Any]] | None = None,
    x0: torch.Tensor | None = None,
    labels: list[dict[str, Any]] | None = None,
) -> Result:
    """Step ``algorithm`` on ``problem`` for ``plan.iterations`` steps; record at ``plan.record``.

    ``plan.period`` (steps per epoch, if any): mini-batch losses are averaged over
    the current epoch (``train_loss``, the sum over agents of their mean losses)
    and a checkpoint is written at its end when ``options.checkpoint_dir`` is given --
    or every ``options.checkpoint_every`` steps instead, and also whenever
    ``options.checkpoint_minutes`` have passed since the last one.

    Args:
        options: how the run is carried out (seed, threads, progress, log, checkpoints,
            ...: :class:`~decentopt.driver.options.RunOptions`).
        gradient: ``(x, generator) -> (gradients, losses or None)``, called step by step;
            by default ``problem.gradient_and_loss``, or blocks of steps where
            ``options.path`` allows (:mod:`decentopt.driver.block`).
        metrics: ``x -> {name: one value per column}``; by default
            ``problem.metrics(x, comm)``.
        x0: the starting stack; ``problem.initial_point()`` if omitted.
        labels: what each column is, for :attr:`Result.rows`.
    """
    options = options or RunOptions()
    algorithm = as_method(algorithm)
    x = problem.initial_point() if x0 is None else x0
    if x.device.type == "cpu" and x.numel() * x.element_size() >= LARGE_STATE_BYTES:
        keep_freed_memory()
    check_network(algorithm, comm.topology)
    state = algorithm.init(x, comm)
    metrics = metrics or (lambda z: problem.metrics(z, comm))
    loop = _Loop(algorithm, problem, comm, plan, options, x, metrics)
    state = loop.resume(state)
    if options.monitor is not None:
        options.monitor.start(loop.start_step, list(labels or []))
    if gradient is None:  # a gradient given by the caller is called step by step
        loop.runner = choose(options.path, algorithm, problem, comm, state)
    loop.open_bar()
    with intra_op_threads(options.threads, x.numel()):
        wall = time.perf_counter()
        state, last = loop.steps(state, gradient or problem.gradient_and_loss)
        wall = time.perf_counter() - wall
    result = loop.finish(loop.guard.check(state, last), wall, labels)
    if options.monitor is not None:
        options.monitor.finish(result)
    return result
