"""Many steps per call: the iterations between two events of the loop run as one block.

An event is a step after which the loop does something besides stepping: records metrics,
checks for divergence (every ``CHECK_EVERY`` steps), writes a checkpoint or stops. The
steps between two events only step, so the loop hands them to a block runner at once
(:meth:`decentopt.driver.loop._Loop.steps`); events happen at the same steps as step by
step, so records, divergence stops and checkpoints do too, and progress is reported for
every step when the block is done. Paths (``RunOptions.path``, ``simulate(path=...)``):

* ``"native"``: the problem's closed-form gradient, the method's update and the circulant
  mix, every step of the block in one C call (``blocks.c`` through
  :meth:`~decentopt.comm.mixers.NativeMixer.quadratic_steps`): for a quadratic with
  per-agent Hessians, a method whose step is one fused update of
  :data:`decentopt.updates.KINDS`, as its rule declares it (DSGD, DmSGD, ED, EDM with exact
  gossip: :attr:`~decentopt.algorithms.Method.fused`) on a circulant graph, a CPU state
  below ``THREADS_CROSSOVER`` entries (one thread) and ``kernel`` "auto" or "native";
* ``"block"``: the noise of the whole block drawn at once and the gradients from it
  (:class:`~decentopt.problems.base.BlockProblem`: quadratic, logistic), each step the
  method's own ``step``: every method and gossip;
* ``"step"``: one step at a time (neural problems, and any problem without ``draw``);
* ``"auto"`` (default): the first of native, block, step that applies.

Both block paths draw the noise as the step path does, bit for bit (one draw for the
block where each step's draw is a multiple of 16 numbers, else step by step:
:func:`~decentopt.problems.base.normal_block`); the gradients are computed in another
order (one elementwise product and sum, or the C loop), so results equal the step path's
to rounding, and a rerun equals itself bit for bit. The path taken is
:attr:`Result.path <decentopt.driver.result.Result.path>`.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from decentopt.comm.mixers import MixerUnavailable, NativeMixer
from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.problems.base import BlockProblem

if TYPE_CHECKING:
    from decentopt.algorithms.method import Method
    from decentopt.communicator import Communicator

__all__ = [
    "PATHS",
    "BlockRunner",
    "check_gradient",
    "check_step",
    "choose",
]

#: State size (entries) from which the loop keeps torch's intra-op threads. Measured on a
#: 2-core machine: below it a second thread gains at most 2x when the machine is idle and
#: costs 5-24x when another process is busy (benchmarks/bench_peers.py).
THREADS_CROSSOVER = 2**20
#: ``RunOptions.path`` values.
PATHS = ("auto", "native", "block", "step")
#: A block holds at most this many bytes of noise terms (one state's worth per step):
#: large states take short blocks, where a step's own cost hides the loop's anyway.
BLOCK_BYTES = 16 << 20


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


def check_step(new: object, old: Any, algorithm: Any) -> None:
    """Refuse a step that returned another kind of state, or an iterate of another shape,
    dtype or device than the one it was given (a user's method, most likely): one line
    naming the method and where it is defined, before the guard or the problem's metrics
    meet it. (Other fields may change shape: RelaySGD's buffers fill on the first step.)"""
    cls = type(algorithm.rule)  # where an error of its step should look
    try:
        where = f"{cls.__name__}, {inspect.getsourcefile(cls)}"
    except (TypeError, OSError):  # defined in __main__ or an interactive session
        where = f"{cls.__name__}, module {cls.__module__}"
    method = f"method {algorithm.name} ({where})"
    returned = type(new.rule)  # type: ignore[attr-defined]
    given = type(old.rule)
    if returned is not given:
        raise TypeError(
            f"{method}: step returned {returned.__name__}; it must return the "
            f"state it was given, a {given.__name__}, with every field updated"
        )
    x, before = new.x, old.x  # type: ignore[attr-defined]
    if not isinstance(x, torch.Tensor):
        found = f"a {type(x).__name__}"
    elif (x.shape, x.dtype, x.device) != (before.shape, before.dtype, before.device):
        found = f"shape {tuple(x.shape)}, {x.dtype} on {x.device}"
    else:
        return
    raise ValueError(
        f"{method}: step returned x of {found} for iterates of shape "
        f"{tuple(before.shape)}, {before.dtype} on {before.device}; a step keeps the "
        "iterates' shape, dtype and device"
    )


@dataclass(frozen=True)
class BlockRunner:
    """Runs steps ``[start, stop)`` of a loop's method on its problem: ``"step"`` (one step,
    the gradient it is given), ``"block"`` (the method's own step on gradients from noise
    drawn at once) or ``"native"`` (one C call)."""

    path: str
    #: the most steps in one block
    limit: int = 1
    #: the C loop with everything but the state, the noise and the step sizes given
    #: (``NativeMixer.quadratic_steps``)
    native: Callable[..., list[torch.Tensor]] | None = None

    def run(self, loop: Any, state: Any, start: int, stop: int, gradient: Callable) -> Any:
        """The state after step ``stop``, for ``loop`` (:class:`decentopt.driver.loop._Loop`):
        its generator draws the noise, its timings grow, and on the ``"step"`` and ``"block"``
        paths its own ``step`` takes each step's gradient (from the block's noise)."""
        if self.path == "step":
            return loop.step(start, state, gradient)
        t0 = time.perf_counter()
        z = loop.problem.draw(stop - start, loop.generator)
        terms = None if self.native is not None else loop.problem.noise_terms(z)
        loop.timing[0] += time.perf_counter() - t0
        if self.native is not None:  # every step of the block in one C call
            t0 = time.perf_counter()
            fields = ("x", *loop.algorithm.fused.reads)
            tensors = state.tensors()
            alphas = [float(loop.algorithm.lr_at(t)) for t in range(start, stop)]
            out = self.native([tensors[f] for f in fields], noise=z, alphas=alphas)
            loop.comm.add_rounds(stop - start, state.x[0].numel() * state.x.element_size())
            loop.timing[1] += time.perf_counter() - t0
            return state.replace(**dict(zip(fields, out, strict=True)), t=stop)
        for s in range(stop - start):
            term = None if terms is None else terms[s]
            state = loop.step(start + s, state, partial(_from_terms, loop.problem, term))
        return state


def _from_terms(
    problem: Any, term: torch.Tensor | None, x: torch.Tensor, _: torch.Generator
) -> tuple[torch.Tensor, None]:
    """A step's gradient from its share of the block's noise (no loss)."""
    return problem.gradient_from(x, term), None


def _native_parts(
    algorithm: Method, problem: Any, comm: Communicator, state: Any
) -> tuple[Callable[..., list[torch.Tensor]] | None, str]:
    """What the native path needs, or None and why it does not apply."""
    terms = getattr(problem, "native_terms", lambda: None)()
    if terms is None:
        return None, "the problem has no closed-form terms for the C loop"
    if not isinstance(comm, SimulatedCommunicator) or comm.kernel not in ("auto", "native"):
        return None, "it takes a simulated communicator with kernel 'auto' or 'native'"
    if state.x.numel() >= THREADS_CROSSOVER:
        return None, "the state is large enough for threads (the C loop runs one)"
    try:
        mixer = NativeMixer(comm.topology)
    except MixerUnavailable as exc:
        return None, str(exc)
    why = mixer.supports(state.x.reshape(state.x.shape[0], -1))
    if why:
        return None, why
    fused = algorithm.fused  # scalars: the step size lr_at(t), then one of the rule's fields
    if fused is None or fused.scalars[0] != "lr":
        return None, f"{algorithm.name} declares no fused update that is its whole step"
    beta = float(getattr(algorithm.rule, fused.scalars[1])) if len(fused.scalars) > 1 else 0.0
    F = terms[1]
    runs = mixer.panel_runs(tuple(state.x.shape), F.shape[-1], state.x.element_size())
    return partial(
        mixer.quadratic_steps,
        fused.kind,
        (fused.nesterov, fused.dampening),
        terms=tuple(mixer.panels(t, runs) for t in terms),
        beta=beta,
        runs=runs,
        lower=F.shape[-1] == F.shape[-2] and bool((F.triu(1) == 0).all()),
    ), ""


def choose(
    path: str, algorithm: Method, problem: Any, comm: Communicator, state: Any
) -> BlockRunner:
    """The runner of ``path`` ("auto": the first that applies); a ValueError saying why
    when a named path cannot run."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {', '.join(PATHS)}; got {path!r}")
    if path == "step":
        return BlockRunner("step")
    limit = max(1, BLOCK_BYTES // (state.x.numel() * state.x.element_size()))
    if not isinstance(problem, BlockProblem) or state.x.shape[0] != problem.n:
        if path == "auto":
            return BlockRunner("step")
        raise ValueError(
            f"path={path!r}: {type(problem).__name__} cannot draw noise in blocks for this "
            "stack (it needs every agent's rows in one process)"
        )
    if path in ("auto", "native"):
        native, why = _native_parts(algorithm, problem, comm, state)
        if native is not None:
            return BlockRunner("native", limit, native)
        if path == "native":
            raise ValueError(f"path='native' cannot run: {why}")
    return BlockRunner("block", limit)
