"""Problems: stochastic gradients at stacked iterates, metrics and optima.

Run specifications name problem *kinds*, which build these problems:
:mod:`decentopt.experiments.kinds`.
"""

from decentopt.problems.base import Problem, StackedProblem, StatelessProblem
from decentopt.problems.logistic import Logistic
from decentopt.problems.neural import BatchedRuns, NeuralProblem
from decentopt.problems.quadratic import Quadratic

__all__ = [
    "BatchedRuns",
    "Logistic",
    "NeuralProblem",
    "Problem",
    "Quadratic",
    "StackedProblem",
    "StatelessProblem",
]
