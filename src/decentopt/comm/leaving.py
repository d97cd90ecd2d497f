"""Ranks that leave normally say so: unequal step counts are not taken for a death.

A rank that leaves through :func:`~decentopt.distributed.finalize` records in the job's
key-value store (the process group's, hosted by rank 0) how many gossip rounds it made. A
neighbour still waiting for its message looks there before it raises
:class:`~decentopt.comm.PeerFailure`: "neighbour 1 finished normally after 10 gossip rounds
while this rank made 11" instead of "it died, hung or disconnected". A rank that leaves
without ``finalize()``, or is killed, says nothing and is reported as gone; so is any rank
once rank 0 (the store's host) has left.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch.distributed as dist

__all__ = ["announce_finish", "finished_line", "register"]

#: Every distributed communicator of this process (``stats.rounds``, ``rank``, its store).
_ALL: weakref.WeakSet[Any] = weakref.WeakSet()


def _key(rank: int) -> str:
    return f"decentopt/finished/{rank}"


def register(comm: Any) -> Any:
    """Remember ``comm`` for :func:`announce_finish`; the job's store, or None without one."""
    _ALL.add(comm)
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def announce_finish() -> None:
    """Record that this rank finished normally, and after how many gossip rounds."""
    for comm in list(_ALL):
        if comm._store is not None:
            try:
                comm._store.set(_key(comm.rank), str(comm.stats.rounds))
            except Exception:  # the store's host may be gone: nothing to tell
                pass


def finished_line(store: Any, rank: int, peer: int, made: int) -> str | None:
    """The one-line error of rank ``rank`` for a ``peer`` that finished normally while this
    rank has made (or started) ``made`` rounds; None where the peer did not say so."""
    try:
        if store is None or not store.check([_key(peer)]):
            return None
        rounds = int(store.get(_key(peer)))
    except Exception:  # the store's host is gone too: no word from it
        return None
    return (
        f"rank {rank}: neighbour {peer} finished normally after {rounds} gossip rounds while "
        f"this rank made {made}: the ranks called step() a different number of times (one "
        "gossip round per step for most methods); give every rank the same number of steps"
    )
