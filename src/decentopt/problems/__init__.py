"""Problems: stochastic gradients at stacked iterates, metrics and optima.

:data:`KINDS` maps the ``problem`` of a run specification to the dataclass of
its ``[problem_params]`` section (:class:`~decentopt.problems.base.ProblemSpec`).
"""

from decentopt.problems.base import Plan, Problem, ProblemSpec, StackedProblem
from decentopt.problems.logistic import Logistic, LogisticSpec
from decentopt.problems.neural import NeuralProblem, NeuralSpec
from decentopt.problems.quadratic import Quadratic, QuadraticSpec

#: Problem kinds of run specifications: ``problem = NAME`` -> its section's dataclass.
KINDS: dict[str, type] = {
    "quadratic": QuadraticSpec,
    "logistic": LogisticSpec,
    "neural": NeuralSpec,
}


def register_kind(name: str, spec: type) -> type:
    """Make ``problem = name`` in a run specification build problems through ``spec``."""
    if name in KINDS:
        raise ValueError(f"a problem kind named {name!r} is already registered")
    KINDS[name] = spec
    return spec


__all__ = [
    "KINDS",
    "Logistic",
    "NeuralProblem",
    "Plan",
    "Problem",
    "ProblemSpec",
    "Quadratic",
    "StackedProblem",
    "register_kind",
]
