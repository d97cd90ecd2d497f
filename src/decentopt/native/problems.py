"""The problems' own native kernels: the logistic problem's gradient in one pass over its data.

:class:`decentopt.problems.Logistic` calls :func:`logistic_data_term` for its per-step
gradient on the CPU; where the kernel cannot run (no library, ``DECENTOPT_NATIVE=0``,
a GPU tensor, a gradient to be taken through it) it answers ``None`` and the problem
computes the same sum with torch. The library is loaded at the first call, not at import.
"""

from __future__ import annotations

import math

import torch

from decentopt.native import library

__all__ = ["logistic_data_term"]

_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


def logistic_data_term(
    samples: torch.Tensor, x: torch.Tensor, scale: float, labels: torch.Tensor | None = None
) -> torch.Tensor | None:
    """``sum_j scale * sigmoid(-a_j . x) a_j`` for every row, or ``None`` where C cannot run.

    ``x`` holds one point per row, ``(..., R, d)``; ``samples`` ``(..., S, m, d)`` the rows'
    samples, shared by the rows ``s, s + S, s + 2 S, ...`` (``R`` a multiple of ``S``:
    heterogeneity levels that differ only in labels), and ``labels`` ``(..., R, m)`` the
    rows' labels ``v_j = +-1`` (``None``: all +1), so that ``a_j = v_j u_j``; all of one
    dtype (float32 or float64). The result has ``x``'s shape and dtype. The C kernel
    (``logistic.h``) reads each group's samples once for all its rows and sums in float64
    in a fixed order, each group on one thread: the numbers do not depend on
    ``torch.get_num_threads()``, and equal those of the products with ``a``.
    """
    suffix = _SUFFIX.get(samples.dtype)
    tensors = (samples, x) if labels is None else (samples, x, labels)
    if (
        suffix is None
        or samples.ndim < 3
        or x.ndim != samples.ndim - 1
        or samples.shape[:-3] != x.shape[:-2]
        or samples.shape[-1] != x.shape[-1]
        or x.shape[-2] % max(samples.shape[-3], 1)
        or (samples.shape[-3] == 0) != (x.shape[-2] == 0)
        or (labels is not None and labels.shape != (*x.shape[:-1], samples.shape[-2]))
        or any(t.dtype != samples.dtype or t.device.type != "cpu" for t in tensors)
        or not samples.is_contiguous()
        or (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
    ):
        return None
    lib, _ = library()
    if lib is None:
        return None
    x = x.contiguous()
    labels = None if labels is None else labels.contiguous()
    out = torch.empty_like(x)
    stride, m, d = samples.shape[-3:]
    status = lib.function("decentopt_logistic_gradient", suffix)(
        math.prod(samples.shape[:-2]), x.shape[-2] // max(stride, 1), max(stride, 1), m, d,
        samples.data_ptr(), 0 if labels is None else labels.data_ptr(), x.data_ptr(),
        out.data_ptr(), float(scale), torch.get_num_threads(),
    )  # fmt: skip
    if status:
        raise RuntimeError("the native logistic gradient failed: a thread had no memory")
    return out
