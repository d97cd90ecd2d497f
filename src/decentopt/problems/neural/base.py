"""What every gradient backend of :class:`~decentopt.problems.neural.NeuralProblem` shares.

A backend computes, for ``N`` replicas of one model whose parameters are the rows of
a flat ``(N, P)`` state, every replica's gradient on its own mini-batch and its
mini-batch loss (:meth:`GradientBackend.gradients`), and every replica's logits on
one shared batch (:meth:`GradientBackend.logits`, for evaluation). The options --
bf16 autocast, channels-last images, ``torch.compile`` -- are the same for all;
a backend refuses, when it is built, a combination it cannot run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn

from decentopt._checks import give_up_compiling
from decentopt.problems.neural.layout import ParamLayout

__all__ = ["Batch", "GradientBackend", "Options", "compiled_call"]


@dataclass(frozen=True)
class Options:
    """How a backend runs: on which device, in bf16 autocast, channels-last, compiled."""

    device: torch.device
    bf16: bool = False
    channels_last: bool = False
    compile: bool = False

    def autocast(self) -> Any:
        """bf16 autocast of forward and backward (parameters and gradients stay float32)."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)


class Batch(NamedTuple):
    """Every replica's mini-batch: ``images`` ``(N, B, ...)``, ``labels`` ``(N, B)`` and
    ``dropout``, each replica's generator (backends that draw masks per replica)."""

    images: torch.Tensor
    labels: torch.Tensor
    dropout: Sequence[torch.Generator]


class GradientBackend:
    """What every backend keeps of its ``replicas`` replicas of ``model``, and the defaults of
    one whose replicas hold no buffers."""

    name: ClassVar[str]

    def __init__(self, model: nn.Module, layout: ParamLayout, replicas: int, options: Options):
        self.model = model
        self.layout = layout
        self.options = options
        self.count = replicas
        self._compiled: dict[str, Any] = {}

    def gradients(self, x: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients ``(N, P)`` and mini-batch losses ``(N,)`` of replicas ``x`` (``(N, P)``)
        on their mini-batches."""
        raise NotImplementedError

    def logits(self, x: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        """Every replica's logits ``(N, B, classes)`` on one batch ``images`` ``(B, ...)``,
        in evaluation mode."""
        raise NotImplementedError

    def buffers(self) -> list[list[torch.Tensor]]:
        """Every replica's buffers (BatchNorm statistics), in ``model.buffers()`` order."""
        return [[] for _ in range(self.count)]

    @torch.no_grad()
    def load_buffers(self, saved: list[list[torch.Tensor]]) -> None:
        """Copy ``saved`` (what :meth:`buffers` gave) into every replica's buffers."""
        for views, values in zip(self.buffers(), saved, strict=True):
            for view, value in zip(views, values, strict=True):
                view.copy_(value)

    def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``, through :func:`compiled_call` when the options compile."""
        if self.options.compile:
            return compiled_call(self._compiled, function, *args)
        return function(*args)


def compiled_call(holder: dict[str, Any], function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` through ``torch.compile`` (compiled once, kept in ``holder``); on
    any failure a warning, and ``function`` eagerly from then on."""
    if holder.get("failed"):
        return function(*args)
    if "compiled" not in holder:
        holder["compiled"] = torch.compile(function)
    try:
        return holder["compiled"](*args)
    except Exception as exc:
        give_up_compiling("the gradient", "running it eagerly", exc)
        holder["failed"] = True
        return function(*args)
