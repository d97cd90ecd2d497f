"""Distributed execution: one agent per process on torch.distributed.

>>> import decentopt as dopt
>>> rank, world = dopt.dist.init()                  # under torchrun
>>> comm = dopt.comm.DistributedCommunicator(dopt.topology.ring(world), timeout=60)
>>> opt = dopt.dist.DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, beta=0.9)
"""

from decentopt.comm.distributed import DistributedCommunicator, PeerFailure
from decentopt.dist.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from decentopt.dist.optimizer import DecentralizedOptimizer
from decentopt.dist.runtime import device_for_rank, finalize, init

__all__ = [
    "DecentralizedOptimizer",
    "DistributedCommunicator",
    "PeerFailure",
    "device_for_rank",
    "finalize",
    "init",
    "latest_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
]
