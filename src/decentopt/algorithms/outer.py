"""Outer optimizers over any method: SlowMo and DiLoCo, ``make("dsgd", outer="nesterov(...)")``.

Every ``every`` steps of the method (its *inner* steps), the agents stop, average their
iterates over all agents (one all-reduce), and an outer optimizer treats the difference
between the point they all started the period from, ``x_sync``, and that average as a
gradient (the *pseudo-gradient*); then every agent restarts from the new ``x_sync``. The
inner method may be any rule and gossip: DSGD with exact gossip gives a decentralized
SlowMo, ``gossip="local(N)"`` with ``N`` beyond the run (no gossip at all between outer
steps) is DiLoCo, and ``wrap(AdamW(...), "dsgd", comm, outer=...)`` takes AdamW's steps
as the inner ones (:mod:`decentopt.distributed.wrap`).

The state of an outer optimizer is two tensors of the iterate's shape, nested in the
method's state (:class:`~decentopt.algorithms.MethodState` ``.outer``) under the names
``outer_x`` (``x_sync``) and ``outer_m`` (the outer momentum); its counter is the method's
``t``. So the divergence guard, checkpoints and the optimizer's ``state_dict`` hold them
as they hold every field of the method.

:data:`OUTERS` holds the outer optimizers by name; :func:`parse` reads their text
(``"nesterov(lr=0.7, beta=0.9, every=500)"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from decentopt._registry import Registry
from decentopt._schema import bounded, check_fields, read_call
from decentopt.algorithms.gossips.base import Fields
from decentopt.algorithms.gossips.local import count_all_reduce
from decentopt.communicator import Communicator

__all__ = ["OUTERS", "Nesterov", "Outer", "parse", "register_outer"]


@dataclass(frozen=True)
class Outer:
    """Base of the outer optimizers: a frozen dataclass of hyper-parameters whose ``every``
    says how many inner steps an outer step follows, with pure ``init`` and ``step``."""

    #: The name in text and in :data:`OUTERS`.
    name: ClassVar[str] = ""

    every: int = bounded(minimum=1, kw_only=True, note="the inner steps per outer step")

    __post_init__ = check_fields

    def fires(self, t: int) -> bool:
        """Whether an outer step follows inner step ``t`` (``(t + 1) mod every = 0``)."""
        return (t + 1) % self.every == 0

    def refuses(self, rule: Any) -> str:
        """Why ``rule`` cannot run under an outer optimizer ("" when it can)."""
        if rule.asynchronous:
            return (
                f"{rule.name}'s agents run at their own pace and never meet at one step; "
                "every synchronous method takes one"
            )
        if not rule.mixes:
            return (
                f"{rule.name} relays messages whose sums carry each agent's iterate, which a "
                "restart from x_sync would not move; every method that mixes takes one"
            )
        return ""

    def init(self, x0: torch.Tensor) -> Fields:
        """``x_sync = x0`` and the outer momentum at zero."""
        return {"outer_x": x0.clone(), "outer_m": torch.zeros_like(x0)}

    def step(self, fields: Fields, x: torch.Tensor, comm: Communicator) -> Fields:
        """The outer state after an outer step from the iterates ``x`` (``outer_x`` is where
        every agent restarts)."""
        raise NotImplementedError

    def label(self) -> str:
        """The outer optimizer in text, as :func:`parse` reads it."""
        return self.name


@dataclass(frozen=True)
class Nesterov(Outer):
    """Outer SGD with Nesterov momentum on the pseudo-gradient (SlowMo, DiLoCo's outer
    step); plain outer SGD with ``beta = 0``. After inner step ``t`` with
    ``(t + 1) mod H = 0`` (``H = every``), from the iterates ``X`` of the ``n`` agents:

    .. math::
        \\Delta &= x_{\\text{sync}} - \\tfrac{1}{n} \\textstyle\\sum_i x_i
            \\qquad \\text{(one all-reduce)}, \\\\
        m &\\leftarrow \\beta\\, m + \\Delta, \\qquad m^{(0)} = 0, \\\\
        x_{\\text{sync}} &\\leftarrow x_{\\text{sync}} - \\eta\\, (\\beta\\, m + \\Delta),
            \\qquad x_{\\text{sync}}^{(0)} = x^{(0)}, \\\\
        x_i &\\leftarrow x_{\\text{sync}} \\quad \\text{for every agent } i.

    This is ``torch.optim.SGD(lr=eta, momentum=beta, nesterov=True)`` on ``Delta``, as
    DiLoCo uses it (Douillard et al. 2023, Algorithm 1: inner AdamW, ``eta = 0.7``,
    ``beta = 0.9``, ``H`` = 500). With ``eta = 1`` and ``beta = 0`` it is the inner method
    averaged over all agents every ``H`` steps (Local SGD and Gossip-PGA's global average;
    tested). A rule that keeps copies of its iterate (Exact Diffusion's ``psi``, K-GT's
    ``x_round``: its ``from_x0`` fields) has them moved with it, by ``x_sync - x_i``, so
    its correction ``x - psi`` is kept across the restart. The inner state otherwise
    (momentum buffers, trackers, a base optimizer's statistics) carries on, as in DiLoCo.

    Departures: SlowMo (Wang, Tantia, Ballas & Rabbat, ICLR 2020, Algorithm 1) takes
    heavy-ball momentum, ``u <- beta u + Delta / gamma``, ``x_sync <- x_sync - alpha gamma u``,
    with the inner step size ``gamma``; with a constant ``gamma`` that is this recursion
    with ``eta = alpha`` and no look-ahead term ``beta m``, which this form adds (Nesterov,
    as DiLoCo and SlowMo's released code offer). The average is the exact one over all
    agents; a gossip of the pseudo-gradient (averaging with neighbours only) is not
    offered here: each agent would then keep its own ``x_sync``, and an outer step would
    be a second round on a step that may gossip already.

    References: J. Wang, V. Tantia, N. Ballas, M. Rabbat, "SlowMo: Improving
    communication-efficient distributed SGD with slow momentum", ICLR 2020; A. Douillard
    et al., "DiLoCo: Distributed low-communication training of language models", 2023.
    """

    lr: float = bounded(0.7, above=0, note="the outer step size")
    beta: float = bounded(0.9, minimum=0, below=1, note="the outer momentum")

    name: ClassVar[str] = "nesterov"

    def step(self, fields: Fields, x: torch.Tensor, comm: Communicator) -> Fields:
        mean = comm.mean(x)
        count_all_reduce(comm, [x])
        sync, m = fields["outer_x"], fields["outer_m"]
        delta = sync - mean
        m = m * self.beta + delta
        sync = sync - self.lr * (m * self.beta + delta)
        return {"outer_x": sync, "outer_m": m}

    def label(self) -> str:
        return f"{self.name}(lr={self.lr:g}, beta={self.beta:g}, every={self.every})"


#: The outer optimizers by name (a plugin adds its own with :func:`register_outer`).
OUTERS: Registry[type[Outer]] = Registry("outer optimizer")
#: Class decorator: add an :class:`Outer` under its ``name``.
register_outer = OUTERS.register
register_outer(Nesterov)

_EXAMPLE = "'nesterov(lr=0.7, beta=0.9, every=500)'"


def parse(spec: str | Outer) -> Outer:
    """An outer optimizer from text (``"nesterov(lr=0.7, beta=0.9, every=500)"``; ``lr``
    and ``beta`` may be given by position) or an outer optimizer itself; errors are one
    line."""
    if isinstance(spec, Outer):
        return spec
    _, cls, kwargs = read_call(
        spec, OUTERS, "outer optimizer", _EXAMPLE, "an outer optimizer of decentopt.algorithms"
    )
    if "every" not in kwargs:
        raise TypeError(
            f"outer optimizer {spec!r}: give every=H, the inner steps between outer steps, "
            f"e.g. {_EXAMPLE}"
        )
    return cls(**kwargs)
