"""The one loop: every simulation and every training run steps through :func:`run_loop`.

It owns what each kind of run needs around ``algorithm.step``: progress, timing
(gradient vs the rest), divergence isolation, recording metrics on a grid of
steps, accumulating mini-batch losses, and checkpoints for exact resumption.
The problem supplies gradients and metrics (:class:`~decentopt.problems.Problem`),
the communicator the mixing; :func:`~decentopt.simulate` and
:func:`~decentopt.training.train` are thin entry points over it.

Columns: a problem's metrics have one value per *column* (a repetition of a
stacked convex problem; the single run of a neural problem). A column whose
iterates become non-finite or blow up is stopped (zeroed so that it cannot
overflow), reported with its step, and recorded as NaN from then on; the other
columns go on, and the loop ends early once every column has stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from decentopt.algorithms.base import Algorithm, AlgorithmState
from decentopt.comm.base import CommStats, Communicator
from decentopt.distributed.checkpoint import load_latest, save_checkpoint
from decentopt.perf import keep_freed_memory
from decentopt.problems.base import Plan

if TYPE_CHECKING:
    from decentopt.problems.base import Problem

__all__ = [
    "Record",
    "Trajectory",
    "check_gradient",
    "intra_op_threads",
    "record_steps",
    "run_loop",
]

#: How often (in steps) divergence is checked between recorded steps.
CHECK_EVERY = 50
#: State size (entries) from which the loop keeps torch's intra-op threads. Measured on a
#: 2-core machine: below it a second thread gains at most 2x when the machine is idle and
#: costs 5-24x when another process is busy (benchmarks/bench_peers.py).
THREADS_CROSSOVER = 2**20
#: From this many bytes of state, freed blocks stay in the process
#: (:func:`~decentopt.perf.keep_freed_memory`): glibc would otherwise return each
#: step's tensors to the system and page-fault fresh ones in on the next.
LARGE_STATE_BYTES = 8 << 20
#: A column also diverges when mean_i ||x_i||^2 exceeds this many times the median of
#: the others (relative to each column's start): a run blowing up slowly is not averaged in.
OUTLIER = 1e6
#: Recorded steps spread evenly over the last 10 % of a log-spaced record.
TAIL_POINTS = 21


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


@dataclass
class Record:
    """Metrics at one step, one value per column, with the time and gossip rounds so far."""

    step: int
    metrics: dict[str, np.ndarray]
    lr: float
    grad_seconds: float
    other_seconds: float
    rounds: int = 0
    bytes_per_agent: float = 0.0
    busiest_messages: int = 0
    busiest_bytes: int = 0


@dataclass
class Trajectory:
    records: list[Record]
    diverged_at: np.ndarray  # (columns,) step at which each column stopped, -1 if none
    final_state: Any
    wall_time: float
    resumed_from: int = 0

    @property
    def diverged(self) -> np.ndarray:
        return self.diverged_at >= 0

    def rows(
        self, labels: list[dict[str, Any]], algorithm: str, period: int | None = None
    ) -> list[dict[str, Any]]:
        """Tidy rows: one per recorded step and column, ``labels[column]`` first.

        Communication columns are per column (a stacked problem mixes all its
        columns in one message): ``rounds``, ``bytes_per_agent`` (sent, mean over
        agents), ``busiest_messages`` and ``busiest_bytes`` (summed over rounds,
        the busiest agent of each; what a network model turns into time).
        """
        rows = []
        columns = len(labels)
        for col, label in enumerate(labels):
            for rec in self.records:
                row = {**label, "algorithm": algorithm, "step": rec.step}
                if period:
                    row["epoch"] = rec.step // period
                row |= {k: float(v[col]) for k, v in rec.metrics.items()}
                row |= {
                    "rounds": rec.rounds,
                    "bytes_per_agent": rec.bytes_per_agent / columns,
                    "busiest_messages": rec.busiest_messages,
                    "busiest_bytes": rec.busiest_bytes / columns,
                    "lr": rec.lr,
                    "grad_seconds": rec.grad_seconds,
                }
                row |= {
                    "other_seconds": rec.other_seconds,
                    "diverged_at": int(self.diverged_at[col]),
                }
                rows.append(row)
        return rows


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
    """Zero the columns in ``mask`` in every stacked ``(n, R, d)`` tensor of the state."""
    keep = (~mask).view(1, -1, 1)
    updates = {
        name: torch.where(keep, value, 0.0)
        for name, value in state._asdict().items()  # type: ignore[attr-defined]
        if isinstance(value, torch.Tensor) and value.ndim == 3
    }
    return state._replace(**updates)


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


def _column_values(value: Any) -> np.ndarray:
    """A metric as float64 numbers, one per column (Python floats keep their precision)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().to(torch.float64).cpu().numpy()
    return np.array(value, dtype=np.float64).reshape(-1)


def _counts(stats: CommStats) -> tuple[int, float, int, int]:
    return stats.rounds, stats.bytes_per_agent, stats.busiest_messages, stats.busiest_bytes


def _column_norms(x: torch.Tensor, comm: Communicator) -> torch.Tensor:
    """``mean_i ||x_i||^2`` per column over all agents (collective under torch.distributed)."""
    return comm.mean(x.pow(2).sum(-1).unsqueeze(-1).double()).reshape(-1).cpu()


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
    log: Callable[[str], None] = print,
) -> Trajectory:
    """Step ``algorithm`` on ``problem`` for ``plan.iterations`` steps; record at ``plan.record``.

    ``plan.period`` (steps per epoch, if any): mini-batch losses are averaged over
    the current epoch (``train_loss``, the sum over agents of their mean losses)
    and a checkpoint is written at its end when ``checkpoint_dir`` is given --
    or every ``checkpoint_every`` steps instead, and also whenever
    ``checkpoint_minutes`` have passed since the last one (checked every
    ``CHECK_EVERY`` steps, agreed by every rank).

    Args:
        gradient: ``(x, generator) -> (gradients, losses or None)``; by default
            ``problem.gradient_and_loss``.
        metrics: ``x -> {name: one value per column}``; by default
            ``problem.metrics(x, comm)``.
        seed: seed of the generator handed to ``gradient``.
        x0: the starting stack; ``problem.initial_point()`` if omitted.
        blowup: a column diverges when ``mean_i ||x_i||^2`` exceeds
            ``blowup * (1 + mean_i ||x_i(0)||^2 + ||x*||^2)``, or ``OUTLIER`` times the
            median of the other columns (each relative to its start), or is not finite.
        stop_after: end after this many steps, as an interruption would (tests).
        threads: intra-op threads inside the loop (the caller's setting is restored
            after); by default one thread for states below ``THREADS_CROSSOVER``
            entries, where threads only add synchronisation (and collapse on a busy
            machine), else torch's setting.
        progress: ``True`` for a progress bar, or a callable receiving the step.
    """
    iterations, period = plan.iterations, plan.period
    gradient = gradient or problem.gradient_and_loss
    metrics = metrics or (lambda z: problem.metrics(z, comm))
    x = problem.initial_point() if x0 is None else x0
    if x.device.type == "cpu" and x.numel() * x.element_size() >= LARGE_STATE_BYTES:
        keep_freed_memory()
    # timings on a GPU need the queued kernels finished
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    state = algorithm.init(x)
    generator = torch.Generator().manual_seed(int(seed))
    agents = comm.topology.n  # in total; a rank holds fewer
    if algorithm.needs_psd and not comm.topology.psd:
        log(
            f"warning: {algorithm.name}'s analysis needs every W positive semi-definite, and "
            f"{comm.topology.name} has rounds that are not; it may not converge (its lazy() "
            "version is, at the price of slower mixing)"
        )
    scale = 1.0 + _column_norms(x, comm)
    if problem.x_star is not None:
        scale = scale + problem.x_star.pow(2).sum(-1).reshape(-1).cpu()
    limit = blowup * scale
    diverged_at = np.full(scale.numel(), -1, dtype=np.int64)
    records: list[Record] = []
    alive = [len(diverged_at)]  # columns still running (updated by check)
    timing = [0.0, 0.0]  # gradient, everything else
    losses: torch.Tensor | None = None
    start_step = 0

    def agree(ok: bool) -> bool:  # every rank's checkpoint file is intact
        flag = torch.tensor([[1.0 if ok else 0.0]], dtype=torch.float64)
        return bool(comm.mean(flag.to(x.device)).item() == 1.0)

    found = load_latest(checkpoint_dir, agree) if checkpoint_dir is not None else None
    if found is not None:
        saved = found[1]
        state = type(state)(**saved["state"])
        problem.load_state_dict(saved["problem"])
        generator.set_state(saved["generator"])
        torch.set_rng_state(saved["torch_rng"])
        records, diverged_at, timing = saved["records"], saved["diverged_at"], saved["timing"]
        counted = saved["rounds"]  # counted from the start (W_t goes on from its round)
        if isinstance(counted, tuple):  # checkpoints of earlier releases
            comm.stats.rounds, comm.stats.bytes_sent = counted
        else:
            comm.stats.__dict__.update(counted)
        start_step = int(saved["step"])
        losses = saved.get("losses")
        log(f"resuming {algorithm.name} from step {start_step}")

    def check(t: int) -> None:
        nonlocal state
        sq = _column_norms(state.x, comm)
        bad = ~torch.isfinite(sq) | (sq > limit)
        if len(sq) > 2 and bool((~bad).any()):  # or far above the median of the others
            rel = sq / scale
            bad |= rel > OUTLIER * rel[~bad].median().clamp_min(1e-300)
        new = bad.numpy() & (diverged_at < 0)
        diverged_at[new] = t
        alive[0] = int((diverged_at < 0).sum())
        if (diverged_at >= 0).any():  # stopped columns restart from zero so they never overflow
            state = _zero_columns(state, torch.from_numpy(diverged_at >= 0))

    def note(t: int) -> None:
        check(t)
        values = {k: _column_values(v) for k, v in metrics(state.x).items()}
        if losses is not None and period:
            done = t - (t - 1) // period * period  # steps into the current epoch
            rows = losses.shape[0]  # agents here; one loss per column (run) each
            mean = comm.mean((losses / done).reshape(rows, -1).float())
            values["train_loss"] = agents * mean.reshape(-1).double().cpu().numpy()
        for v in values.values():
            v[diverged_at >= 0] = np.nan
        lr = float(algorithm.lr_at(max(t - 1, 0)))
        records.append(Record(t, values, lr, *timing, *_counts(comm.stats)))

    last_saved = [time.monotonic()]

    def due(step: int) -> bool:
        """Whether a checkpoint is written after ``step`` (every rank decides alike)."""
        if checkpoint_every:
            if step % checkpoint_every == 0:
                return True
        elif period and step % period == 0:
            return True
        if checkpoint_minutes and step % CHECK_EVERY == 0:
            late = time.monotonic() - last_saved[0] >= 60 * checkpoint_minutes
            flag = torch.tensor([[1.0 if late else 0.0]], dtype=torch.float64, device=x.device)
            return bool(comm.mean(flag).item() > 0)  # any rank's clock decides for all
        return False

    bar = None
    if progress is True:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=iterations, initial=start_step, desc=algorithm.name, leave=False, disable=None
        )
    with intra_op_threads(threads, x.numel()):
        recorded = set(plan.record)
        wall = time.perf_counter()
        if start_step == 0 and 0 in recorded:
            note(0)
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
            if loss is not None:
                losses = loss.detach().clone() if losses is None else losses.add_(loss.detach())
            sync()
            timing[0] += t1 - t0
            timing[1] += time.perf_counter() - t1
            if t + 1 in recorded:
                note(t + 1)
            elif (t + 1) % CHECK_EVERY == 0 or (period and (t + 1) % period == 0):
                check(t + 1)
            if period and (t + 1) % period == 0:
                losses = None
            if checkpoint_dir is not None and due(t + 1):
                payload = {
                    "state": dict(state._asdict()),  # type: ignore[attr-defined]
                    "problem": problem.state_dict(),
                    "generator": generator.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    "records": records,
                    "diverged_at": diverged_at,
                    "timing": timing,
                    "rounds": dict(vars(comm.stats)),
                    "losses": losses,  # a checkpoint may fall inside an epoch
                    "step": t + 1,
                }
                save_checkpoint(checkpoint_dir, t + 1, payload, barrier=comm.barrier)
                last_saved[0] = time.monotonic()
            if bar is not None:
                bar.update(1)
            elif callable(progress):
                progress(t + 1)
            if alive[0] == 0:
                log(f"{algorithm.name} diverged at step {t + 1}; stopping this run")
                break
            if stop_after is not None and t + 1 >= stop_after:
                break
        wall = time.perf_counter() - wall
    check(last)
    if bar is not None:
        bar.close()
    # records after an early stop (every column diverged) are NaN
    if (diverged_at >= 0).all() and records:
        for s in sorted(recorded):
            if s > records[-1].step:
                nan = {k: np.full_like(v, np.nan) for k, v in records[-1].metrics.items()}
                lr = float(algorithm.lr_at(s - 1))
                records.append(Record(s, nan, lr, *timing, *_counts(comm.stats)))
    return Trajectory(records, diverged_at, state, wall, start_step)
