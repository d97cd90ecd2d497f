"""Single-process communicator: all n agents' rows live in one tensor.

``W Z`` for ``Z`` of shape ``(n, ...)`` is computed on ``Z`` folded to ``(n, k)`` by a
mixer (:mod:`decentopt.comm.mixers`), chosen when the communicator is built:
``kernel="auto"`` (default) gives each state to the first mixer of its chain that
prefers it -- for a ring or exponential graph the C kernels for CPU states from
8 MB, the shift kernel otherwise; a GEMM for small or dense graphs; the gather
kernel for time-varying graphs -- and ``kernel=NAME`` uses that mixer alone.

:meth:`SimulatedCommunicator.mix_map` lets the mixer fuse an algorithm's
elementwise update with the mix where it has a kernel for it (the C kernels for
DSGD, DmSGD, ED and EDM; ``kernel="compiled"`` for any update), so that the mixed
quantity is never written to memory. :meth:`SimulatedCommunicator.choco_round` runs
CHOCO-gossip's whole round (compress, update the public copies, mix) in the C
kernels where the mixer of the state is the native one, and says why not otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from decentopt.comm.mixers import Mixer, NativeMixer, chain
from decentopt.communicator import CommStats, Elementwise, Shared, map_then_mix, rows_of
from decentopt.compression import Compressor
from decentopt.compression import parse as parse_compression
from decentopt.topology import Network, TopologySchedule

__all__ = ["SimulatedCommunicator"]


class SimulatedCommunicator(Shared):
    """Communicator over all agents of a :class:`Topology` (or schedule) in one process.

    Args:
        topology: the graph (``W``), or a :class:`TopologySchedule` (``W_t`` by round).
        kernel: ``"auto"`` or the name of a mixer of :data:`decentopt.comm.mixers.MIXERS`
            (``"dense"``, ``"sparse"``, ``"csr"``, ``"shift"``, ``"compiled"``,
            ``"gather"``, ``"native"``).
    """

    def __init__(self, topology: Network, kernel: str = "auto") -> None:
        if isinstance(topology, TopologySchedule) and kernel not in ("auto", "gather"):
            raise ValueError(
                f"a time-varying topology mixes with its own per-round kernel; leave "
                f"kernel='auto' (got {kernel!r})"
            )
        self.topology = topology
        self.kernel = kernel
        self.n = topology.n
        self._agents = range(topology.n)
        self.stats = CommStats()
        self.mixers: tuple[Mixer, ...] = chain(topology, kernel)
        #: What ran the last compressed round: a mixer's name (its fused kernel) or why
        #: none did (the round was compressed, then mixed); "" before any.
        self.compressed_kernel = ""

    def mixer_for(self, flat: torch.Tensor) -> Mixer:
        """The mixer that takes a folded ``(n, k)`` state."""
        if self.kernel == "auto":
            return next((m for m in self.mixers if m.preferred(flat)), self.mixers[-1])
        mixer = self.mixers[0]
        why = mixer.supports(flat)
        if why:
            raise ValueError(f"kernel={self.kernel!r} cannot mix this state: {why}")
        return mixer

    def add_rounds(self, rounds: int, payload: int) -> None:
        """Count ``rounds`` rounds of ``payload`` bytes per message, mixed elsewhere (the
        driver's native block path runs many steps in one call)."""
        for _ in range(rounds):
            self._count(payload)

    def _fold(self, z: torch.Tensor) -> torch.Tensor:
        if not isinstance(z, torch.Tensor) or z.ndim < 1 or z.shape[0] != self.n:
            shape = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
            raise ValueError(
                f"mix expects a tensor with the agent axis first of size n = {self.n}; got {shape}"
            )
        if not (z.is_floating_point() or z.is_complex()):
            raise TypeError(
                f"mix needs a floating-point tensor (mixing averages); got {z.dtype}: convert "
                "it with .float() or .double()"
            )
        return z.reshape(self.n, -1)

    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``W z`` (``W_t z`` at round ``t = stats.rounds``); with ``out`` (same shape,
        contiguous) the result is written there.

        Writing into a caller's buffer avoids allocating (and page-faulting) a fresh
        tensor per round, which dominates for large models. An ``out`` that shares
        memory with ``z`` is allowed: ``z`` is then copied first.
        """
        flat = self._fold(z)
        target = None
        if out is not None:
            if out.shape != z.shape or not out.is_contiguous() or out.dtype != z.dtype:
                raise ValueError(
                    "mix(z, out=...) needs a contiguous out of the same shape and dtype as z; "
                    f"got {tuple(out.shape)} {out.dtype} for {tuple(z.shape)} {z.dtype}"
                )
            if out.untyped_storage().data_ptr() == z.untyped_storage().data_ptr():
                flat = flat.clone()  # out overlaps z: mixing in place would read written rows
            target = out.view(self.n, -1)
        mixed = self.mixer_for(flat).mix(flat, target, self.stats.rounds)
        self._count(flat.shape[1] * flat.element_size())
        return mixed.view(z.shape)

    def mix_map(
        self, fn: Elementwise, tensors: Sequence[torch.Tensor], scalars: Sequence[float] = ()
    ) -> tuple[torch.Tensor, ...]:
        """``(W y_0, y_1, ...)`` with ``(y_0, ...) = fn(*tensors, *scalars)``, one round.

        The mixer that takes the state may fuse ``fn`` with the mix (see the module
        docstring); otherwise ``fn`` runs once and its first output is mixed.
        """
        if not tensors:
            raise ValueError("mix_map needs at least one tensor to update")
        flats = [self._fold(t) for t in tensors]
        fused = self.mixer_for(flats[0]).mix_map(fn, flats, scalars, self.stats.rounds)
        if fused is None:
            return map_then_mix(self, fn, tensors, scalars)
        self._count(flats[0].shape[1] * flats[0].element_size())
        return tuple(o.view(tensors[0].shape) for o in fused)

    def mix_compressed(
        self, z: torch.Tensor, compression: str | Compressor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q(z), W Q(z))``: every agent's rows compressed (decoded values), then mixed in one
        round whose messages are counted at their compressed size."""
        codec = parse_compression(compression)
        rows = rows_of(self._fold(z), z)
        q = codec.compress(rows, 0, self.stats.rounds)
        flat = q.view(self.n, -1)
        mixed = self.mixer_for(flat).mix(flat, None, self.stats.rounds)
        self._count(codec.nbytes(rows.shape[1], rows.shape[2], z.dtype))
        return q.view(z.shape), mixed.view(z.shape)

    def choco_round(
        self,
        z: torch.Tensor,
        hat: torch.Tensor,
        s: torch.Tensor,
        compression: str | Compressor,
        gamma: float,
        descent: tuple[torch.Tensor, float] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | str:
        """CHOCO-gossip's round in one kernel where the mixer of ``z`` has one:
        ``(z + gamma (s' - hat'), hat', s')`` with ``hat' = hat + Q(z - hat)`` and
        ``s' = s + W Q(z - hat)``, one round counted at the compressed size; otherwise
        why not, and nothing is done (the caller uses :meth:`mix_compressed`). The native
        kernels take rings and other circulant graphs (see :mod:`decentopt.comm.mixers`).

        With ``descent = (g, alpha)``, ``z`` is the iterate ``x`` and the round is that of
        DSGD's update ``x - alpha g`` (:func:`decentopt.updates.descend`), computed in the
        same kernel and never written."""
        codec = parse_compression(compression)
        flat = self._fold(z)
        rows = rows_of(flat, z)
        if hat.shape != z.shape or s.shape != z.shape:
            return "the public copies have another shape than the state"
        if descent is not None and descent[0].shape != z.shape:
            return "the descent direction has another shape than the state"
        mixer = self.mixer_for(flat)
        if not isinstance(mixer, NativeMixer):
            self.compressed_kernel = f"the {mixer.name} mixer has no fused compressed round"
            return self.compressed_kernel
        folded = None if descent is None else (descent[0].reshape(flat.shape), descent[1])
        done = mixer.choco(
            codec,
            flat,
            hat.reshape(flat.shape),
            s.reshape(flat.shape),
            rows.shape[2],
            gamma,
            self.stats.rounds,
            folded,
        )
        self.compressed_kernel = done if isinstance(done, str) else mixer.name
        if isinstance(done, str):
            return done
        self._count(codec.nbytes(rows.shape[1], rows.shape[2], z.dtype))
        return tuple(t.view(z.shape) for t in done)  # type: ignore[return-value]

    def mean(self, z: torch.Tensor) -> torch.Tensor:
        return z.mean(dim=0, keepdim=True)

    def barrier(self, stage: str) -> None:
        """Nothing to wait for: every agent lives in this process."""

    def __repr__(self) -> str:
        names = "/".join(m.name for m in self.mixers)
        return f"SimulatedCommunicator({self.topology.name}, kernel={self.kernel!r}: {names})"
