"""The ``quadratic`` kind: the paper's Figure 1 problem in a run specification."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from decentopt._schema import bounded
from decentopt.experiments.kinds.base import ConvexSpec
from decentopt.problems.quadratic import Quadratic

__all__ = ["QuadraticSpec"]


@dataclass(frozen=True)
class QuadraticSpec(ConvexSpec):
    """``problem = "quadratic"``: the paper's Figure 1 problem (see :meth:`Quadratic.paper`).

    ``c`` lists the heterogeneity scales, one panel each (``zeta^2 ~ 1/c^2``).
    """

    panel: ClassVar[str] = "c"

    d: int = bounded(10, minimum=1)
    p: int = bounded(20, minimum=1)
    sigma2: float = bounded(0.05, minimum=0)
    c: tuple[float, ...] = (1.0,)
    dtype: Literal["float32", "float64"] = "float64"

    @property
    def deterministic(self) -> bool:
        return self.sigma2 == 0

    def describe(self) -> str:
        return f"Quadratic ({self.describe_params()})"

    def memory_bytes(self, *, agents: int, runs: int) -> dict[str, float]:
        """What building and running it holds, by part (built in float64, then cast)."""
        cols, d, p = runs * len(self.c), self.d, self.p
        each = agents * cols * 8
        low = p < d  # the low-memory form keeps no per-agent d x d matrices
        return {
            "A and its noise factor": 2 * each * p * d,
            "Hessians and fused gradient": 0 if low else 3 * each * d * (d + 1),
            "iterates and algorithm state": self.state_bytes(agents, cols, d),
        }

    def build(self, *, agents: int, runs: int, seed: int, rank: int | None) -> Quadratic:
        self.refuse_rank(rank)
        return Quadratic.paper(
            n=agents,
            d=self.d,
            p=self.p,
            c=list(self.c),
            sigma2=self.sigma2,
            repetitions=runs,
            seed=seed,
            dtype=getattr(torch, self.dtype),
        )
