"""Ranks that leave normally say so: unequal step counts are not taken for a death.

A rank that leaves through :func:`~decentopt.distributed.finalize` records in the job's
key-value store (the process group's, hosted by rank 0) how many gossip rounds it made. A
neighbour still waiting for its message looks there before it raises
:class:`~decentopt.comm.PeerFailure`: "neighbour 1 finished normally after 10 gossip rounds
while this rank made 11" instead of "it died, hung or disconnected". A rank that leaves
without ``finalize()``, or is killed, says nothing and is reported as gone; so is any rank
once rank 0 (the store's host) has left.

A process that ends without ``finalize()`` leaves the same way at interpreter exit
(:func:`leave`, registered with :mod:`atexit` by the first communicator): its delayed
messages are settled, the process group is closed while Python is still whole, and gloo's
worker threads get a moment to release what the last collectives held. Left to interpreter
shutdown, one of them can abort the process ("terminate called without an active
exception", exit code 134) after all its work was done. A process that ends on an uncaught
exception, or that lost a neighbour (it raised :class:`~decentopt.comm.PeerFailure`), does
not announce a normal finish.

Once rank 0 has left, its store is gone, and torch's store client prints a warning with a
C++ stack trace on each call before it raises; the calls here run with the process's
standard error muted, so that a rank's failure stays the one line it prints.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
import weakref
from collections.abc import Iterator
from typing import Any

import torch.distributed as dist

__all__ = [
    "POSTING",
    "PeerFailure",
    "announce_finish",
    "finished_line",
    "leave",
    "lost_a_neighbour",
    "register",
    "settle_all",
]

#: Every distributed communicator of this process (``stats.rounds``, ``rank``, its store).
_ALL: weakref.WeakSet[Any] = weakref.WeakSet()
#: Communicators with delayed messages in flight, kept (their receives stay posted, so that
#: messages on the same links keep matching in order) until :func:`settle_all`.
POSTING: set[Any] = set()
_closing_at_exit = False
#: whether this process lost a neighbour (it then leaves without claiming a normal finish)
_lost_a_neighbour = False
#: seconds gloo's worker threads get at exit to release what the last collectives held
_RELEASE_PAUSE = 0.25


def _key(rank: int) -> str:
    return f"decentopt/finished/{rank}"


def register(comm: Any) -> Any:
    """Remember ``comm`` for :func:`announce_finish` (and close the job at exit, once per
    process); the job's store, or None without one."""
    global _closing_at_exit
    _ALL.add(comm)
    if not _closing_at_exit:
        atexit.register(_leave_at_exit)
        _closing_at_exit = True
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def lost_a_neighbour() -> None:
    """Note that this process lost a neighbour: at exit it does not claim a normal finish."""
    global _lost_a_neighbour
    _lost_a_neighbour = True


class PeerFailure(RuntimeError):
    """A neighbour did not deliver its message (it died, hung or disconnected)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        lost_a_neighbour()  # so that this rank does not leave as finished


@contextlib.contextmanager
def _muted_stderr() -> Iterator[None]:
    """The process's standard error (file descriptor 2, where torch's C++ warnings go)
    discarded for the duration of a store call."""
    sys.stderr.flush()
    saved = os.dup(2)
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(sink, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(sink)


def announce_finish() -> None:
    """Record that this rank finished normally, and after how many gossip rounds."""
    for comm in list(_ALL):
        if comm._store is not None:
            with contextlib.suppress(Exception), _muted_stderr():  # the store's host may be gone
                comm._store.set(_key(comm.rank), str(comm.stats.rounds))


def finished_line(store: Any, rank: int, peer: int, made: int) -> str | None:
    """The one-line error of rank ``rank`` for a ``peer`` that finished normally while this
    rank has made (or started) ``made`` rounds; None where the peer did not say so."""
    if store is None:
        return None
    try:
        with _muted_stderr():
            if not store.check([_key(peer)]):
                return None
            rounds = int(store.get(_key(peer)))
    except Exception:  # the store's host is gone too: no word from it
        return None
    return (
        f"rank {rank}: neighbour {peer} finished normally after {rounds} gossip rounds while "
        f"this rank made {made}: the ranks called step() a different number of times (one "
        "gossip round per step for most methods); give every rank the same number of steps"
    )


def settle_all() -> None:
    """Wait for the delayed messages still in flight on every communicator of this process:
    a rank that leaves first must not take its last messages with it."""
    for comm in list(POSTING):
        comm.settle()


def leave(*, finished: bool = True) -> None:
    """Leave the job: record that this rank ``finished`` normally (:func:`announce_finish`),
    settle the delayed messages in flight, then close every process group. A no-op outside
    torch.distributed or once closed."""
    if not dist.is_available() or not dist.is_initialized():
        return
    if finished:
        announce_finish()
    settle_all()
    dist.destroy_process_group()


def _leave_at_exit() -> None:
    """:func:`leave` for a process that ends without ``finalize()``; a process that ends on
    an uncaught exception (``sys.last_value``) or lost a neighbour does not claim a normal
    finish.

    Then a pause without the GIL: once a collective has returned, gloo's worker thread may
    still have to take the GIL to release the Python objects the collective held. Were the
    interpreter finalizing by then, that thread would be stopped inside C++ and abort the
    process. The group's worker threads outlive ``destroy_process_group()`` whenever
    something else keeps the group (``import torch._dynamo``, which ``torch.optim`` does,
    holds references to it), so closing the group cannot end them."""
    with contextlib.suppress(Exception):  # the process is ending; a neighbour gone hears nothing
        leave(finished=not _lost_a_neighbour and getattr(sys, "last_value", None) is None)
    time.sleep(_RELEASE_PAUSE)
