"""Elementwise updates of the methods, and which of them have fused kernels.

These functions are the reference arithmetic of the update rules (DSGD's
``descend``, DmSGD's ``momentum_descend``, Exact Diffusion's ``correct``, EDM's
``edm_update``) and their building blocks. The table :data:`FUSED` says which of them
the backends can compute together with the mix of their first output; it lives
here, below both the algorithms and the mixers, so that neither imports the other
for it. A method of one's own that calls these functions through
``comm.mix_map`` gets the same fused kernels as the built-in ones.

Every function is row-wise: each output element depends only on the inputs'
elements at the same index. Scalars arrive as Python floats or as 0-d tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = [
    "FUSED",
    "FusedUpdate",
    "Scalar",
    "add_scaled",
    "correct",
    "descend",
    "edm_update",
    "fused_update",
    "heavy_ball",
    "interpolate",
    "momentum_descend",
    "with_momentum_options",
]

#: A scalar of an elementwise update: a Python float, or a 0-d tensor when the
#: update is compiled (so that a new step size does not recompile it).
Scalar = float | torch.Tensor


def add_scaled(x: torch.Tensor, y: torch.Tensor, a: Scalar) -> torch.Tensor:
    """``x + a y`` in one operation for a float ``a``, and for a 0-d tensor ``a`` too."""
    if isinstance(a, torch.Tensor):
        return x + a * y
    return torch.add(x, y, alpha=a)


def interpolate(a: torch.Tensor, b: torch.Tensor, w: Scalar) -> torch.Tensor:
    """``a + w (b - a)`` (``torch.lerp``); for a 0-d tensor ``w`` written out, which
    compiles to plainer code than ``lerp``'s two-sided formula."""
    if isinstance(w, torch.Tensor):
        return a + w * (b - a)
    return torch.lerp(a, b, w)


def heavy_ball(
    m: torch.Tensor, g: torch.Tensor, beta: Scalar, *, nesterov: bool, dampening: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One heavy-ball update: returns ``(m_new, direction)``.

    .. math::
        m^+ = \\beta m + s g, \\qquad d = m^+ \\ \\text{or}\\ \\beta m^+ + s g
        \\ (\\text{Nesterov}),\\qquad s = 1 - \\beta \\text{ if dampening else } 1.
    """
    step = interpolate if dampening else add_scaled  # beta m + (1 - beta) g, or beta m + g
    m_new = step(g, m, beta)
    return m_new, step(g, m_new, beta) if nesterov else m_new


@functools.cache
def with_momentum_options(
    update: Callable[..., tuple[torch.Tensor, ...]], nesterov: bool, dampening: bool
) -> Callable[..., tuple[torch.Tensor, ...]]:
    """``update`` with its ``nesterov`` and ``dampening`` keywords bound, made once per
    combination (a step should not build it; compiled code is kept per function)."""
    return functools.partial(update, nesterov=nesterov, dampening=dampening)


def descend(x: torch.Tensor, g: torch.Tensor, alpha: Scalar) -> tuple[torch.Tensor]:
    """DSGD's elementwise part, ``(x - alpha g,)``: what the agents mix."""
    return (add_scaled(x, g, -alpha),)


def momentum_descend(
    x: torch.Tensor,
    m: torch.Tensor,
    g: torch.Tensor,
    alpha: Scalar,
    beta: Scalar,
    *,
    nesterov: bool,
    dampening: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DmSGD's elementwise part: ``(x - alpha d, m+)``; the first is what the agents mix."""
    m_new, direction = heavy_ball(m, g, beta, nesterov=nesterov, dampening=dampening)
    return add_scaled(x, direction, -alpha), m_new


def correct(
    x: torch.Tensor, psi: torch.Tensor, direction: torch.Tensor, alpha: Scalar
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact Diffusion's adapt and correct, elementwise: ``(phi, psi+)`` with
    ``psi+ = x - alpha d`` and ``phi = psi+ + x - psi``."""
    psi_next = add_scaled(x, direction, -alpha)
    return torch.sub(x, psi).add_(psi_next), psi_next  # in place on a fresh temporary


def edm_update(
    x: torch.Tensor,
    psi: torch.Tensor,
    m: torch.Tensor,
    g: torch.Tensor,
    alpha: Scalar,
    beta: Scalar,
    *,
    nesterov: bool,
    dampening: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """EDM's elementwise part: ``(phi, psi+, m+)``; ``phi`` is what the agents mix."""
    m_new, direction = heavy_ball(m, g, beta, nesterov=nesterov, dampening=dampening)
    phi, psi_next = correct(x, psi, direction, alpha)
    return phi, psi_next, m_new


@dataclass(frozen=True)
class FusedUpdate:
    """An update the kernels compute: its kind (the kernels' name for it, in the order of
    :data:`decentopt.native.UPDATE_KINDS`) and how many tensors, scalars and outputs."""

    kind: str
    inputs: int
    scalars: int
    outputs: int


#: The updates with fused kernels, by the Python function each implements.
FUSED: dict[Callable[..., object], FusedUpdate] = {
    descend: FusedUpdate("descend", inputs=2, scalars=1, outputs=1),
    momentum_descend: FusedUpdate("momentum_descend", inputs=3, scalars=2, outputs=2),
    correct: FusedUpdate("correct", inputs=3, scalars=1, outputs=2),
    edm_update: FusedUpdate("edm", inputs=4, scalars=2, outputs=3),
}


def fused_update(fn: Callable[..., object]) -> tuple[FusedUpdate, bool, bool] | None:
    """``(update, nesterov, dampening)`` for a function of :data:`FUSED` (or a partial of
    one with only ``nesterov`` / ``dampening`` keywords); ``None`` otherwise."""
    keywords: dict[str, object] = {}
    if isinstance(fn, functools.partial):
        if fn.args or set(fn.keywords) - {"nesterov", "dampening"}:
            return None
        keywords, fn = dict(fn.keywords), fn.func
    update = FUSED.get(fn)
    if update is None:
        return None
    return update, bool(keywords.get("nesterov", False)), bool(keywords.get("dampening", True))
