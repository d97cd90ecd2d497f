"""Problems: stochastic gradients at stacked iterates, metrics and optima."""

from decentopt.problems.base import StackedProblem
from decentopt.problems.logistic import Logistic
from decentopt.problems.quadratic import Quadratic

#: Paper problem generators by name, with the parameter that sets heterogeneity.
PAPER_PROBLEMS = {
    "quadratic": (Quadratic.paper, "c"),
    "logistic": (Logistic.paper, "sigma_h2"),
}

__all__ = ["PAPER_PROBLEMS", "Logistic", "Quadratic", "StackedProblem"]
