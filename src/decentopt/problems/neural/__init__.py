"""A neural network replicated over n agents, each with its own share of the data."""

from decentopt.problems.neural.batched import BatchedRuns
from decentopt.problems.neural.grouped import GroupedBackend
from decentopt.problems.neural.loop import LoopBackend
from decentopt.problems.neural.problem import Backend, NeuralProblem, Precision, choose_backend
from decentopt.problems.neural.sampler import AgentSampler
from decentopt.problems.neural.vmap import VmapBackend

__all__ = [
    "AgentSampler",
    "Backend",
    "BatchedRuns",
    "GroupedBackend",
    "LoopBackend",
    "NeuralProblem",
    "Precision",
    "VmapBackend",
    "choose_backend",
]
