"""Seeded generators and bit packing shared by the compression operators."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

MASK = (1 << 64) - 1


def _splitmix_array(value: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of every entry of a uint64 array (numpy's products wrap mod
    2^64)."""
    value = value + np.uint64(0x9E3779B97F4A7C15)
    value = (value ^ (value >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    value = (value ^ (value >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return value ^ (value >> np.uint64(31))


def row_keys(seed: int, agents: Sequence[int], rows: Sequence[int], round_: int) -> torch.Tensor:
    """The 64-bit keys of ``(seed, agent, row, round)`` for each of ``rows`` of each of
    ``agents``: an ``(agents, rows)`` int64 tensor (the keys' bits), hashed in arrays (a
    round's keys in microseconds)."""

    def bits(values: Sequence[int] | int) -> np.ndarray:
        return np.array([int(v) & MASK for v in np.atleast_1d(values)], dtype=np.uint64)

    key = _splitmix_array(bits(seed))  # the seed's part, then the agent's, row's, round's
    key = _splitmix_array(key ^ bits(agents)[:, None])
    key = _splitmix_array(key ^ bits(rows)[None, :])
    key = _splitmix_array(key ^ bits(round_))
    return torch.from_numpy(np.ascontiguousarray(key).view(np.int64))


def generator_for(seed: int, agent: int, row: int, round_: int) -> torch.Generator:
    """A CPU generator seeded by the key of ``(seed, agent, row, round)`` (hashed, so
    nearby keys give unrelated streams; :func:`row_keys`)."""
    key = int(row_keys(seed, [agent], [row], round_)[0, 0]) & MASK
    return torch.Generator().manual_seed(key >> 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A bijection of 32-bit values held in int64 (products stay below 2^63)."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    return x ^ (x >> 16)


def uniforms(keys: torch.Tensor, k: int) -> torch.Tensor:
    """Uniforms on ``[0, 1)`` in float64, ``k`` per key (``keys``: int64 of any shape,
    the result that shape and ``k``): entry ``j`` of a row is a 32-bit hash of ``(key, j)``
    times ``2^-32``, a counter-based stream that the C kernels compute alike, element by
    element and in any order (``compress.h``). For one key the hashes of ``j < 2^32``
    are distinct."""
    keys = keys.unsqueeze(-1)
    j = torch.arange(k, dtype=torch.int64, device=keys.device)
    low, high = keys & 0xFFFFFFFF, (keys >> 32) & 0xFFFFFFFF
    return _mix(_mix(j ^ low) ^ high).double() * 2.0**-32


def pack(codes: torch.Tensor, width: int) -> torch.Tensor:
    """Unsigned integer codes below ``2**width`` (``width <= 8``) as a little-endian bit
    stream of bytes (numpy's bit packing on the CPU, where messages are staged)."""
    if codes.device.type == "cpu":  # each code's 8 bits, its low ``width`` kept, repacked
        small = codes.to(torch.uint8).numpy().reshape(-1)
        bits = np.unpackbits(small, bitorder="little").reshape(-1, 8)[:, :width]
        return torch.from_numpy(np.packbits(bits.reshape(-1), bitorder="little"))
    return pack_with_torch(codes, width)


def pack_with_torch(codes: torch.Tensor, width: int) -> torch.Tensor:
    """:func:`pack` in torch operations, for tensors on an accelerator."""
    shifts = torch.arange(width, device=codes.device)
    bits = ((codes.to(torch.int64).unsqueeze(-1) >> shifts) & 1).reshape(-1)
    bits = torch.nn.functional.pad(bits, (0, -bits.numel() % 8))  # whole bytes
    weights = 1 << torch.arange(8, device=codes.device)
    return (bits.view(-1, 8) * weights).sum(dim=1).to(torch.uint8)


def unpack(data: torch.Tensor, width: int, count: int) -> torch.Tensor:
    """The ``count`` codes of :func:`pack` (int32)."""
    if data.device.type == "cpu":  # each code's bits padded to a byte, packed as one
        raw = data.contiguous().numpy()
        bits = np.zeros((count, 8), dtype=np.uint8)
        bits[:, :width] = np.unpackbits(raw, count=count * width, bitorder="little").reshape(
            count, width
        )
        return torch.from_numpy(np.packbits(bits.reshape(-1), bitorder="little").astype(np.int32))
    return unpack_with_torch(data, width, count)


def unpack_with_torch(data: torch.Tensor, width: int, count: int) -> torch.Tensor:
    """:func:`unpack` in torch operations, for tensors on an accelerator."""
    bits = (data.to(torch.int64).unsqueeze(-1) >> torch.arange(8, device=data.device)) & 1
    bits = bits.reshape(-1)[: count * width].view(count, width)
    return (bits << torch.arange(width, device=data.device)).sum(dim=1).to(torch.int32)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def from_bytes(data: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if data.storage_offset() % dtype.itemsize:  # a slice of a packed message: realign
        data = data.clone()
    return data.contiguous().view(dtype)


def kept_count(ratio: float, k: int) -> int:
    """Entries kept of a row of ``k``: ``ceil(ratio k)``, at least one."""
    return max(1, min(k, math.ceil(ratio * k - 1e-9)))
