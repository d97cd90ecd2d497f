"""Messages posted ahead: the non-blocking transport of delayed gossip over ``torch.distributed``.

A :class:`Stream` is one delayed gossip's sequence of rounds on one rank (one optimizer
bucket, one run). Round ``s`` posts ``isend`` of the rank's row to the agents that read it
and ``irecv`` of each neighbour's row, and returns at once; the round consumes, per
neighbour, the newest message whose age is at least ``tau`` rounds, waiting only for the
one of age ``bound`` (``bound = tau``: exactly the message of round ``s - tau``, the
simulator's delayed gossip; ``bound > tau``: bounded staleness). Messages between two ranks
match in the order they were posted, which is the same on every rank.

gloo reports a receive complete only when it is waited on, so under bounded staleness a
thread per neighbour waits on its receives in order and flags each arrival; the round reads
the flags without blocking.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch

__all__ = ["Message", "Stream"]

#: Raised for a message that did not come: ``(peer, round, error or None for a timeout)``.
Fail = Callable[[int, int, BaseException | None], BaseException]


@dataclass
class Message:
    """One posted operation: its round, its peer, its work and its buffer."""

    round: int
    peer: int
    work: Any
    buffer: torch.Tensor
    arrived: threading.Event | None = None  # set by a waiter thread (bounded staleness)
    error: BaseException | None = field(default=None, repr=False)

    def ready(self) -> bool:
        return self.arrived is not None and self.arrived.is_set()

    def wait(self, timeout: timedelta, fail: Fail) -> None:
        """Block until the message is through, or raise ``fail(peer, round, error)``."""
        try:
            if self.arrived is None:
                self.work.wait(timeout)
            elif not self.arrived.wait(timeout.total_seconds()):
                raise fail(self.peer, self.round, None)
        except RuntimeError as exc:
            raise fail(self.peer, self.round, exc) from None
        if self.error is not None:
            raise fail(self.peer, self.round, self.error)


def _waiter(inbox: queue.SimpleQueue, timeout: timedelta) -> None:
    while (message := inbox.get()) is not None:
        try:
            message.work.wait(timeout)
        except RuntimeError as exc:
            message.error = exc
        message.arrived.set()


class Stream:
    """One delayed gossip's rounds in flight on this rank (module docstring).

    ``post(flat, targets, sources, (isend, irecv), fail)`` starts round ``s`` (sends to
    ``targets``, receives from ``sources``: rank ids); ``take(sources, tau, bound, fail)``
    then returns, per neighbour, the
    buffer of the newest message of age ``tau`` to ``bound`` and the age of the oldest used.
    """

    def __init__(self, key: torch.Tensor, timeout: timedelta, threaded: bool) -> None:
        self.key = weakref.ref(key)
        self.timeout, self.threaded = timeout, threaded
        self.posted = 0
        self.outbox: deque[Message] = deque()
        self.inbox: dict[int, deque[Message]] = {}
        self.latest: dict[int, Message] = {}
        self._waiters: dict[int, queue.SimpleQueue] = {}

    def post(self, flat: torch.Tensor, targets: Any, sources: Any, ops: Any, fail: Fail) -> None:
        s, (isend, irecv) = self.posted, ops
        self.posted += 1

        def start(op: Any, tensor: torch.Tensor, peer: int) -> Message:
            try:
                return Message(s, peer, op(tensor, peer), tensor)
            except RuntimeError as exc:  # the link is already down
                raise fail(peer, s, exc) from None

        for k in targets:
            self.outbox.append(start(isend, flat, k))
        for j in sources:
            message = start(irecv, torch.empty_like(flat), j)
            self.inbox.setdefault(j, deque()).append(message)
            if self.threaded:
                message.arrived = threading.Event()
                self._waiter(j).put(message)

    def _waiter(self, j: int) -> queue.SimpleQueue:
        if j not in self._waiters:
            self._waiters[j] = queue.SimpleQueue()
            threading.Thread(
                target=_waiter, args=(self._waiters[j], self.timeout), daemon=True,
                name=f"decentopt-inbox-{j}",
            ).start()  # fmt: skip
        return self._waiters[j]

    def take(self, sources: Any, tau: int, bound: int, fail: Fail) -> tuple[list, int]:
        """Per source, the newest message of age ``tau..bound`` (waiting for age ``bound``)."""
        now = self.posted - 1
        for j in sources:
            box = self.inbox.get(j, deque())
            while box and box[0].round <= now - tau:
                message = box[0]
                if message.round > now - bound and j in self.latest and not message.ready():
                    break
                message.wait(self.timeout, fail)
                self.latest[j] = box.popleft()
        while self.outbox and self.outbox[0].round < now - bound:  # bounded memory
            self.outbox.popleft().wait(self.timeout, fail)
        used = [self.latest[j] for j in sources]
        return [m.buffer for m in used], max((now - m.round for m in used), default=tau)

    def settle(self, fail: Fail) -> None:
        """Wait for every message in flight (so that none is lost when a rank leaves)."""
        for box in (self.outbox, *self.inbox.values()):
            while box:
                box.popleft().wait(self.timeout, fail)
        for waiter in self._waiters.values():
            waiter.put(None)
        self._waiters.clear()
