"""Single-process communicator: all n agents' rows live in one tensor.

Kernels that compute ``W Z`` for ``Z`` of shape ``(n, ...)`` folded to ``(n, k)``:

* ``dense``: one GEMM ``W @ Z`` -- best for small ``n`` or dense ``W``;
* ``sparse``: a per-agent neighbour accumulation ``out_i = sum_j w_ij z_j`` over
  the non-zeros of ``W`` only. It reads each row a few times from cache and
  is memory-bound, so on a ring with long rows it runs near the bandwidth of a
  plain copy, where the GEMM would do ``n`` times more arithmetic.

* ``shift``: for a circulant topology (rings and exponential graphs from 64
  agents, :class:`~decentopt.topology.circulant.CirculantTopology`), ``W Z`` is a
  weighted sum of row-shifted copies of ``Z``: linear in ``n``, and no dense ``W``
  is ever built.

* ``compiled`` (opt-in, circulant topologies): the same sum of shifted copies
  written with ``torch.roll`` and compiled by ``torch.compile`` into one fused
  pass -- for large states (seconds of compilation on first use; a failure warns
  and falls back to ``shift``).

* ``gather``: for a :class:`~decentopt.topology.TopologySchedule`, the round's
  ``W_t`` in gather form, ``out = s * z + sum_slot w_slot * z[peers_slot]``: linear
  in ``n`` (one indexed read per peer slot), whatever ``W_t`` is this round.

``kernel="auto"`` picks ``gather`` for schedules, ``shift`` for circulant topologies
(for states from 8 MB its C version in :mod:`decentopt.comm.native`, when a C
compiler is there: 0.9-1.2x a copy on (256, 10^5) float32, against 1.8-2.1x),
``sparse`` when ``W`` is sparse (density <= 0.1), ``n >= 64`` and rows are long
(``k >= 1024``), else ``dense``.

For a circulant ``W`` (stored by its stencil, or dense and found circulant) and a
state of at least 8 MB, :meth:`SimulatedCommunicator.mix_map` runs an algorithm's
elementwise update and the mix together on blocks of columns, so that the mixed
quantity is never written to memory: DSGD's, DmSGD's, ED's and EDM's through C
kernels (:mod:`decentopt.comm.native`, under ``auto`` and ``compiled``), any other
update through ``torch.compile`` (``compiled`` only).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch

from decentopt.comm import native
from decentopt.comm.base import CommStats, Elementwise, map_then_mix
from decentopt.topology.circulant import CirculantTopology
from decentopt.topology.schedule import GossipRound, TopologySchedule
from decentopt.topology.sparse import SparseTopology
from decentopt.topology.topology import Topology

__all__ = ["SimulatedCommunicator"]

Kernel = Literal["auto", "dense", "sparse", "shift", "compiled", "csr", "gather"]
_SPARSE_MIN_N = 64
_SPARSE_MAX_DENSITY = 0.1
_SPARSE_MIN_COLS = 1024
#: Bytes of output rows the shift kernel fills at a time (they stay in cache).
_BLOCK_BYTES = 1 << 20
#: States smaller than this update and mix separately (nothing to gain in cache).
_FUSED_MIN_BYTES = 8 << 20
#: Row length of a block of columns of the fused update and mix: the rows the
#: stencil reads for one output row stay in cache (measured on (256, 10^5) float32:
#: 8192 columns best -- C kernel 1.05x the step's memory bound against 1.3x at 1024,
#: torch.compile 1.3x against 1.5x unblocked).
_FUSED_ROW_BYTES = 32 << 10
#: A stencil that reaches far makes the C kernel keep all n rows of a block: blocks
#: of at most this size.
_NATIVE_BLOCK_BYTES = 8 << 20
#: Rows of the C mix of a short-reach stencil: its rows r - 1, r, r + 1 stay in
#: cache (on (256, 10^5) float32 whole rows of 400 KB: 1.2x a copy, 1.3x in 32 KB blocks;
#: on (16, 2 * 10^6), rows of 8 MB: 1.5x).
_NATIVE_MIX_ROW_BYTES = 512 << 10
#: Dense topologies up to this size are checked for being circulant.
_CIRCULANT_CHECK_MAX = 1024


def _stencil_sum(z: torch.Tensor, stencil: tuple[tuple[int, float], ...]) -> torch.Tensor:
    """``sum_o c_o roll(z, -o)`` along the agent axis, written for ``torch.compile``."""
    out = z * dict(stencil).get(0, 0.0)
    for o, w in stencil:
        if o:
            out = out + w * torch.roll(z, -o, 0)
    return out


def _circulant_stencil(W: np.ndarray) -> tuple[tuple[int, float], ...] | None:
    """``((o, c_o), ...)`` when ``W[i, j] = c_{(j - i) mod n}`` exactly (a ring of fewer
    than 64 agents is stored dense, yet its large states take the C kernels); else None."""
    n = W.shape[0]
    if n > _CIRCULANT_CHECK_MAX:
        return None
    offsets = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n
    if not np.array_equal(W, W[0][offsets]):
        return None
    return tuple((int(o), float(W[0, o])) for o in np.flatnonzero(W[0]))


def _reach(stencil: tuple[tuple[int, float], ...] | None, n: int) -> int:
    """The farthest agent a row of the circulant ``W`` reads, either way round."""
    return max((min(o % n, n - o % n) for o, _ in stencil or ()), default=0)


def _function_key(fn: Elementwise) -> object:
    """Equal partials of one function share compiled code (a partial is new every step)."""
    if isinstance(fn, functools.partial):
        return (fn.func, fn.args, tuple(sorted(fn.keywords.items())))
    return fn


class SimulatedCommunicator:
    """Communicator over all agents of a :class:`Topology` in one process."""

    def __init__(
        self, topology: Topology | TopologySchedule, kernel: Kernel = "auto", native: bool = True
    ) -> None:
        """``native=False`` leaves the C kernels of fused steps aside (see :meth:`mix_map`)."""
        if kernel not in ("auto", "dense", "sparse", "shift", "compiled"):
            raise ValueError(
                f"kernel must be 'auto', 'dense', 'sparse', 'shift' or 'compiled'; got {kernel!r}"
            )
        circulant = isinstance(topology, CirculantTopology)
        if kernel in ("shift", "compiled") and not circulant:
            raise ValueError(
                f"kernel={kernel!r} needs a circulant topology (a ring or exponential graph "
                "from 64 agents)"
            )
        self._compiled: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._fused: dict[object, Callable[..., None]] = {}
        self._native_ok = native
        self.topology = topology
        self.kernel = kernel
        self.n = topology.n
        self.stats = CommStats()
        self._schedule = topology if isinstance(topology, TopologySchedule) else None
        self._gather_cache: dict[tuple[int, torch.dtype, torch.device], tuple] = {}
        self._gathered: tuple[tuple, torch.Tensor] | None = None
        if self._schedule is not None:
            if kernel != "auto":
                raise ValueError(
                    f"a time-varying topology mixes with its own per-round kernel; leave "
                    f"kernel='auto' (got {kernel!r})"
                )
            self._stencil, self._csr, self._rows, self._W_cache = None, None, (), {}
            self._circulant, self._reach = None, 0
            self._sparse_ok = False
            return
        assert isinstance(topology, Topology)
        degrees = topology.degrees
        self._messages = (float(degrees.mean()), int(degrees.max(initial=0)))
        self._stencil = topology.stencil if circulant else None
        #: the stencil whenever W is circulant, stored so or dense: the C kernels use it
        self._circulant = self._stencil
        self._reach = _reach(self._circulant, self.n)
        self._csr = topology.csr if isinstance(topology, SparseTopology) else None
        self._csr_cache: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        if circulant or self._csr is not None:  # no dense W: 10^5 agents would need 80 GB
            self._rows, self._W_cache = (), {}
            self._edges = int(degrees.sum())
            self._sparse_ok = False
            return
        W = topology.W.numpy()
        self._circulant = _circulant_stencil(W)
        self._reach = _reach(self._circulant, self.n)
        # (i, w_ii, ((j, w_ij), ...)) for the sparse kernel; Python floats avoid
        # a tensor-to-scalar conversion per term.
        self._rows = tuple(
            (i, float(W[i, i]), tuple((int(j), float(W[i, j])) for j in topology.neighbors[i]))
            for i in range(self.n)
        )
        self._edges = int(np.count_nonzero(W) - np.count_nonzero(np.diag(W)))
        self._W_cache: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        self._sparse_ok = self.n >= _SPARSE_MIN_N and topology.density <= _SPARSE_MAX_DENSITY

    def _dense_W(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.dtype, like.device)
        W = self._W_cache.get(key)
        if W is None:
            W = self.topology.W.to(dtype=like.dtype, device=like.device)
            self._W_cache[key] = W
        return W

    def kernel_for(
        self, cols: int
    ) -> Literal["dense", "sparse", "shift", "compiled", "csr", "gather"]:
        """The kernel used for a folded tensor with ``cols`` columns."""
        if self._schedule is not None:
            return "gather"
        if self.kernel != "auto":
            return self.kernel
        if self._stencil is not None:
            return "shift"
        if self._csr is not None:
            return "csr"
        return "sparse" if self._sparse_ok and cols >= _SPARSE_MIN_COLS else "dense"

    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``W z``; with ``out`` (same shape, contiguous, not ``z``) the result is written there.

        Writing into a caller's buffer avoids allocating (and page-faulting) a
        fresh tensor per round, which dominates for large models.
        """
        if z.shape[0] != self.n:
            raise ValueError(
                f"mix expects a tensor with the agent axis first of size n = {self.n}; "
                f"got shape {tuple(z.shape)}"
            )
        flat = z.reshape(self.n, -1)
        cols = flat.shape[1]
        if out is None:
            target = None if self.kernel == "compiled" else torch.empty_like(flat)
        else:
            if out.shape != z.shape or not out.is_contiguous() or out.data_ptr() == z.data_ptr():
                raise ValueError(
                    "mix(z, out=...) needs a contiguous out of the same shape as z that does "
                    "not share its memory"
                )
            target = out.view(self.n, -1)
        payload = cols * z.element_size()
        if self._schedule is not None:
            this_round = self._schedule.at(self.stats.rounds)
            self._gather_mix(this_round, self.stats.rounds, flat, target)
            sent = this_round.messages
            self.stats.add_round(
                float(sent.mean()), int(sent.max(initial=0)), payload, int(sent.sum()) * payload
            )
            return target.view(z.shape)
        self.stats.add_round(*self._messages, payload, self._edges * payload)
        kernel = self.kernel_for(cols)
        if kernel == "compiled":
            mixed = self._compiled_mix(flat)
            if mixed is not None:
                return mixed.view(z.shape) if target is None else target.copy_(mixed).view(z.shape)
            kernel = "shift"  # compilation failed: the eager kernel from now on
            target = torch.empty_like(flat) if target is None else target
        assert target is not None
        if (
            self.kernel == "auto"
            and self._circulant is not None
            and flat.numel() * flat.element_size() >= _FUSED_MIN_BYTES
            and self._native_mix(flat, target)
        ):
            pass  # a large state over a circulant W: the C kernel did it
        elif kernel == "dense":
            torch.mm(self._dense_W(flat), flat, out=target)
        elif kernel == "shift":
            self._shift_mix(flat, target)
        elif kernel == "csr":
            target.copy_(torch.sparse.mm(self._sparse_W(flat), flat))
        else:
            self._sparse_mix(flat, target)
        return target.view(z.shape)

    def mix_many(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """One round for several tensors: packed column-wise into a single ``W Z``."""
        if len(zs) == 1:
            return [self.mix(zs[0])]
        flats = [z.reshape(self.n, -1) for z in zs]
        mixed = self.mix(torch.cat(flats, dim=1))
        parts = mixed.split([f.shape[1] for f in flats], dim=1)
        return [p.reshape(z.shape) for p, z in zip(parts, zs, strict=True)]

    def _sparse_W(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.dtype, like.device)
        if key not in self._csr_cache:
            csr = self._csr
            assert csr is not None
            with warnings.catch_warnings():  # torch calls its CSR support "beta"
                warnings.simplefilter("ignore", UserWarning)
                self._csr_cache[key] = torch.sparse_csr_tensor(
                    torch.from_numpy(csr.indptr).long(),
                    torch.from_numpy(csr.indices).long(),
                    torch.from_numpy(csr.data),
                    size=csr.shape,
                    dtype=like.dtype,
                    device=like.device,
                    check_invariants=True,
                )
        return self._csr_cache[key]

    def _compiled_mix(self, flat: torch.Tensor) -> torch.Tensor | None:
        """``sum_o c_o roll(z, -o)`` through ``torch.compile``: one fused pass over the state
        (ring(256) on (256, 10^5) float32: 1.2x a copy, against 1.9x for the eager shift
        kernel). ``None`` (after a warning) when compilation fails."""
        if self._compiled is None:
            stencil = self._stencil
            assert stencil is not None
            self._compiled = torch.compile(
                functools.partial(_stencil_sum, stencil=stencil), dynamic=False
            )
        try:
            return self._compiled(flat)
        except Exception as exc:  # compilers fail in many ways; the run must go on
            self._compile_failed("the mixing kernel", exc)
            return None

    def _compile_failed(self, what: str, exc: Exception) -> None:
        warnings.warn(
            f"torch.compile of {what} failed ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); mixing with the eager "
            "shift kernel",
            RuntimeWarning,
            stacklevel=4,
        )
        self.kernel = "shift"

    def mix_map(
        self, fn: Elementwise, tensors: Sequence[torch.Tensor], scalars: Sequence[float] = ()
    ) -> tuple[torch.Tensor, ...]:
        """``(W y_0, y_1, ...)`` with ``(y_0, ...) = fn(*tensors, *scalars)``, one round.

        On a circulant graph with a state of at least 8 MB the update and the mix run
        fused, on blocks of columns, so that ``y_0`` is never stored: the library's own
        updates (DSGD, DmSGD, ED, EDM) through the C kernels of
        :mod:`decentopt.comm.native` (``kernel="auto"`` or ``"compiled"``), and with
        ``kernel="compiled"`` any other ``fn`` through ``torch.compile`` (it must then
        be elementwise, see :data:`~decentopt.comm.base.Elementwise`). Measured on
        (256, 10^5) float32 at one thread, an EDM step takes 1.2x its memory bound
        natively, 1.6x compiled and 2.2x updating and mixing separately
        (``benchmarks/bench_peers.py``). Otherwise ``fn`` runs once and its first
        output is mixed (with a warning under ``kernel="compiled"`` when nothing could
        be built; ``"auto"`` falls back silently).
        """
        if not tensors:
            raise ValueError("mix_map needs at least one tensor to update")
        first = tensors[0]
        if (
            self._circulant is None
            or self.kernel not in ("auto", "compiled")
            or first.numel() * first.element_size() < _FUSED_MIN_BYTES
            or any(t.shape != first.shape or t.dtype != first.dtype for t in tensors)
        ):
            return map_then_mix(self, fn, tensors, scalars)
        flats = [t.reshape(self.n, -1) for t in tensors]
        asked = self.kernel == "compiled"  # "auto" fuses only what needs no torch.compile
        fused = self._native_map(fn, flats, scalars, warn=asked)
        if fused is None and asked:
            fused = self._compiled_map(fn, flats, scalars)
        if fused is None:
            return map_then_mix(self, fn, tensors, scalars)
        payload = flats[0].shape[1] * flats[0].element_size()
        self.stats.add_round(*self._messages, payload, self._edges * payload)
        return tuple(o.view(first.shape) for o in fused)

    def _native_width(self, flat: torch.Tensor) -> int:
        """Columns per block of the fused kernel: rows of 32 KB; a far-reaching stencil
        (the kernel then keeps all n rows of a block) in blocks of at most 8 MB."""
        size, cols = flat.element_size(), flat.shape[1]
        width = _FUSED_ROW_BYTES // size
        if self.n <= 4 * self._reach + 1:
            width = min(width, _NATIVE_BLOCK_BYTES // (self.n * size))
        width = max(16, min(width, native.MAX_WIDTH) // 16 * 16)
        # as many blocks as a multiple of the threads, so that none waits for another
        threads = torch.get_num_threads()
        blocks = -(-cols // width)
        if blocks > 1:
            blocks = -(-blocks // threads) * threads
            width = max(16, -(-cols // (16 * blocks)) * 16)
        return width

    def _native_stencil(self, flat: torch.Tensor) -> tuple[tuple[int, float], ...] | None:
        """The circulant stencil when the C kernels may take ``flat``, else ``None``."""
        stencil = self._circulant
        if (
            stencil is None
            or not self._native_ok
            or not native.supports(flat)
            or len(stencil) > native.MAX_TERMS
        ):
            return None
        return stencil

    def _native_mix(self, flat: torch.Tensor, target: torch.Tensor) -> bool:
        """The C mix of a circulant graph (the caller checked the state is large);
        ``False`` when not used."""
        stencil = self._native_stencil(flat)
        if stencil is None or not (flat.is_contiguous() and target.is_contiguous()):
            return False
        # a short reach reads its neighbours' rows from cache: rows of up to 512 KB (the
        # threads share them out); a far-reaching stencil, a block of all rows from cache
        if self._reach <= 4:
            width = min(flat.shape[1], _NATIVE_MIX_ROW_BYTES // flat.element_size())
        else:
            width = self._native_width(flat)
        try:
            native.mix(flat, target, stencil, width)
        except RuntimeError:  # "auto" asked for nothing compiled: the eager kernel
            self._native_ok = False
            return False
        return True

    def _native_map(
        self, fn: Elementwise, flats: list[torch.Tensor], scalars: Sequence[float], warn: bool
    ) -> list[torch.Tensor] | None:
        """The C kernel of a registered update; ``None`` when there is none to use (with a
        warning, if ``warn``, when the kernels cannot be built)."""
        found = native.native_update(fn)
        stencil = self._native_stencil(flats[0])
        if found is None or stencil is None:
            return None
        update, nesterov, dampening = found
        if len(flats) != update.inputs or len(scalars) != update.scalars:
            return None
        width = self._native_width(flats[0])
        flats = [f.contiguous() for f in flats]
        outs = [torch.empty_like(flats[0]) for _ in range(update.outputs)]
        try:
            native.run(update, nesterov, dampening, flats, scalars, outs, stencil, width)
        except RuntimeError as exc:
            if warn:
                warnings.warn(
                    f"the native fused kernels are not available ({exc}); fusing with "
                    "torch.compile instead",
                    RuntimeWarning,
                    stacklevel=4,
                )
            self._native_ok = False
            return None
        return outs

    def _compiled_map(
        self, fn: Elementwise, flats: list[torch.Tensor], scalars: Sequence[float]
    ) -> list[torch.Tensor] | None:
        """``fn`` and the mix compiled by ``torch.compile`` into one kernel per block of
        columns (the neighbours' ``y_0`` recomputed, as the compiler cannot buffer it)."""
        n, cols = flats[0].shape
        dtype, device = flats[0].dtype, flats[0].device
        # the update's outputs (count, dtype) from one column, evaluated eagerly
        probe = fn(*(f[:, :1] for f in flats), *scalars)
        outs = [torch.empty((n, cols), dtype=y.dtype, device=device) for y in probe]
        # scalars as 0-d tensors: a new step size must not recompile
        values = [torch.tensor(float(s), dtype=dtype, device=device) for s in scalars]
        width = min(cols, max(16, _FUSED_ROW_BYTES // flats[0].element_size()))
        whole = cols - cols % width
        key = (_function_key(fn), len(flats), len(values), len(outs))
        if key not in self._fused:
            self._fused[key] = self._compile_fused(fn, len(flats) + len(values))
        kernel = self._fused[key]
        try:
            for a in range(0, whole, width):
                block = slice(a, a + width)
                kernel(*(f[:, block] for f in flats), *values, *(o[:, block] for o in outs))
        except Exception as exc:  # compilers fail in many ways; the run must go on
            self._compile_failed("the update and mix", exc)
            return None
        if whole < cols:  # the last, narrower block eagerly (no second compilation)
            rest = slice(whole, cols)
            ys = fn(*(f[:, rest] for f in flats), *scalars)
            self._shift_mix(ys[0], outs[0][:, rest])
            for out, y in zip(outs[1:], ys[1:], strict=True):
                out[:, rest].copy_(y)
        return outs

    def _compile_fused(self, fn: Elementwise, arity: int) -> Callable[..., None]:
        stencil = self._stencil
        assert stencil is not None

        def update_and_mix(*args: torch.Tensor) -> None:
            ys = fn(*args[:arity])
            outs = args[arity:]
            outs[0].copy_(_stencil_sum(ys[0], stencil))
            for out, y in zip(outs[1:], ys[1:], strict=True):
                out.copy_(y)

        # without the raised thresholds inductor stores an output the stencil reads
        # three times and reads it back: 1.9x the memory bound instead of 1.6x
        return torch.compile(
            update_and_mix,
            dynamic=False,
            options={"realize_reads_threshold": 64, "realize_opcount_threshold": 1000},
        )

    def _shift_mix(self, flat: torch.Tensor, target: torch.Tensor) -> None:
        """``(W z)_i = sum_o c_o z_{(i + o) mod n}``: one pass per offset, no matrix.

        Long rows go in blocks of rows about ``_BLOCK_BYTES`` large, so that a block
        of ``target`` stays in cache while every offset adds into it: measured on
        (256, 10^5) float32, 1.9x a copy instead of 2.9x (benchmarks/bench_peers.py).
        """
        n, stencil = self.n, self._stencil
        assert stencil is not None
        row_bytes = flat.shape[1] * flat.element_size()
        # states that fit in the last-level cache go in one block
        rows = n if row_bytes * n <= 8 * _BLOCK_BYTES else max(1, _BLOCK_BYTES // row_bytes)
        center = dict(stencil).get(0, 0.0)
        for a in range(0, n, rows):
            b = min(a + rows, n)
            block = target[a:b]
            torch.mul(flat[a:b], center, out=block)
            for o, w in stencil:
                if not o:
                    continue
                # rows a+o .. b+o (mod n), in at most two contiguous pieces
                start = (a + o) % n
                first = min(b - a, n - start)
                block[:first].add_(flat[start : start + first], alpha=w)
                if first < b - a:
                    block[first:].add_(flat[: b - a - first], alpha=w)

    def _gather_mix(
        self, this_round: GossipRound, t: int, flat: torch.Tensor, target: torch.Tensor
    ) -> None:
        """``(W_t z)_i = s_i z_i + sum_slot w_{slot,i} z_{peer(slot,i)}``: a read per slot."""
        schedule = self._schedule
        assert schedule is not None
        if schedule.period is None:  # drawn afresh every round
            form = this_round.torch_form(flat.dtype, flat.device)
        else:
            key = (t % schedule.period, flat.dtype, flat.device)
            if key not in self._gather_cache:
                self._gather_cache[key] = this_round.torch_form(flat.dtype, flat.device)
            form = self._gather_cache[key]
        self_weight, peers, weights = form
        torch.mul(flat, self_weight, out=target)
        key = (flat.shape, flat.dtype, flat.device)
        if self._gathered is None or self._gathered[0] != key:  # one buffer, reused every round
            self._gathered = (key, torch.empty_like(flat))
        gathered = self._gathered[1]
        for slot in range(peers.shape[0]):
            torch.index_select(flat, 0, peers[slot], out=gathered)
            target.addcmul_(gathered, weights[slot])

    def _sparse_mix(self, flat: torch.Tensor, target: torch.Tensor) -> None:
        for i, w_ii, nbrs in self._rows:
            row = target[i]
            torch.mul(flat[i], w_ii, out=row)
            for j, w_ij in nbrs:
                row.add_(flat[j], alpha=w_ij)

    def mean(self, z: torch.Tensor) -> torch.Tensor:
        return z.mean(dim=0, keepdim=True)

    def barrier(self, stage: str) -> None:
        """Nothing to wait for: every agent lives in this process."""
