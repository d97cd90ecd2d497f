"""Bounded staleness on one rank, without processes: :class:`~decentopt.comm.posted.Stream`
over sends and receives whose arrival the test decides. Each round uses, per neighbour, the
newest message of age ``tau`` to ``bound`` that has arrived, waits only for the one of age
``bound``, and reports the age of the oldest message it used."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch

from decentopt.comm.posted import Stream

TAU, BOUND, PEER = 1, 3, 1


class Work:
    """A posted receive: ``deliver(value)`` fills its buffer and completes it."""

    def __init__(self, buffer: torch.Tensor) -> None:
        self.buffer, self.done = buffer, threading.Event()

    def wait(self, timeout: timedelta) -> bool:
        if not self.done.wait(timeout.total_seconds()):
            raise RuntimeError("Timed out waiting for the message")
        return True

    def deliver(self, value: float) -> None:
        self.buffer.fill_(value)
        self.done.set()


class Failed(Exception):
    def __init__(self, peer: int, round_: int, error: BaseException | None) -> None:
        super().__init__(peer, round_, error)
        self.peer, self.round, self.error = peer, round_, error


class Rank:
    """One rank's stream with neighbours ``peers``; round ``s`` carries the value ``s``."""

    def __init__(self, timeout: float = 2.0, peers: tuple[int, ...] = (PEER,)) -> None:
        self.key = torch.zeros(1)
        self.stream = Stream(self.key, timedelta(seconds=timeout), threaded=True)
        self.peers = peers
        self.received: dict[int, list[Work]] = {j: [] for j in peers}

    def post(self) -> None:
        def irecv(tensor: torch.Tensor, peer: int) -> Work:
            self.received[peer].append(Work(tensor))
            return self.received[peer][-1]

        def isend(tensor: torch.Tensor, peer: int) -> Work:
            work = Work(tensor)
            work.done.set()
            return work

        self.stream.post(torch.zeros(1), self.peers, self.peers, (isend, irecv), Failed)

    def deliver(self, *rounds: int, peer: int = PEER) -> None:
        for s in rounds:
            self.received[peer][s].deliver(float(s))
        deadline = time.monotonic() + 5
        for s in rounds:  # the waiter thread flags each arrival
            message = next(m for m in self.stream.inbox[peer] if m.round == s)
            while not message.ready() and time.monotonic() < deadline:
                time.sleep(0.001)

    def take(self) -> tuple[float, int]:
        buffers, age = self.stream.take(self.peers, TAU, BOUND, Failed)
        return float(buffers[0]), age

    def close(self) -> None:
        for works in self.received.values():  # the rest arrive: the waiter threads end now
            for work in works:
                work.done.set()
        self.stream.stop()
        self.stream.join()


def test_the_newest_arrived_message_is_used_and_the_oldest_age_reported():
    rank = Rank()
    try:
        rank.post()
        rank.post()  # now = 1: round 0 is of age 1
        rank.deliver(0)
        assert rank.take() == (0.0, 1)
        rank.post()  # now = 2: round 1 not yet here; round 0 (age 2) is within the bound
        assert rank.take() == (0.0, 2)
        rank.post()  # now = 3: still round 0, at the bound
        assert rank.take() == (0.0, 3)
        rank.deliver(1, 2)
        rank.post()  # now = 4: rounds 1 and 2 arrived: the newest (2, age 2) is used
        assert rank.take() == (2.0, 2)
        rank.deliver(3)
        rank.post()  # now = 5: round 3 (age 2); round 4 is of age 1 and not here
        assert rank.take() == (3.0, 2)
        rank.deliver(4)
        rank.post()  # now = 6: round 4, age 2; round 5 (age 1) not here
        assert rank.take() == (4.0, 2)
        rank.deliver(5)
        rank.post()  # now = 7: round 6 not here; round 5 (age 2) is the newest
        assert rank.take() == (5.0, 2)
    finally:
        rank.close()


def test_a_round_waits_only_for_the_message_of_age_bound():
    rank = Rank()
    try:
        for _ in range(2):
            rank.post()
        rank.deliver(0)
        assert rank.take() == (0.0, 1)
        for expected_age in (2, 3):  # newer messages missing: no wait, round 0 is used
            rank.post()
            start = time.monotonic()
            assert rank.take() == (0.0, expected_age)
            assert time.monotonic() - start < 0.5
        rank.post()  # now = 4: round 1 is of age 3 = the bound: the round waits for it
        threading.Timer(0.3, rank.received[PEER][1].deliver, args=(1.0,)).start()
        start = time.monotonic()
        assert rank.take() == (1.0, 3)
        assert 0.25 <= time.monotonic() - start < 1.5
    finally:
        rank.close()


def test_a_message_past_the_bound_that_never_comes_fails_once_naming_its_round():
    rank = Rank(timeout=0.3)
    try:
        rank.post()
        rank.post()
        rank.deliver(0)
        rank.take()
        for _ in range(3):
            rank.post()
        with pytest.raises(Failed) as info:
            rank.take()  # round 1 is of age 3 and never comes
        assert (info.value.peer, info.value.round) == (PEER, 1)
        assert info.value.error is None or "Timed out" in str(info.value.error)
    finally:
        rank.close()
    assert not rank.stream._threads  # the waiter threads have ended


def test_the_age_reported_is_that_of_the_oldest_message_used():
    """Two neighbours: one keeps pace (age 1), the other lags (age 3): the round reports 3,
    and uses each neighbour's own newest message."""
    rank = Rank(peers=(1, 2))
    try:
        rank.post()
        rank.post()
        rank.deliver(0, peer=1)
        rank.deliver(0, peer=2)
        assert rank.take()[1] == 1
        for now in (2, 3):
            rank.post()
            rank.deliver(now - 1, peer=1)
            buffers, age = rank.stream.take((1, 2), TAU, BOUND, Failed)
            assert [float(b) for b in buffers] == [now - 1, 0.0] and age == now
    finally:
        rank.close()
