"""decentopt: decentralized stochastic optimization with EDM and its baselines.

>>> import decentopt as dopt
>>> topo = dopt.topology.ring(32)
>>> alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
>>> prob = dopt.problems.Quadratic.paper(n=32, repetitions=2, seed=0)
>>> res = dopt.simulate(alg, prob, topo, iterations=100, seed=0)

Importing the package changes no process settings (environment variables,
matplotlib backend, thread counts).
"""

from decentopt import algorithms, comm, distributed, plugins, problems, schedules, topology
from decentopt.simulate import SimulationResult, simulate

__version__ = "0.3.0"

__all__ = [
    "SimulationResult",
    "__version__",
    "algorithms",
    "comm",
    "distributed",
    "plugins",
    "problems",
    "schedules",
    "simulate",
    "topology",
]


def __getattr__(name: str) -> object:
    if name == "dist":  # renamed in 0.2 ("dist/" is the folder Python tooling builds into)
        raise AttributeError(
            "decentopt.dist was renamed decentopt.distributed in 0.2 and removed in 0.3; "
            "use decentopt.distributed"
        )
    raise AttributeError(f"module 'decentopt' has no attribute {name!r}")
