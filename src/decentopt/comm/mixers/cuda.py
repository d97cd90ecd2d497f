"""``kernel="cuda"``: Triton kernels that fuse an update with a circulant mix on a GPU.

One kernel launch per step over whole tensors: program ``(i, b)`` computes output
row ``i`` on column block ``b`` as ``sum_q w_q y0[(i + o_q) mod n]``, evaluating the
update ``y0`` of each neighbouring row from its inputs. Consecutive programs take
consecutive rows of one column block, so a neighbour's inputs come from the GPU's
L2 cache, and each input and output crosses device memory once: an EDM step reads
x, psi, m, g and writes x, psi, m (7 passes of the state). The updates are those of
:data:`decentopt.updates.KINDS` as the rules declare them (DSGD, DmSGD, ED, EDM, every
momentum option), and the plain mix; anything else is updated, then mixed.

``"auto"`` gives every CUDA state of a circulant graph (rings, exponential graphs,
also those under 64 agents stored dense) to this mixer when Triton is there (it
ships with torch's CUDA builds); without it, ``kernel="compiled"`` fuses the step
through ``torch.compile`` over whole tensors. ``TRITON_INTERPRET=1`` runs the
kernels on CPU tensors in Triton's interpreter, which is how the CPU tests check
them against the Python updates.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from decentopt.comm.mixers.base import FusedCall, prepare, register
from decentopt.comm.mixers.shift import ShiftMixer
from decentopt.topology import Network
from decentopt.updates import KINDS

if TYPE_CHECKING:
    from decentopt.communicator import Elementwise

__all__ = ["CudaMixer", "triton_kernel"]

#: Columns per program (a power of two).
BLOCK = 1024
_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


@functools.cache
def triton_kernel() -> tuple[Any, str]:
    """The Triton kernel module (compiled on first launch) and ``""``, or ``None`` and why."""
    try:
        module = importlib.import_module("decentopt.comm.mixers._triton")
    except ImportError:
        return None, "Triton is not installed (it ships with torch's CUDA builds)"
    return module, ""


@register
class CudaMixer(ShiftMixer):
    name = "cuda"

    def __init__(self, network: Network) -> None:
        super().__init__(network)
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def supports(self, flat: torch.Tensor) -> str:
        if flat.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            return f"the Triton kernels take CUDA states, not {flat.device}"
        if flat.dtype not in _DTYPES:
            return f"the Triton kernels take floating-point states, not {flat.dtype}"
        return triton_kernel()[1]

    def _table(self, device: torch.device, wide: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Offsets and weights on ``device`` (weights in float64 for float64 states)."""
        key = (device, wide)
        if key not in self._tables:
            offsets = torch.tensor([o % self.n for o, _ in self.stencil], dtype=torch.int64)
            weights = torch.tensor([w for _, w in self.stencil], dtype=torch.float64)
            weights = weights if wide else weights.float()
            self._tables[key] = (offsets.to(device), weights.to(device))
        return self._tables[key]

    def _launch(
        self, inputs: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], call: FusedCall | None
    ) -> None:
        """``call``'s update fused with the mix; without one, the plain mix of ``inputs[0]``."""
        module, why = triton_kernel()
        if module is None:
            raise RuntimeError(why)
        n, d = inputs[0].shape
        padded = list(inputs) + [inputs[0]] * (4 - len(inputs))
        outputs = list(outs) + [outs[0]] * (3 - len(outs))
        wide = inputs[0].dtype == torch.float64
        offsets, weights = self._table(inputs[0].device, wide)
        update = None if call is None else call.update
        alpha = 0.0 if call is None else call.alpha
        beta = 0.0 if call is None else call.beta
        damp, keep = (0.0, beta) if update and not update.dampening else (beta, 0.0)
        scalars = torch.tensor([alpha, damp, keep], dtype=weights.dtype, device=weights.device)
        module.update_mix[n, -(-d // BLOCK)](
            *padded,
            *outputs,
            offsets,
            weights,
            scalars,
            n,
            d,
            KIND=("mix", *KINDS).index(update.kind if update else "mix"),  # the plain mix first
            NESTEROV=bool(update and update.nesterov),
            TERMS=len(self.stencil),
            BLOCK=BLOCK,
            ACC=module.tl.float64 if wide else module.tl.float32,
        )

    def mix(self, flat: torch.Tensor, out: torch.Tensor | None, t: int) -> torch.Tensor:
        flat = flat.contiguous()
        target = torch.empty_like(flat) if out is None else out
        if flat.numel():
            self._launch([flat], [target], None)
        return target

    def mix_map(
        self, fn: Elementwise, flats: Sequence[torch.Tensor], scalars: Sequence[float], t: int
    ) -> list[torch.Tensor] | None:
        call = prepare(fn, flats, scalars)
        if call is not None and call.inputs[0].numel():
            self._launch(call.inputs, call.outputs, call)
        return None if call is None else call.outputs
