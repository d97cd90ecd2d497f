"""Buckets of parameters that step together: one flat row per bucket, one gossip round each.

A bucket holds some trainable parameters of one parameter group (the same step
count, dtype and device), at most ``bucket_cap_mb`` of them. A step of a bucket
gathers the parameters' current values and gradients into flat ``(1, P)`` rows,
runs the algorithm's pure ``step`` on them with the bucket's flat state, and keeps
the new values for :meth:`Bucket.scatter`, which copies them into the parameters
(the user's tensors, never re-pointed). The per-parameter views of the flat state
are what ``optimizer.state[p]`` holds, so checkpoints have torch's format.

:class:`Overlap` runs bucket steps on a worker thread as soon as backward has
accumulated every gradient of a bucket (``register_post_accumulate_grad_hook``),
in a fixed bucket order on every rank (so neighbours' messages match), while
backward goes on; ``step()`` hands over the rest and waits.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from decentopt.comm.grouped import AgentGroup
from decentopt.communicator import Communicator

__all__ = ["Bucket", "Overlap", "plan_buckets", "restore_round"]


@dataclass
class Bucket:
    """Parameters stepped as one flat row (see the module docstring)."""

    group: int
    params: list[torch.nn.Parameter]
    state: Any  # the method's state (MethodState) of flat (1, P) tensors
    algorithm: Any
    result: Any = None  # the state after a step, until scattered

    def views(self, row: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter views of a ``(*lead, P)`` row: ``(*lead, *p.shape)`` each."""
        lead = row.shape[:-1]
        pieces = row.split([p.numel() for p in self.params], dim=-1)
        return [c.view(*lead, *p.shape) for c, p in zip(pieces, self.params, strict=True)]

    def pieces(self) -> dict[torch.nn.Parameter, dict[str, Any]]:
        """What ``optimizer.state[p]`` holds: views of the flat state per parameter (an agent
        field, one value per agent, whole), and the step count."""
        agent = self.algorithm.agent_fields
        fields = {k: v[0] for k, v in self.state.tensors().items() if k != "x"}
        shared = {k: v for k, v in fields.items() if k in agent}
        split = {k: self.views(v) for k, v in fields.items() if k not in agent}
        return {
            p: {"step": self.state.t} | {k: views[i] for k, views in split.items()} | shared
            for i, p in enumerate(self.params)
        }

    def gather(self, grad_scale: float | None, weight_decay: float) -> tuple[torch.Tensor, Any]:
        """The current values ``(1, P)`` and gradients (``None`` counts as zero; unscaled by
        ``grad_scale``; coupled weight decay added)."""
        x = torch.cat([p.detach().reshape(-1) for p in self.params]).unsqueeze(0)
        if any(p.grad is not None and p.grad.is_sparse for p in self.params):
            raise RuntimeError("DecentralizedOptimizer does not support sparse gradients")
        grads = [  # a gradient None counts as zero
            torch.zeros_like(p) if p.grad is None else p.grad.detach().to(p.dtype)
            for p in self.params
        ]
        grad = torch.cat([g.reshape(-1) for g in grads]).unsqueeze(0)
        if grad_scale is not None:
            grad.mul_(1.0 / grad_scale)
        if weight_decay:
            grad.add_(x, alpha=weight_decay)
        return x, grad

    def run(
        self,
        comm: Communicator,
        grad_scale: float | None,
        weight_decay: float,
        agent: AgentGroup | None = None,
    ) -> None:
        """One step of the algorithm on this bucket (kept in ``result``); over an ``agent`` of
        several processes, on the mean of their gradients."""
        x, grad = self.gather(grad_scale, weight_decay)
        if agent is not None:
            grad = agent.average_gradients(grad)
        self.result = self.algorithm.step(self.state.replace(x=x), grad, comm)

    @torch.no_grad()
    def scatter(self) -> None:
        """Copy the new values into the parameters and keep the new state."""
        if self.result is None:
            return
        torch._foreach_copy_(self.params, self.views(self.result.x[0]))
        self.state, self.result = self.result, None


def plan_buckets(params: Sequence[torch.nn.Parameter], cap_bytes: int) -> list[list[int]]:
    """Indices of ``params`` in buckets of at most ``cap_bytes`` (one parameter may exceed
    it alone), in reverse order: backward produces the last layers' gradients first."""
    buckets: list[list[int]] = [[]]
    size = 0
    for index in reversed(range(len(params))):
        nbytes = params[index].numel() * params[index].element_size()
        if buckets[-1] and size + nbytes > cap_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(index)
        size += nbytes
    return [b for b in buckets if b]


class Overlap:
    """Bucket steps on one worker thread, each as soon as its gradients are ready.

    ``accumulated(p)`` counts the gradient of ``p`` in (hooks call it from backward); the
    last of a bucket's marks it ready. The worker runs buckets strictly in order
    ``0, 1, ...``, waiting for each, so every rank sends its messages in the same order.
    ``finish()`` marks every bucket, waits for the worker and re-raises what it raised.
    """

    def __init__(self, run: Callable[[int], None], buckets: Sequence[Bucket]) -> None:
        self._run = run
        self._where = {id(p): k for k, bucket in enumerate(buckets) for p in bucket.params}
        self._waiting = [len(bucket.params) for bucket in buckets]  # gradients still to come
        self._ready = [threading.Event() for _ in buckets]
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="decentopt-gossip", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            for k, ready in enumerate(self._ready):
                ready.wait()
                self._run(k)
        except BaseException as exc:  # handed to the main thread in finish()
            self._error = exc

    def accumulated(self, p: torch.Tensor) -> None:
        k = self._where.get(id(p))
        if k is None:  # not a trainable parameter of the layout
            return
        self._waiting[k] -= 1
        if self._waiting[k] == 0:
            self._ready[k].set()

    def finish(self) -> None:
        for event in self._ready:
            event.set()
        self._thread.join()
        if self._error is not None:
            raise self._error


def restore_round(comm: Communicator, counters: dict[str, Any] | None, buckets: list) -> None:
    """Put ``comm``'s counters back as a checkpoint saved them (its round picks ``W_t``).

    A checkpoint without them (saved before they were kept) is taken to come from a
    communicator that only this optimizer used, with every bucket stepping from the start:
    the round is then the sum over buckets of their steps times the method's rounds per step
    (exact for one parameter group trained throughout). A warning says so."""
    if counters is None:
        rounds = sum(int(b.state.t) * int(b.algorithm.rounds_per_step) for b in buckets)
        warnings.warn(
            f"this checkpoint does not record the communicator's gossip round (it was saved "
            f"before rounds were kept); assuming round {rounds} (every bucket's steps times "
            f"the method's rounds per step), exact when only this optimizer used the "
            f"communicator and its parameters all trained from the first step",
            RuntimeWarning,
            stacklevel=3,
        )
        counters = {"rounds": rounds}
    stats = vars(comm.stats)
    stats.update({k: type(stats[k])(v) for k, v in counters.items() if k in stats})
