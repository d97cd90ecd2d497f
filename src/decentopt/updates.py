"""Elementwise updates of the methods, and which of them have fused kernels.

These functions are the reference arithmetic of the update rules (DSGD's
``descend``, DmSGD's ``momentum_descend``, Exact Diffusion's ``correct``, EDM's
``edm_update``) and their building blocks. A rule declares which of them its step uses
(:class:`FusedUpdate`, its ``fused`` attribute) and hands that declaration to
``comm.mix_map``: the backends compute a declared update together with the mix of its
first output, and the driver reads the declaration to run many steps in one kernel. It
lives here, below both the algorithms and the mixers, so that neither imports the other
for it. A method of one's own that declares one of these updates gets the same fused
kernels as the built-in ones.

Every function is row-wise: each output element depends only on the inputs'
elements at the same index. Scalars arrive as Python floats or as 0-d tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from decentopt._renamed import renamed

__all__ = [
    "KINDS",
    "FusedUpdate",
    "Scalar",
    "add_scaled",
    "correct",
    "descend",
    "edm_update",
    "heavy_ball",
    "interpolate",
    "momentum_descend",
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


#: The updates the kernels compute, by the kernels' name for them, in the kernels' order:
#: the reference function, the kernels' names of the state it reads between the iterate
#: and the direction (the built-in rules' fields), and its scalars; the kinds that take
#: ``beta`` take the momentum switches ``nesterov`` and ``dampening`` too.
KINDS: dict[
    str, tuple[Callable[..., tuple[torch.Tensor, ...]], tuple[str, ...], tuple[str, ...]]
] = {
    "descend": (descend, (), ("lr",)),
    "momentum_descend": (momentum_descend, ("m",), ("lr", "beta")),
    "correct": (correct, ("psi",), ("lr",)),
    "edm": (edm_update, ("psi", "m"), ("lr", "beta")),
}


@dataclass(frozen=True)
class FusedUpdate:
    """The elementwise update a rule's step hands to ``comm.mix_map``, declared by the rule
    (its ``fused`` attribute) so that the kernels and the driver read what it computes
    instead of finding out.

    ``kind``: which update of :data:`KINDS`; ``reads``: the rule's state fields it reads
    between the iterate ``x`` (first) and the direction (last), whose new values it returns
    after the mixed iterate, in the same order; ``scalars``: the rule's hyper-parameters it
    takes (``"lr"``: the step size of the iteration, ``lr_at(t)``); ``nesterov`` and
    ``dampening``: the momentum switches of the kinds that have them. Calling it computes
    the update (``KINDS[kind]``) without mixing.

    >>> update = FusedUpdate("edm", reads=("psi", "m"), scalars=("lr", "beta"))
    >>> update.inputs, update.outputs
    (4, 3)
    """

    kind: str
    reads: tuple[str, ...] = ()
    scalars: tuple[str, ...] = ("lr",)
    nesterov: bool = False
    dampening: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"no fused update {self.kind!r}; the kinds are {', '.join(KINDS)}")
        if len(self.scalars) != len(KINDS[self.kind][2]):
            raise ValueError(
                f"the fused update {self.kind!r} takes {len(KINDS[self.kind][2])} scalar(s); "
                f"got {self.scalars}"
            )

    @property
    def inputs(self) -> int:
        """The tensors it takes: the iterate, :attr:`reads`, the direction."""
        return len(self.reads) + 2

    @property
    def outputs(self) -> int:
        """The tensors it returns: what is mixed, then the new values of :attr:`reads`."""
        return len(self.reads) + 1

    def __call__(self, *args: object) -> tuple[torch.Tensor, ...]:
        fn, _, scalars = KINDS[self.kind]
        if "beta" in scalars:
            return fn(*args, nesterov=self.nesterov, dampening=self.dampening)
        return fn(*args)


def _with_momentum_options(
    update: Callable[..., object], nesterov: bool, dampening: bool
) -> object:
    return functools.partial(update, nesterov=nesterov, dampening=dampening)


def _declared() -> dict[Callable[..., object], FusedUpdate]:
    """Each kind by its function, with the kernels' names of what it reads (rules' fields)."""
    return {fn: FusedUpdate(kind, *rest) for kind, (fn, *rest) in KINDS.items()}


def _fused_update(fn: Callable[..., object]) -> tuple[FusedUpdate, bool, bool] | None:
    keywords: dict[str, object] = {}
    if isinstance(fn, functools.partial):
        if fn.args or set(fn.keywords) - {"nesterov", "dampening"}:
            return None
        keywords, fn = dict(fn.keywords), fn.func
    declared = _declared().get(fn)
    if declared is None:
        return None
    return declared, bool(keywords.get("nesterov")), bool(keywords.get("dampening", True))


__getattr__ = renamed(
    "decentopt.updates",
    {
        "FUSED": (
            _declared,
            "a rule declares its update (FusedUpdate); the kinds are decentopt.updates.KINDS",
        ),
        "fused_update": (
            lambda: _fused_update,
            "a rule declares its update (FusedUpdate), which the kernels read",
        ),
        "with_momentum_options": (
            lambda: _with_momentum_options,
            "declare the update, FusedUpdate(kind, reads, scalars, nesterov=, dampening=)",
        ),
    },
)
