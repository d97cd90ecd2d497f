"""The ``logistic`` kind: the paper's Figure 2 problem in a run specification."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from decentopt._schema import bounded
from decentopt.experiments.kinds.base import ConvexSpec
from decentopt.problems.logistic import Logistic

__all__ = ["LogisticSpec"]


@dataclass(frozen=True)
class LogisticSpec(ConvexSpec):
    """``problem = "logistic"``: the paper's Figure 2 problem (see :meth:`Logistic.paper`).

    ``sigma_h2`` lists the heterogeneity levels, one panel each.
    """

    panel: ClassVar[str] = "sigma_h2"
    problem: ClassVar[type] = Logistic
    title: ClassVar[str] = "Logistic regression"
    noise: ClassVar[str] = "sigma_s2"

    d: int = bounded(20, minimum=1)
    m: int = bounded(2000, minimum=1)
    sigma_h2: tuple[float, ...] = (1.0,)
    mu: float = bounded(0.01, minimum=0)
    sigma_s2: float = bounded(0.01, minimum=0)
    dtype: Literal["float32", "float64"] = "float64"
    compute_dtype: Literal["float32", "float64"] | None = None

    def memory_bytes(self, *, agents: int, runs: int) -> dict[str, float]:
        """What building and running it holds, by part: the samples (float64, the compute
        copy and a temporary of the Newton solve's), shared by the levels, and the labels
        and margins of every column; iterates, algorithm state and a step's temporaries
        are about ten ``(n, columns, d)`` tensors."""
        cols = runs * len(self.sigma_h2)
        return {
            "samples (three copies)": 3 * 8 * agents * runs * self.m * self.d,
            "labels and margins": 4 * 8 * agents * cols * self.m,
            "iterates and algorithm state": 10 * 8 * agents * cols * self.d,
        }
