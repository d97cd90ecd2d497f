"""OSGP: Overlap Stochastic Gradient Push (Assran, Loizou, Ballas & Rabbat, ICML 2019).

SGP (DmSGD with push-sum gossip) whose messages arrive ``tau`` iterations late, so that
sending overlaps the next steps' computation: ``osgp`` is ``dmsgd`` composed with
``delayed(tau, push_sum)``. With ``P`` column-stochastic, ``D = diag(P)``, push-sum weights
``w`` (``w^{(0)} = 1``) and ``U = w X`` the numerators, per iteration

.. math::
    M^{(t+1)} &= \\beta M^{(t)} + (1 - \\beta) G^{(t)}, \\qquad
    U^{(t+1/2)} = w^{(t)} X^{(t)} - \\alpha_t M^{(t+1)}, \\\\
    U^{(t+1)} &= D U^{(t+1/2)} + (P - D) U^{(t+1/2 - \\tau)}, \\qquad
    w^{(t+1)} = D w^{(t)} + (P - D) w^{(t - \\tau)}, \\\\
    X^{(t+1)} &= U^{(t+1)} / w^{(t+1)},

where the messages before iteration 0 are the initial ones (``U = X^{(0)}``, ``w = 1``).
Departure: the paper's Algorithm 3 lets a message arrive within ``tau`` iterations
(whenever it is ready, non-blocking); here it arrives exactly ``tau`` iterations late, the
bounded-delay case its analysis covers. ``tau = 0`` is SGP bit for bit.

Reference: M. Assran, N. Loizou, N. Ballas, M. Rabbat, "Stochastic gradient push for
distributed deep learning", ICML 2019, Algorithm 3 (overlap SGP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from decentopt.algorithms.gossips import Delayed, Gossip, PushSum
from decentopt.algorithms.registry import alias

__all__ = ["OverlapPushSum"]


@dataclass(frozen=True)
class OverlapPushSum(Delayed):
    """Push-sum whose messages arrive ``tau`` iterations late: ``delayed(tau, push_sum)``."""

    tau: int = 1
    inner: str | Gossip = "push_sum"

    #: push-sum's, declared on the class (the catalog reads an alias's gossip class)
    needs: ClassVar[frozenset[str]] = PushSum.needs  # type: ignore[misc]

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.inner, PushSum):
            raise ValueError(
                "osgp: its messages are push-sum's; for another gossip compose dmsgd with "
                "delayed(tau, ...) instead"
            )


alias(
    "osgp",
    "dmsgd",
    OverlapPushSum,
    "Overlap SGP: Assran, Loizou, Ballas & Rabbat, ICML 2019, Algorithm 3",
)
