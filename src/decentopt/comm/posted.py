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
the flags without blocking. Those threads end on every path: :meth:`Stream.settle` joins
them, a failed message stops them (each finishes the wait it is in, at most ``timeout``),
and at interpreter exit :func:`stop_all` joins whatever is left -- a thread still inside a
gloo wait when Python shuts down would abort the process ("terminate called without an
active exception").
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch

__all__ = ["Message", "Stream", "stop_all"]

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
        if self.arrived is not None:
            if not self.arrived.wait(timeout.total_seconds()):
                raise fail(self.peer, self.round, None)  # once: not caught and wrapped again
        else:
            try:
                self.work.wait(timeout)
            except RuntimeError as exc:
                raise fail(self.peer, self.round, exc) from None
        if self.error is not None:
            raise fail(self.peer, self.round, self.error)


def _waiter(inbox: queue.SimpleQueue, timeout: timedelta, stop: threading.Event) -> None:
    """Wait on each receive in turn and flag it; once ``stop`` is set, flag the rest unwaited."""
    while (message := inbox.get()) is not None:
        if stop.is_set():
            message.error = RuntimeError("abandoned after an earlier failure")
        else:
            try:
                message.work.wait(timeout)
            except RuntimeError as exc:
                message.error = exc
        message.arrived.set()


#: Streams whose waiter threads may still run (held here even when their run dropped them
#: after a failure), joined at exit by :func:`stop_all`.
_LIVE: set[Stream] = set()


def stop_all() -> None:
    """Stop and join every stream's waiter threads (registered with :mod:`atexit`): each ends
    within the wait it is in (at most its stream's timeout; at once for a closed link)."""
    streams = list(_LIVE)
    for stream in streams:
        stream.stop()
    for stream in streams:
        stream.join()


atexit.register(stop_all)


class Stream:
    """One delayed gossip's rounds in flight on this rank (module docstring).

    ``post(flat, targets, sources, (isend, irecv), fail)`` starts round ``s`` (sends to
    ``targets``, receives from ``sources``: rank ids); ``take(sources, tau, bound, fail)``
    then returns, per neighbour, the buffer of the newest message of age ``tau`` to
    ``bound`` and the age of the oldest used."""

    def __init__(self, key: torch.Tensor, timeout: timedelta, threaded: bool) -> None:
        self.key = weakref.ref(key)
        self.timeout = timeout
        self.threaded = threaded
        self.posted = 0
        self.outbox: deque[Message] = deque()
        self.inbox: dict[int, deque[Message]] = {}
        self.latest: dict[int, Message] = {}
        self._waiters: dict[int, queue.SimpleQueue] = {}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    def post(self, flat: torch.Tensor, targets: Any, sources: Any, ops: Any, fail: Fail) -> None:
        isend, irecv = ops
        s = self.posted
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
            thread = threading.Thread(
                target=_waiter,
                args=(self._waiters[j], self.timeout, self._stop),
                daemon=True,
                name=f"decentopt-inbox-{j}",
            )
            thread.start()
            self._threads.append(thread)
            _LIVE.add(self)
        return self._waiters[j]

    def stop(self) -> None:
        """Ask the waiter threads to end: each finishes the wait it is in, then leaves."""
        self._stop.set()
        for waiter in self._waiters.values():
            waiter.put(None)
        self._waiters.clear()

    def join(self) -> None:
        """Wait for the stopped waiter threads: at most the timeout and a second in all."""
        deadline = time.monotonic() + self.timeout.total_seconds() + 1.0
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]
        if not self._threads:
            _LIVE.discard(self)

    def take(self, sources: Any, tau: int, bound: int, fail: Fail) -> tuple[list, int]:
        """Per source, the newest message of age ``tau..bound`` (waiting for age ``bound``)."""
        now = self.posted - 1
        try:
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
        except BaseException:
            self.stop()  # the run is over: its threads end (joined at exit)
            raise
        used = [self.latest[j] for j in sources]
        return [m.buffer for m in used], max((now - m.round for m in used), default=tau)

    def settle(self, fail: Fail) -> None:
        """Wait for every message in flight (so that none is lost when a rank leaves)."""
        try:
            for box in (self.outbox, *self.inbox.values()):
                while box:
                    box.popleft().wait(self.timeout, fail)
        finally:
            self.stop()
        self.join()  # every receive is through: the threads are idle and end at once
