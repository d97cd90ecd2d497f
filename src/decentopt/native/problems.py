"""The problems' own native kernels: the logistic problem's gradient in one pass over its data.

:class:`decentopt.problems.Logistic` calls :func:`logistic_data_term` for its per-step
gradient on the CPU; where the kernel cannot run (no library, ``DECENTOPT_NATIVE=0``,
a GPU tensor, a gradient to be taken through it) it answers ``None`` and the problem
computes the same sum with torch. The library is loaded at the first call, not at import.
"""

from __future__ import annotations

import torch

from decentopt.native import library

__all__ = ["logistic_data_term"]

_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


def logistic_data_term(data: torch.Tensor, x: torch.Tensor, scale: float) -> torch.Tensor | None:
    """``sum_j scale * sigmoid(-a_j . x) a_j`` for every row, or ``None`` where C cannot run.

    ``data`` holds rows of samples ``a_j`` as ``(..., m, d)`` and ``x`` one point per
    row, ``(..., d)``, both of one dtype (float32 or float64); the result has ``x``'s
    shape and dtype. The C kernel (``logistic.h``) reads each row's data once and sums
    in float64 in a fixed order, each row on one thread: the numbers do not depend on
    ``torch.get_num_threads()``.
    """
    suffix = _SUFFIX.get(data.dtype)
    if (
        suffix is None
        or x.dtype != data.dtype
        or data.device.type != "cpu"
        or x.device.type != "cpu"
        or data.shape[:-2] != x.shape[:-1]
        or data.shape[-1] != x.shape[-1]
        or not data.is_contiguous()
        or (torch.is_grad_enabled() and (x.requires_grad or data.requires_grad))
    ):
        return None
    lib, _ = library()
    if lib is None:
        return None
    x = x.contiguous()
    out = torch.empty_like(x)
    m, d = data.shape[-2], data.shape[-1]
    status = lib.function("decentopt_logistic_gradient", suffix)(
        x.numel() // max(d, 1), m, d, data.data_ptr(), x.data_ptr(), out.data_ptr(),
        float(scale), torch.get_num_threads(),
    )  # fmt: skip
    if status:
        raise RuntimeError("the native logistic gradient failed: a thread had no memory")
    return out
