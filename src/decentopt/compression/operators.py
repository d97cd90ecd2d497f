"""The compression operators (see :mod:`decentopt.compression` for their table)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import ClassVar

import torch

from decentopt._registry import Registry
from decentopt._schema import bounded, check_fields
from decentopt.compression._bits import (
    as_bytes,
    from_bytes,
    generator_for,
    kept_count,
    pack,
    row_keys,
    uniforms,
    unpack,
)


@dataclass(frozen=True)
class Compressor:
    """Base of the operators: rows along the last axis, one agent's rows as bytes."""

    name: ClassVar[str] = ""
    #: Seed of the operator's random choices (keyed further by agent, row and round).
    seed: int = bounded(0, minimum=0, kw_only=True)

    __post_init__ = check_fields

    def delta(self, k: int) -> float:
        """The contraction of rows of ``k`` entries: ``E||Q(x) - x||^2 <= (1 - delta) ||x||^2``
        for every ``x`` (Koloskova et al.'s delta, a lower bound where it depends on ``x``)."""
        raise NotImplementedError

    # -- one agent's rows, for the wire --------------------------------------
    def row_bytes(self, k: int, dtype: torch.dtype) -> int:
        """Bytes of one encoded row of ``k`` entries."""
        raise NotImplementedError

    def nbytes(self, rows: int, k: int, dtype: torch.dtype) -> int:
        """Bytes of one agent's message: ``rows`` rows of ``k`` entries."""
        return rows * self.row_bytes(k, dtype)

    def encode_row(self, row: torch.Tensor, agent: int, index: int, round_: int) -> torch.Tensor:
        raise NotImplementedError

    def decode_row(
        self, data: torch.Tensor, agent: int, index: int, round_: int, k: int, dtype: torch.dtype
    ) -> torch.Tensor:
        raise NotImplementedError

    def encode(self, rows: torch.Tensor, agent: int, round_: int) -> torch.Tensor:
        """One agent's ``(r, k)`` rows as ``nbytes(r, k, dtype)`` bytes (uint8)."""
        parts = [self.encode_row(row, agent, i, round_) for i, row in enumerate(rows)]
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)

    def decode(
        self, data: torch.Tensor, agent: int, round_: int, rows: int, k: int, dtype: torch.dtype
    ) -> torch.Tensor:
        """The ``(rows, k)`` values that :meth:`encode` of ``agent`` at ``round_`` stands for."""
        size = self.row_bytes(k, dtype)
        parts = data[: rows * size].view(rows, size)
        out = [self.decode_row(part, agent, i, round_, k, dtype) for i, part in enumerate(parts)]
        return torch.stack(out) if out else torch.empty(0, k, dtype=dtype, device=data.device)

    # -- all agents at once, for the simulator -------------------------------
    def compress(self, z: torch.Tensor, first_agent: int, round_: int) -> torch.Tensor:
        """``Q`` of every row of ``z`` (``(m, r, k)``: ``m`` agents from ``first_agent``,
        ``r`` rows each), decoded. The default goes through :meth:`encode` and
        :meth:`decode`; operators override it with a vectorised equal."""
        m, r, k = z.shape
        out = torch.empty_like(z)
        for a in range(m):
            agent = first_agent + a
            data = self.encode(z[a], agent, round_)
            out[a] = self.decode(data, agent, round_, r, k, z.dtype)
        return out

    def __str__(self) -> str:
        """The operator as :func:`decentopt.compression.parse` reads it: ``top_k(0.1)``."""
        args = [repr(getattr(self, f.name)) for f in fields(self) if not f.kw_only]
        args += [f"seed={self.seed}"] if self.seed else []
        return f"{self.name}({', '.join(args)})" if args else self.name


@dataclass(frozen=True)
class Identity(Compressor):
    """No compression: the row itself (its bytes as they are)."""

    name: ClassVar[str] = "none"

    def delta(self, k: int) -> float:
        return 1.0

    def row_bytes(self, k: int, dtype: torch.dtype) -> int:
        return k * dtype.itemsize

    def encode(self, rows: torch.Tensor, agent: int, round_: int) -> torch.Tensor:
        return as_bytes(rows)

    def decode(self, data, agent, round_, rows, k, dtype):  # type: ignore[no-untyped-def]
        return from_bytes(data, dtype).view(rows, k)

    def compress(self, z: torch.Tensor, first_agent: int, round_: int) -> torch.Tensor:
        return z.clone()


@dataclass(frozen=True)
class _Sparsifier(Compressor):
    #: no default: top_k alone would hide how much is dropped
    ratio: float = bounded(above=0, maximum=1, note="the fraction of entries kept")

    def delta(self, k: int) -> float:
        return kept_count(self.ratio, k) / k


@dataclass(frozen=True)
class TopK(_Sparsifier):
    """The ``ceil(ratio k)`` entries of largest magnitude; indices sent as int32."""

    name: ClassVar[str] = "top_k"

    def row_bytes(self, k: int, dtype: torch.dtype) -> int:
        return kept_count(self.ratio, k) * (4 + dtype.itemsize)

    def mask(self, rows: torch.Tensor) -> torch.Tensor:
        """The entries each row keeps: the ``ceil(ratio k)`` of largest magnitude, and among
        equal magnitudes at the threshold the lowest indices (NaN ranks above infinity).
        Magnitudes compare as the integers of their bits, which order them alike."""
        kept = kept_count(self.ratio, rows.shape[-1])
        keys = rows.abs().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[rows.itemsize])
        threshold = keys.topk(kept, dim=-1).values[..., -1:]
        above, tied = keys > threshold, keys == threshold
        left = kept - above.sum(dim=-1, keepdim=True)
        return above | (tied & (tied.cumsum(dim=-1) <= left))

    def encode_row(self, row: torch.Tensor, agent: int, index: int, round_: int) -> torch.Tensor:
        idx = self.mask(row.unsqueeze(0))[0].nonzero().squeeze(-1)  # ascending
        return torch.cat([as_bytes(idx.to(torch.int32)), as_bytes(row[idx])])

    def decode_row(self, data, agent, index, round_, k, dtype):  # type: ignore[no-untyped-def]
        kept = kept_count(self.ratio, k)
        idx = from_bytes(data[: 4 * kept], torch.int32).to(torch.int64)
        out = torch.zeros(k, dtype=dtype, device=data.device)
        return out.index_put_((idx,), from_bytes(data[4 * kept :], dtype))

    def compress(self, z: torch.Tensor, first_agent: int, round_: int) -> torch.Tensor:
        return torch.where(self.mask(z), z, torch.zeros((), dtype=z.dtype, device=z.device))


@dataclass(frozen=True)
class RandomK(_Sparsifier):
    """``ceil(ratio k)`` entries at indices drawn from the ``(seed, agent, row, round)``
    stream: only the values travel, the receiver redraws the indices."""

    name: ClassVar[str] = "random_k"

    def row_bytes(self, k: int, dtype: torch.dtype) -> int:
        return kept_count(self.ratio, k) * dtype.itemsize

    def _indices(self, agent: int, index: int, round_: int, k: int) -> torch.Tensor:
        gen = generator_for(self.seed, agent, index, round_)
        return torch.randperm(k, generator=gen)[: kept_count(self.ratio, k)]

    def encode_row(self, row: torch.Tensor, agent: int, index: int, round_: int) -> torch.Tensor:
        idx = self._indices(agent, index, round_, row.shape[0]).to(row.device)
        return as_bytes(row[idx])

    def decode_row(self, data, agent, index, round_, k, dtype):  # type: ignore[no-untyped-def]
        idx = self._indices(agent, index, round_, k).to(data.device)
        out = torch.zeros(k, dtype=dtype, device=data.device)
        return out.index_put_((idx,), from_bytes(data, dtype))

    def compress(self, z: torch.Tensor, first_agent: int, round_: int) -> torch.Tensor:
        m, r, k = z.shape
        rows = [self._indices(first_agent + a, i, round_, k) for a in range(m) for i in range(r)]
        idx = torch.stack(rows).view(m, r, -1).to(z.device)
        return torch.zeros_like(z).scatter_(-1, idx, z.gather(-1, idx))


@dataclass(frozen=True)
class QSGD(Compressor):
    """Stochastic quantisation to ``bits`` bits of magnitude plus a sign bit, rescaled
    by ``1/tau`` to be a contraction (the CHOCO paper's ``qsgd_s``)."""

    name: ClassVar[str] = "qsgd"
    bits: int = bounded(4, minimum=1, maximum=7, note="8 bits per entry with the sign")

    @property
    def levels(self) -> int:
        return (1 << self.bits) - 1

    def tau(self, k: int) -> float:
        s = self.levels
        return 1.0 + min(k / s**2, math.sqrt(k) / s)

    def delta(self, k: int) -> float:
        return 1.0 / self.tau(k)

    def row_bytes(self, k: int, dtype: torch.dtype) -> int:
        return dtype.itemsize + math.ceil(k * (self.bits + 1) / 8)

    # In float64 with one rounding per operation, so that the C kernels (compress.h)
    # compute the same codes; the norm is rounded to the rows' dtype, as it travels.
    def _norm(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(rows.double(), dim=-1, keepdim=True).to(rows.dtype)

    def _codes(self, row: torch.Tensor, norm: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """``2 l + [x < 0]`` with ``l`` the stochastic rounding of ``s |x| / ||x||`` (int32),
        by the uniforms of the rows' ``keys``."""
        uniform = uniforms(keys, row.shape[-1]).to(row.device)
        wide = norm.double()
        scale = self.levels / torch.where(wide > 0, wide, torch.ones_like(wide))
        level = (row.abs().double() * scale + uniform).floor_().clamp_(0, self.levels)
        return (level * 2).to(torch.int32) + (row < 0).to(torch.int32)

    def _values(self, codes: torch.Tensor, norm: torch.Tensor, k: int) -> torch.Tensor:
        unit = norm.double() / (self.levels * self.tau(k))
        magnitude = ((codes >> 1).double() * unit).to(norm.dtype)
        return torch.where((codes & 1).bool(), -magnitude, magnitude)

    def encode_row(self, row: torch.Tensor, agent: int, index: int, round_: int) -> torch.Tensor:
        norm = self._norm(row)
        codes = self._codes(row, norm, row_keys(self.seed, [agent], [index], round_)[0, 0])
        return torch.cat([as_bytes(norm.reshape(1)), pack(codes, self.bits + 1)])

    def decode_row(self, data, agent, index, round_, k, dtype):  # type: ignore[no-untyped-def]
        size = dtype.itemsize
        norm = from_bytes(data[:size], dtype)[0]
        return self._values(unpack(data[size:], self.bits + 1, k), norm, k)

    def compress(self, z: torch.Tensor, first_agent: int, round_: int) -> torch.Tensor:
        m, r, k = z.shape
        keys = row_keys(self.seed, range(first_agent, first_agent + m), range(r), round_)
        norm = self._norm(z)
        return self._values(self._codes(z, norm, keys), norm, k)


@dataclass(frozen=True)
class ScaledSign(Compressor):
    """``(||x||_1 / k) sign(x)``: one bit per entry and one scale per row."""

    name: ClassVar[str] = "sign"

    def delta(self, k: int) -> float:
        # ||x||_1^2 / (k ||x||^2): 1 for equal magnitudes, 1/k (its bound) for one entry
        return 1.0 / k

    def row_bytes(self, k: int, dtype: torch.dtype) -> int:
        return dtype.itemsize + math.ceil(k / 8)

    @staticmethod
    def scale(rows: torch.Tensor) -> torch.Tensor:
        """``||x||_1 / k`` per row, summed in float64 (as the C kernels do) and rounded."""
        return (rows.abs().double().sum(dim=-1, keepdim=True) / rows.shape[-1]).to(rows.dtype)

    def encode_row(self, row: torch.Tensor, agent: int, index: int, round_: int) -> torch.Tensor:
        scale = self.scale(row)
        return torch.cat([as_bytes(scale), pack((row < 0).to(torch.int64), 1)])

    def decode_row(self, data, agent, index, round_, k, dtype):  # type: ignore[no-untyped-def]
        size = dtype.itemsize
        scale = from_bytes(data[:size], dtype)[0]
        negative = unpack(data[size:], 1, k).bool()
        return torch.where(negative, -scale, scale)

    def compress(self, z: torch.Tensor, first_agent: int, round_: int) -> torch.Tensor:
        scale = self.scale(z)
        return torch.where(z < 0, -scale, scale)


#: Every operator by the name :func:`parse` reads.
COMPRESSORS: Registry[type[Compressor]] = Registry(
    "compression", ((cls.name, cls) for cls in (Identity, TopK, RandomK, QSGD, ScaledSign))
)
