"""What a fusing mixer launches for an update of :data:`decentopt.updates.FUSED`.

DSGD's ``descend``, DmSGD's ``momentum_descend``, ED's ``correct`` and EDM's
``edm_update`` (:mod:`decentopt.updates`) are the reference: the C kernels
(:mod:`.native`) and the Triton kernels (:mod:`.cuda`) compute each of them together
with the mix of its first output, and the tests check they agree with it for every
option.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from decentopt.updates import FusedUpdate, fused_update

__all__ = ["FusedCall", "prepare"]


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
    found = fused_update(fn)
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
