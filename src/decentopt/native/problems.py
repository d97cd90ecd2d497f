"""The problems' own native kernels: the logistic problem's gradient in one pass over its
data, and the quadratic's with its Hessians read once.

:class:`decentopt.problems.Logistic` calls :func:`logistic_data_term` for its per-step
gradient on the CPU, :class:`decentopt.problems.Quadratic` :func:`quadratic_gradient` for
the block path's; where a kernel cannot run (no library, ``DECENTOPT_NATIVE=0``, a GPU
tensor, a gradient to be taken through it) it answers ``None`` and the problem computes
the same with torch. The library is loaded at the first call, not at import.
"""

from __future__ import annotations

import math

import torch

from decentopt.native import SUFFIX, run

__all__ = ["logistic_data_term", "logistic_term_and_loss", "quadratic_gradient"]

#: What a kernel of the problems reports when it fails.
_NO_MEMORY = "the native {} failed: a thread had no memory"


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
    done = logistic_term_and_loss(samples, x, scale, labels, with_loss=False)
    return None if done is None else done[0]


def logistic_term_and_loss(
    samples: torch.Tensor,
    x: torch.Tensor,
    scale: float,
    labels: torch.Tensor | None = None,
    *,
    with_loss: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """:func:`logistic_data_term` and, from the same pass over the samples, each row's loss
    ``sum_j log(1 + exp(-a_j . x))`` (float64, shape ``(..., R)``; ``None`` with
    ``with_loss=False``), or ``None`` where C cannot run. The loss is exact to a few units
    of float64's last place, also for large margins (torch's ``softplus`` returns ``-z``
    itself below ``z = -20``)."""
    tensors = (samples, x) if labels is None else (samples, x, labels)
    if (
        samples.dtype not in SUFFIX
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
    x = x.contiguous()
    labels = None if labels is None else labels.contiguous()
    out = torch.empty_like(x)
    loss = torch.zeros(x.shape[:-1], dtype=torch.float64) if with_loss else None
    stride, m, d = samples.shape[-3:]
    # groups, levels, stride, m, d as logistic.h declares them, then the buffers
    shape = (math.prod(samples.shape[:-2]), x.shape[-2] // max(stride, 1), max(stride, 1), m, d)
    given = (samples.data_ptr(), 0 if labels is None else labels.data_ptr(), x.data_ptr())
    written = (out.data_ptr(), None if loss is None else loss.data_ptr())
    args = (*shape, *given, *written, float(scale), torch.get_num_threads())
    ran = run("decentopt_logistic_gradient", x.dtype, _NO_MEMORY.format("logistic gradient"), *args)
    return (out, loss) if ran else None


def quadratic_gradient(
    H: torch.Tensor, x: torch.Tensor, b: torch.Tensor, term: torch.Tensor | None = None
) -> torch.Tensor | None:
    """``H x - b + term`` for every row, or ``None`` where C cannot run.

    ``H`` is ``(..., d, d)``, ``x``, ``b`` and ``term`` (``None``: no term) ``(..., d)``,
    all of one dtype (float32 or float64) on the CPU. The C kernel (``quadratic.h``) reads
    each Hessian once and sums each product in float64 in a fixed order, each matrix on
    one thread: the numbers depend on neither ``torch.get_num_threads()`` nor the CPU.
    """
    tensors = (H, x, b) if term is None else (H, x, b, term)
    if (
        H.dtype not in SUFFIX
        or H.ndim < 2
        or H.shape[-1] != H.shape[-2]
        or x.shape != H.shape[:-1]
        or any(t.shape != x.shape for t in tensors[2:])
        or any(t.dtype != H.dtype or t.device.type != "cpu" for t in tensors)
        or (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
    ):
        return None
    H, x, b = H.contiguous(), x.contiguous(), b.contiguous()
    term = None if term is None else term.contiguous()
    out = torch.empty_like(x)
    given = (H.data_ptr(), x.data_ptr(), b.data_ptr(), None if term is None else term.data_ptr())
    shape = (math.prod(x.shape[:-1]), x.shape[-1])
    args = (*shape, *given, out.data_ptr(), torch.get_num_threads())
    ran = run(
        "decentopt_quadratic_gradient", x.dtype, _NO_MEMORY.format("quadratic gradient"), *args
    )
    return out if ran else None
