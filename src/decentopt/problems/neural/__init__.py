"""A neural network replicated over n agents, each with its own share of the data."""

from decentopt.problems.neural.batched import BatchedRuns
from decentopt.problems.neural.problem import Backend, NeuralProblem, Precision
from decentopt.problems.neural.sampler import AgentSampler

__all__ = ["AgentSampler", "Backend", "BatchedRuns", "NeuralProblem", "Precision"]
