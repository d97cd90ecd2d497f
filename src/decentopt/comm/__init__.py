"""Communicators: the only place where agents exchange data."""

from decentopt._renamed import renamed
from decentopt.comm.aged import AgedCommunicator
from decentopt.comm.distributed import DistributedCommunicator, PeerFailure
from decentopt.comm.grouped import GroupCommunicator
from decentopt.comm.many import ManyAgentCommunicator
from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.communicator import CommStats, Communicator

__all__ = [
    "AgedCommunicator",
    "CommStats",
    "Communicator",
    "DistributedCommunicator",
    "GroupCommunicator",
    "ManyAgentCommunicator",
    "PeerFailure",
    "SimulatedCommunicator",
]


def _rounds() -> object:
    from decentopt.algorithms.gossips.multi_round import RoundsChannel

    return RoundsChannel


__getattr__ = renamed(
    "decentopt.comm",
    {
        "MultiRound": (
            _rounds,
            "several rounds per mix are the gossip multi_round(K): make(..., "
            "gossip='multi_round(K)'), or decentopt.algorithms.gossips.RoundsChannel(comm, K) "
            "around a communicator",
        )
    },
)
