"""Problem kinds of run specifications: ``problem = NAME`` -> the dataclass of its section.

:data:`KINDS` maps the ``problem`` of a run specification to the dataclass of its
``[problem_params]`` section (:class:`ProblemSpec`): it builds the problem, says how
long a run is and where it is recorded, and estimates its memory.
"""

from __future__ import annotations

from decentopt._registry import Registry
from decentopt.experiments.kinds.base import ConvexSpec, ProblemSpec, missing_members
from decentopt.experiments.kinds.logistic import LogisticSpec
from decentopt.experiments.kinds.neural import NeuralSpec
from decentopt.experiments.kinds.quadratic import QuadraticSpec

__all__ = [
    "KINDS",
    "ConvexSpec",
    "LogisticSpec",
    "NeuralSpec",
    "ProblemSpec",
    "QuadraticSpec",
    "missing_members",
    "register_kind",
]

#: Problem kinds of run specifications: ``problem = NAME`` -> its section's dataclass.
KINDS: Registry[type] = Registry(
    "problem kind",
    [("quadratic", QuadraticSpec), ("logistic", LogisticSpec), ("neural", NeuralSpec)],
)


def register_kind(name: str, spec: type) -> type:
    """Make ``problem = name`` in a run specification build problems through ``spec``."""
    return KINDS.add(name, spec)
