"""The library's own elementwise updates that fused kernels implement, by Python function.

DSGD's ``descend``, DmSGD's ``momentum_descend``, ED's ``correct`` and EDM's
``edm_update`` are the reference: the C kernels (:mod:`.native`) and the Triton
kernels (:mod:`.cuda`) compute each of them together with the mix of its first
output, and the tests check they agree with it for every option.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from decentopt.algorithms.dmsgd import momentum_descend
from decentopt.algorithms.dsgd import descend
from decentopt.algorithms.ed import correct
from decentopt.algorithms.edm import edm_update

__all__ = ["UPDATES", "FusedUpdate", "lookup"]


@dataclass(frozen=True)
class FusedUpdate:
    """An update: its kind (the kernels' name for it, in the order of
    :data:`decentopt.native.UPDATE_KINDS`) and how many tensors, scalars and outputs."""

    kind: str
    inputs: int
    scalars: int
    outputs: int


#: The library's updates by the Python function each implements.
UPDATES: dict[Callable[..., object], FusedUpdate] = {
    descend: FusedUpdate("descend", inputs=2, scalars=1, outputs=1),
    momentum_descend: FusedUpdate("momentum_descend", inputs=3, scalars=2, outputs=2),
    correct: FusedUpdate("correct", inputs=3, scalars=1, outputs=2),
    edm_update: FusedUpdate("edm", inputs=4, scalars=2, outputs=3),
}


def lookup(fn: Callable[..., object]) -> tuple[FusedUpdate, bool, bool] | None:
    """``(update, nesterov, dampening)`` for a function of :data:`UPDATES` (or a partial of
    one with only ``nesterov`` / ``dampening`` keywords); ``None`` otherwise."""
    keywords: dict[str, object] = {}
    if isinstance(fn, functools.partial):
        if fn.args or set(fn.keywords) - {"nesterov", "dampening"}:
            return None
        keywords, fn = dict(fn.keywords), fn.func
    update = UPDATES.get(fn)
    if update is None:
        return None
    return update, bool(keywords.get("nesterov", False)), bool(keywords.get("dampening", True))


@dataclass(frozen=True)
class FusedCall:
    """What a fusing mixer launches: the update with its switches, the inputs made
    contiguous and the outputs to fill."""

    update: FusedUpdate
    nesterov: bool
    dampening: bool
    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]


def prepare(
    fn: Callable[..., object], flats: Sequence[torch.Tensor], scalars: Sequence[float]
) -> FusedCall | None:
    """The fused call for ``fn`` on ``flats``, or ``None`` where no kernel computes it (an
    unknown function, other arity, or inputs of different shapes or dtypes)."""
    found = lookup(fn)
    if found is None:
        return None
    update, nesterov, dampening = found
    first = flats[0]
    if (
        len(flats) != update.inputs
        or len(scalars) != update.scalars
        or any(f.shape != first.shape or f.dtype != first.dtype for f in flats)
    ):
        return None
    inputs = [f.contiguous() for f in flats]
    outputs = [torch.empty_like(inputs[0]) for _ in range(update.outputs)]
    return FusedCall(update, nesterov, dampening, inputs, outputs)
