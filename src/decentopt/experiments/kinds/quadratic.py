"""The ``quadratic`` kind: the paper's Figure 1 problem in a run specification."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from decentopt._schema import bounded
from decentopt.experiments.kinds.base import ConvexSpec
from decentopt.problems.quadratic import GRAM_BYTES, Quadratic

__all__ = ["QuadraticSpec"]


@dataclass(frozen=True)
class QuadraticSpec(ConvexSpec):
    """``problem = "quadratic"``: the paper's Figure 1 problem (see :meth:`Quadratic.paper`).

    ``c`` lists the heterogeneity scales, one panel each (``zeta^2 ~ 1/c^2``).
    """

    panel: ClassVar[str] = "c"
    problem: ClassVar[type] = Quadratic
    title: ClassVar[str] = "Quadratic"
    noise: ClassVar[str] = "sigma2"

    d: int = bounded(10, minimum=1)
    p: int = bounded(20, minimum=1)
    sigma2: float = bounded(0.05, minimum=0)
    c: tuple[float, ...] = (1.0,)
    dtype: Literal["float32", "float64"] = "float64"

    def memory_bytes(self, *, agents: int, runs: int) -> dict[str, float]:
        """What building and running it holds, by part (measured within 2x of the peak:
        ``tests/experiments/test_memory.py``)."""
        n = agents
        d = self.d
        p = self.p
        cols = runs * len(self.c)
        w = 4 if self.dtype == "float32" else 8
        gram = n * runs * d * d * w  # the per-agent Gram matrices of x*, all repetitions
        if gram > GRAM_BYTES:
            gram = n * d * d * w  # ... or one repetition at a time
        parts = {
            "A (drawn, and one copy per level)": (runs + cols) * n * p * d * w,
            "Gram matrices for x*": 2 * gram,
            "global Hessian and its factorisations": 2 * cols * d * d * w,
            "iterates, algorithm state and gradients": 10 * n * cols * d * w,
        }
        if p < d:  # the low-memory form keeps no per-agent d x d matrices
            parts["noise factor and p x p Gram matrices"] = n * cols * p * (d + 2 * p) * w
        else:
            parts["Hessians, Cholesky and noise factors, fused gradient"] = 6 * n * cols * d * d * w
        return parts
