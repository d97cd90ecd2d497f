"""Distributed execution: one agent per process on torch.distributed.

>>> import decentopt as dopt
>>> rank, world = dopt.distributed.init()                  # under torchrun
>>> comm = dopt.comm.DistributedCommunicator(dopt.topology.ring(world), timeout=60)
>>> opt = dopt.distributed.DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, beta=0.9)
"""

from decentopt.comm.distributed import DistributedCommunicator, PeerFailure
from decentopt.distributed.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from decentopt.distributed.optimizer import DecentralizedOptimizer
from decentopt.distributed.runtime import (
    Job,
    average_buffers,
    broadcast_parameters,
    device_for_rank,
    finalize,
    init,
    job,
)
from decentopt.distributed.wrap import GossipOptimizer, wrap

__all__ = [
    "DecentralizedOptimizer",
    "DistributedCommunicator",
    "GossipOptimizer",
    "Job",
    "PeerFailure",
    "average_buffers",
    "broadcast_parameters",
    "device_for_rank",
    "finalize",
    "init",
    "job",
    "latest_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
    "wrap",
]
