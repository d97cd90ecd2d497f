"""How a rank leaves: a rank that lost a neighbour never claims a normal finish, and the
store calls made while leaving print nothing of torch's C++ warnings."""

from __future__ import annotations

import os

import pytest

from decentopt.comm import PeerFailure, leaving


@pytest.fixture
def fresh(monkeypatch):
    """The module's flag as in a new process; ``leave`` recorded instead of run."""
    monkeypatch.setattr(leaving, "_lost_a_neighbour", False)
    calls = []
    monkeypatch.setattr(leaving, "leave", lambda *, finished=True: calls.append(finished))
    monkeypatch.setattr(leaving, "_RELEASE_PAUSE", 0.0)
    return calls


def test_a_rank_that_lost_a_neighbour_leaves_without_claiming_a_normal_finish(fresh):
    leaving._leave_at_exit()
    PeerFailure("rank 1: neighbour 2 closed the link")
    leaving._leave_at_exit()
    assert fresh == [True, False]


class _NoisyStore:
    """A store whose host is gone: each call writes to file descriptor 2, as torch's C++
    client does, then raises."""

    def check(self, keys):
        os.write(2, b"[W TCPStore.cpp] recvValue failed\nframe #0: c10::Error\n")
        raise RuntimeError("Connection closed by peer")


def test_a_store_whose_host_is_gone_reads_as_no_word_and_prints_nothing(capfd):
    assert leaving.finished_line(_NoisyStore(), rank=1, peer=0, made=8) is None
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"
