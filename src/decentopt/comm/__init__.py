"""Communicators: the only place where agents exchange data."""

from decentopt.comm.accelerated import MultiRound
from decentopt.comm.base import CommStats, Communicator
from decentopt.comm.distributed import DistributedCommunicator, PeerFailure
from decentopt.comm.grouped import GroupCommunicator
from decentopt.comm.many import ManyAgentCommunicator
from decentopt.comm.simulated import SimulatedCommunicator

__all__ = [
    "CommStats",
    "Communicator",
    "DistributedCommunicator",
    "GroupCommunicator",
    "ManyAgentCommunicator",
    "MultiRound",
    "PeerFailure",
    "SimulatedCommunicator",
]
