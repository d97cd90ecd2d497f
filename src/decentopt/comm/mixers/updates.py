"""What a fusing mixer launches for the update a rule declares (its ``FusedUpdate``).

DSGD's ``descend``, DmSGD's ``momentum_descend``, ED's ``correct`` and EDM's
``edm_update`` (:data:`decentopt.updates.KINDS`) are the reference: the C kernels
(:mod:`.native`) and the Triton kernels (:mod:`.cuda`) compute each of them together
with the mix of its first output, and the tests check they agree with it for every
option.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from decentopt.updates import FusedUpdate

__all__ = ["FusedCall", "prepare"]


@dataclass(frozen=True)
class FusedCall:
    """What a fusing mixer launches: the update (with its switches), its step size and
    momentum (0 without one), the inputs made contiguous and the outputs to fill."""

    update: FusedUpdate
    alpha: float
    beta: float
    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]


def prepare(
    fn: Callable[..., object], flats: Sequence[torch.Tensor], scalars: Sequence[float]
) -> FusedCall | None:
    """The fused call for ``fn`` on ``flats``, or ``None`` where no kernel computes it (an
    update no rule declared, other arity, or inputs of different shapes or dtypes)."""
    if not isinstance(fn, FusedUpdate):
        return None
    first = flats[0]
    if (
        len(flats) != fn.inputs
        or len(scalars) != len(fn.scalars)
        or any(f.shape != first.shape or f.dtype != first.dtype for f in flats)
    ):
        return None
    inputs = [f.contiguous() for f in flats]
    outputs = [torch.empty_like(inputs[0]) for _ in range(fn.outputs)]
    beta = float(scalars[1]) if len(scalars) > 1 else 0.0
    return FusedCall(fn, float(scalars[0]), beta, inputs, outputs)
