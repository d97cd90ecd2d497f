"""decentopt: decentralized stochastic optimization with EDM and its baselines.

>>> import decentopt as dopt
>>> topo = dopt.topology.ring(32)
>>> alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
>>> prob = dopt.problems.Quadratic.paper(n=32, repetitions=2, seed=0)
>>> res = dopt.simulate(alg, prob, topo, iterations=100, seed=0)
"""

import os

# Large CPU tensors (an (n, P) stack of model parameters is hundreds of MB) are
# allocated afresh at every step; transparent huge pages cut the page faults of
# those allocations about 500-fold, which halves the non-gradient time of a
# VGG-11 step on a CPU. Opt out with THP_MEM_ALLOC_ENABLE=0.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from decentopt import algorithms, comm, dist, problems, schedules, topology
from decentopt.simulate import SimulationResult, simulate

__version__ = "0.1.0"

__all__ = [
    "SimulationResult",
    "__version__",
    "algorithms",
    "comm",
    "dist",
    "problems",
    "schedules",
    "simulate",
    "topology",
]
