"""Several gossip rounds per mix around any communicator: ``MultiRound(comm, rounds=K)``
(the multi-round gossip's channel, :mod:`decentopt.algorithms.gossips.multi_round`)."""

from decentopt.algorithms.gossips.multi_round import RoundsChannel as MultiRound

__all__ = ["MultiRound"]
