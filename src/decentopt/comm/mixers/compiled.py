"""``kernel="compiled"``: circulant mixing, and any elementwise update fused with it,
through ``torch.compile``.

``W z = sum_o c_o roll(z, -o)`` is compiled into one pass over the state (ring(256)
on (256, 10^5) float32: 1.1-1.4x a copy, against 1.9x for the eager shift kernel).
:meth:`CompiledMixer.mix_map` compiles *any* elementwise update together with the
mix of its first output (the neighbours' outputs are recomputed, as the compiler
cannot keep them in a buffer): on the CPU per block of columns of ``ROW_BYTES``
rows, so that the rows the stencil reads stay in cache; on a GPU over whole
tensors (one kernel launch per step: blocks cost a launch each). Scalars enter as
0-d tensors, so a new step size does not recompile. A compilation failure warns
once and mixes with the eager shift kernel from then on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from decentopt._checks import give_up_compiling
from decentopt.comm.mixers.base import register
from decentopt.comm.mixers.shift import ShiftMixer
from decentopt.topology import Network

if TYPE_CHECKING:
    from decentopt.communicator import Elementwise

__all__ = ["CompiledMixer", "stencil_sum"]

#: CPU block width of the fused update and mix, in bytes of a row (on (256, 10^5)
#: float32: 1.3x the step's memory bound in blocks against 1.5x unblocked).
ROW_BYTES = 32 << 10


def stencil_sum(z: torch.Tensor, stencil: tuple[tuple[int, float], ...]) -> torch.Tensor:
    """``sum_o c_o roll(z, -o)`` along the agent axis, written for ``torch.compile``."""
    out = z * dict(stencil).get(0, 0.0)
    for o, w in stencil:
        if o:
            out = out + w * torch.roll(z, -o, 0)
    return out


def function_key(fn: Elementwise) -> object:
    """Equal partials of one function share compiled code (a partial is new every step)."""
    if isinstance(fn, functools.partial):
        return (fn.func, fn.args, tuple(sorted(fn.keywords.items())))
    return fn


@register
class CompiledMixer(ShiftMixer):
    name = "compiled"

    def __init__(self, network: Network) -> None:
        super().__init__(network)  # the stencil, and the kernel if compilation fails
        self.failed = False
        self._mix = torch.compile(
            functools.partial(stencil_sum, stencil=self.stencil), dynamic=False
        )
        self._fused: dict[object, Callable[..., None]] = {}

    def mix(self, flat: torch.Tensor, out: torch.Tensor | None, t: int) -> torch.Tensor:
        if not self.failed:
            try:
                mixed = self._mix(flat)
                return mixed if out is None else out.copy_(mixed)
            except Exception as exc:
                give_up_compiling("the mixing kernel", "mixing with the eager shift kernel", exc)
                self.failed = True
        return super().mix(flat, out, t)

    def mix_map(
        self, fn: Elementwise, flats: Sequence[torch.Tensor], scalars: Sequence[float], t: int
    ) -> list[torch.Tensor] | None:
        first = flats[0]
        if self.failed or any(f.shape != first.shape or f.dtype != first.dtype for f in flats):
            return None
        n, cols = first.shape
        dtype, device = first.dtype, first.device
        # the update's outputs (count, dtype) from one column, evaluated eagerly
        probe = fn(*(f[:, :1] for f in flats), *scalars)
        outs = [torch.empty((n, cols), dtype=y.dtype, device=device) for y in probe]
        values = [torch.tensor(float(s), dtype=dtype, device=device) for s in scalars]
        on_cpu = device.type == "cpu"
        width = min(cols, max(16, ROW_BYTES // first.element_size())) if on_cpu else cols
        whole = cols - cols % width if width else 0
        key = (function_key(fn), len(flats), len(values), len(outs))
        if key not in self._fused:
            self._fused[key] = self._compile(fn, len(flats) + len(values))
        kernel = self._fused[key]
        try:
            for a in range(0, whole, width):
                block = slice(a, a + width)
                kernel(*(f[:, block] for f in flats), *values, *(o[:, block] for o in outs))
        except Exception as exc:
            give_up_compiling("the update and mix", "mixing with the eager shift kernel", exc)
            self.failed = True
            return None
        if whole < cols:  # the last, narrower block eagerly (no second compilation)
            rest = slice(whole, cols)
            ys = fn(*(f[:, rest] for f in flats), *scalars)
            super().mix(ys[0], outs[0][:, rest], t)
            for out, y in zip(outs[1:], ys[1:], strict=True):
                out[:, rest].copy_(y)
        return outs

    def _compile(self, fn: Elementwise, arity: int) -> Callable[..., None]:
        stencil = self.stencil

        def update_and_mix(*args: torch.Tensor) -> None:
            ys = fn(*args[:arity])
            outs = args[arity:]
            outs[0].copy_(stencil_sum(ys[0], stencil))
            for out, y in zip(outs[1:], ys[1:], strict=True):
                out.copy_(y)

        # without the raised thresholds inductor stores an output the stencil reads
        # three times and reads it back: 1.9x the memory bound instead of 1.6x
        return torch.compile(
            update_and_mix,
            dynamic=False,
            options={"realize_reads_threshold": 64, "realize_opcount_threshold": 1000},
        )
