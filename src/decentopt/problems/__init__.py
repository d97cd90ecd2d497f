"""Problems: stochastic gradients at stacked iterates, metrics and optima."""

from decentopt.problems.base import StackedProblem
from decentopt.problems.quadratic import Quadratic

__all__ = ["Quadratic", "StackedProblem"]
