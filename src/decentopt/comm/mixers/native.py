"""``kernel="native"``: the C kernels of :mod:`decentopt.native` for circulant graphs.

For a circulant ``W`` (stored by its stencil, or dense and found circulant) the
library mixes in one pass, and for the library's own updates -- DSGD's, DmSGD's,
ED's and EDM's, the kinds :data:`decentopt.updates.KINDS`, as a rule declares them --
computes the update and the mix of its first output together, block of columns by
block of columns, so that the mixed quantity is never written to memory. On
(256, 10^5) float32 over ring(256) an EDM step then takes 1.2x its 7-pass memory
bound at one thread and 0.9x at two, against 2.2x updating and mixing separately;
the mix 0.9-1.2x a copy, against 1.8-2.1x (``benchmarks/bench_peers.py``). ``"auto"``
takes it for CPU states of float32 or float64 from 8 MB when the library is there.

Each kind of :data:`decentopt.updates.KINDS` is the Python function
it implements: that function stays the reference, and the tests check both give
the same numbers for every option and every instruction-set variant of the library.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from decentopt import native
from decentopt.comm.mixers.base import prepare, register
from decentopt.comm.mixers.shift import ShiftMixer
from decentopt.compression import Compressor
from decentopt.compression._bits import kept_count, row_keys
from decentopt.topology import Network
from decentopt.topology.circulant import reach
from decentopt.updates import KINDS

if TYPE_CHECKING:
    from decentopt.communicator import Elementwise

__all__ = ["NativeMixer"]

#: States smaller than this are left to the other mixers under "auto" (nothing to gain).
MIN_BYTES = 8 << 20
#: Row length of a block of columns of the fused update and mix: the rows the stencil
#: reads for one output row stay in cache (measured on (256, 10^5) float32: 8192
#: columns best -- 1.05x the step's memory bound against 1.3x at 1024).
ROW_BYTES = 32 << 10
#: A stencil that reaches far makes the kernel keep all n rows of a block: blocks of at
#: most this size.
BLOCK_BYTES = 8 << 20
#: Rows of the plain mix of a short-reach stencil: rows r - 1, r, r + 1 stay in cache
#: (on (256, 10^5) float32 whole rows of 400 KB: 1.2x a copy, 1.3x in 32 KB blocks).
MIX_ROW_BYTES = 512 << 10
#: Bytes of a panel of runs of the native block steps (``blocks.c``): what one panel's
#: steps read stays in a second-level cache of 512 KB.
PANEL_BYTES = 256 << 10

#: The operators of ``decentopt_choco``, by its ``op`` index (kernels.c's enum).
CHOCO_OPS = ("top_k", "qsgd", "sign")


@register
class NativeMixer(ShiftMixer):
    name = "native"

    def __init__(self, network: Network, isa: str | None = None) -> None:
        """``isa``: a variant of the library to run (tests); by default the CPU's best."""
        super().__init__(network)
        self.reach = reach(self.stencil, self.n)
        self.isa = isa
        #: the compressed round's scratch, kept between calls: allocated afresh each round,
        #: its pages were faulted in again every time (a third of the round, measured)
        self._units = torch.empty(0, dtype=torch.float64)
        self._offsets = (ctypes.c_int64 * len(self.stencil))(*(o % self.n for o, _ in self.stencil))
        self._weights = {
            suffix: (scalar * len(self.stencil))(*(w for _, w in self.stencil))
            for suffix, scalar in (("f32", ctypes.c_float), ("f64", ctypes.c_double))
        }

    def supports(self, flat: torch.Tensor) -> str:
        if flat.device.type != "cpu" or flat.dtype not in native.SUFFIX:
            return (
                f"the C kernels take CPU float32/float64 states, not {flat.dtype} on {flat.device}"
            )
        if len(self.stencil) > native.MAX_TERMS:
            return f"the C kernels take at most {native.MAX_TERMS} stencil terms"
        return native.library()[1]

    def preferred(self, flat: torch.Tensor) -> bool:
        return flat.numel() * flat.element_size() >= MIN_BYTES and not self.supports(flat)

    def _run(self, name: str, dtype: torch.dtype, failure: str, *args: object) -> None:
        """Call function ``name`` of this variant for ``dtype`` (:func:`decentopt.native.run`)."""
        if not native.run(name, dtype, failure, *args, isa=self.isa):
            why = native.library()[1]
            raise RuntimeError(f"kernel='native': the C kernels are not available ({why})")

    def _stencil_args(self, dtype: torch.dtype) -> tuple:
        return len(self.stencil), self._offsets, self._weights[native.SUFFIX[dtype]]

    def _terms(self) -> str:
        return f"{len(self.stencil)} stencil terms (at most {native.MAX_TERMS})"

    def block_width(self, flat: torch.Tensor) -> int:
        """Columns per block of the fused kernel: rows of ``ROW_BYTES``; a far-reaching
        stencil (all n rows of a block kept) in blocks of at most ``BLOCK_BYTES``."""
        size = flat.element_size()
        cols = flat.shape[1]
        width = ROW_BYTES // size
        if self.n <= 4 * self.reach + 1:
            width = min(width, BLOCK_BYTES // (self.n * size))
        width = max(16, min(width, native.MAX_WIDTH) // 16 * 16)
        # as many blocks as a multiple of the threads, so that none waits for another
        threads = torch.get_num_threads()
        blocks = -(-cols // width)
        if blocks > 1:
            blocks = -(-blocks // threads) * threads
            width = max(16, -(-cols // (16 * blocks)) * 16)
        return width

    def mix(self, flat: torch.Tensor, out: torch.Tensor | None, t: int) -> torch.Tensor:
        flat = flat.contiguous()
        target = torch.empty_like(flat) if out is None else out
        # a short reach reads its neighbours' rows from cache: rows of up to 512 KB (the
        # threads share them out); a far-reaching stencil, a block of all rows from cache
        if self.reach <= 4:
            width = max(1, min(flat.shape[1], MIX_ROW_BYTES // flat.element_size()))
        else:
            width = self.block_width(flat)
        n, d = flat.shape
        stencil = self._stencil_args(flat.dtype)
        args = (n, d, flat.data_ptr(), target.data_ptr(), *stencil, width, torch.get_num_threads())
        self._run("decentopt_mix", flat.dtype, f"the native mix was given {self._terms()}", *args)
        return target

    def mix_map(
        self, fn: Elementwise, flats: Sequence[torch.Tensor], scalars: Sequence[float], t: int
    ) -> list[torch.Tensor] | None:
        call = prepare(fn, flats, scalars)
        if call is None:
            return None
        first = call.inputs[0]
        n, d = first.shape
        width = self.block_width(first)
        pointers = ctypes.c_void_p
        self._run(
            "decentopt_update_mix",
            first.dtype,
            f"the native {call.update.kind} kernel failed: its row buffers ({width} columns) "
            f"could not be allocated, or it was given {self._terms()}",
            native.UPDATE_KINDS.index(call.update.kind),
            int(call.update.nesterov),
            int(call.update.dampening),
            n,
            d,
            (pointers * len(call.inputs))(*(f.data_ptr() for f in call.inputs)),
            (pointers * len(call.outputs))(*(o.data_ptr() for o in call.outputs)),
            call.alpha,
            call.beta,
            *self._stencil_args(first.dtype),
            width,
            torch.get_num_threads(),
        )
        return call.outputs

    def choco(
        self,
        codec: Compressor,
        flat: torch.Tensor,
        hat: torch.Tensor,
        s: torch.Tensor,
        k: int,
        gamma: float,
        t: int,
        descent: tuple[torch.Tensor, float] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | str:
        """CHOCO's round in two passes of ``decentopt_choco`` (compress.h), agent by agent:
        the rows compressed in cache and ``q`` added to ``hat`` in place, then, as soon as
        an agent's neighbours have had their first pass, its ``s = W hat`` (recomputed in
        float64, not read) and its output written. ``s`` is overwritten, not updated: the
        kernel keeps ``S = W X_hat`` exactly. With ``descent = (g, alpha)`` the round is
        that of ``z = flat - alpha g`` (DSGD's update, computed in the kernel where z is
        read, never written)."""
        why = self.supports(flat)
        if descent is not None and (
            descent[0].shape != flat.shape or descent[0].dtype != flat.dtype
        ):
            why = why or "the descent direction has another shape or dtype than the state"
        if codec.name not in CHOCO_OPS:
            why = why or f"the C kernels compress with {', '.join(CHOCO_OPS)}, not {codec.name}"
        if hat.dtype != torch.float64 or s.dtype != torch.float64:
            why = why or f"the C kernels keep public copies in float64, not {hat.dtype}"
        if why or k < 1:
            return why or "rows of no entries"
        n, d = flat.shape
        op = CHOCO_OPS.index(codec.name)
        rows = d // k
        kept = kept_count(codec.ratio, k) if op == 0 else 0  # type: ignore[attr-defined]
        keys = row_keys(codec.seed, range(n), range(rows), t) if op == 1 else torch.empty(0)
        levels = float(codec.levels) if op == 1 else 0.0  # type: ignore[attr-defined]
        per_unit = levels * codec.tau(k) if op == 1 else 1.0  # type: ignore[attr-defined]
        flat, hat, s = flat.contiguous(), hat.contiguous(), s.contiguous()
        out = torch.empty_like(flat)
        g = None if descent is None else descent[0].contiguous()
        alpha = 0.0 if descent is None else float(descent[1])
        if self._units.numel() < n * rows * 2:  # qsgd: units, then scales
            self._units = torch.empty(n * rows * 2, dtype=torch.float64)
        # the arguments in the groups of the C declaration (native._DECLARATIONS)
        sizes = (op, n, d, k, kept, levels, per_unit)
        z = flat.data_ptr() if g is None else None  # else z = x - alpha g, read in the kernel
        buffers = (z, hat.data_ptr(), s.data_ptr(), out.data_ptr(), gamma)
        scratch = (keys.data_ptr(), self._units.data_ptr())
        stencil = self._stencil_args(torch.float64)
        x_g = (None, None) if g is None else (flat.data_ptr(), g.data_ptr())
        args = (*sizes, *buffers, *scratch, *stencil, *x_g, alpha, torch.get_num_threads())
        self._run("decentopt_choco", flat.dtype, "the native compressed round failed", *args)
        return out, hat, s

    @staticmethod
    def panel_runs(shape: tuple[int, ...], k: int, size: int) -> int:
        """Runs per panel of ``blocks.c`` for a state of ``shape`` ``(n, R, d)``: the most that
        divide ``R`` and keep a panel's Hessians, noise factors and state in ``PANEL_BYTES``."""
        n, runs, d = shape
        per_run = n * (d * d + d * k + 6 * d) * size
        return max(
            r
            for r in range(1, runs + 1)
            if runs % r == 0 and (r == 1 or r * per_run <= PANEL_BYTES)
        )

    @staticmethod
    def panels(t: torch.Tensor, runs: int) -> torch.Tensor:
        """``(n, R, *rest)`` as ``blocks.c``'s panels ``(R / runs, *rest, n * runs)``."""
        n, R, rest = t.shape[0], t.shape[1], t.shape[2:]
        order = (1, *range(3, 3 + len(rest)), 0, 2)
        return (
            t.reshape(n, R // runs, runs, *rest)
            .permute(order)
            .reshape(R // runs, *rest, -1)
            .contiguous()
        )

    def quadratic_steps(
        self,
        kind: str,
        switches: tuple[bool, bool],
        fields: Sequence[torch.Tensor],
        terms: Sequence[torch.Tensor],
        noise: torch.Tensor | None,
        alphas: Sequence[float],
        beta: float,
        runs: int,
        lower: bool,
    ) -> list[torch.Tensor]:
        """``len(alphas)`` steps of an update of :data:`~decentopt.updates.KINDS` on a stacked
        quadratic (``blocks.c``): ``fields``, the iterate and the state the update reads in the
        order of ``KINDS[kind]``, are ``(n, R, d)``, ``terms`` the quadratic's ``(H, F, b)``
        as :meth:`panels` of ``runs`` runs, ``noise`` ``(steps, n, R, k)`` as drawn (float32,
        or float64 under that default dtype); ``lower``: the noise factor is lower
        triangular (a Cholesky factor: its zeros are skipped). Returns new tensors."""
        x = fields[0]
        n, R, d = x.shape
        # turned into panels in C
        given = dict(zip(("x", *KINDS[kind][1]), (v.contiguous() for v in fields), strict=True))
        out = {k: torch.empty_like(v) for k, v in given.items()}
        pointers = ctypes.c_void_p * 3
        H, F, b = terms
        if noise is not None and noise.dtype not in (torch.float32, torch.float64):
            noise = noise.double()
        noise = None if noise is None else noise.contiguous()
        scalar = ctypes.c_double if x.dtype == torch.float64 else ctypes.c_float
        # the arguments in the groups of the C declaration (native._DECLARATIONS)
        update = (native.UPDATE_KINDS.index(kind), int(switches[0]), int(switches[1]))
        shape = (n, R // runs, runs, d, F.shape[2], int(lower))
        states = [
            pointers(*(t[k].data_ptr() if k in t else None for k in ("x", "psi", "m")))
            for t in (given, out)
        ]
        problem = (H.data_ptr(), F.data_ptr(), b.data_ptr())
        wide = noise is not None and noise.dtype == torch.float64
        drawn = (None if noise is None else noise.data_ptr(), int(wide))
        steps = (len(alphas), (scalar * len(alphas))(*alphas), float(beta))
        stencil = self._stencil_args(x.dtype)
        args = (*update, *shape, *states, *problem, *drawn, *steps, *stencil)
        failure = "the native quadratic steps could not allocate their scratch"
        self._run("decentopt_quadratic_steps", x.dtype, failure, *args)
        return list(out.values())
