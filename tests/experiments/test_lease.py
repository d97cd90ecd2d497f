"""Leases on a shared file system: one holder at a time, stale ones taken over, live ones kept."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time

import pytest

from decentopt.experiments.lease import Holder, Lease, _read


def test_claimants_racing_for_a_stale_lease_hold_it_one_at_a_time(tmp_path):
    """A lease left by a host that stopped beating; eight claimants of other hosts take it
    over at once, each holding it for a while: their holds never overlap."""
    path = tmp_path / "lease"
    path.write_text(json.dumps({"host": "gone", "pid": 1, "token": "t"}))
    holds: list[tuple[float, float]] = []

    def claimant(k: int) -> None:
        lease = Lease(path, stale=1.0, beat=0.02, poll=0.005, me=Holder(f"h{k}", 1, f"k{k}"))
        assert lease.claim()
        with lease.beating():
            begin = time.monotonic()
            time.sleep(0.05)
            assert lease.holds()
            holds.append((begin, time.monotonic()))
        lease.release()

    threads = [threading.Thread(target=claimant, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(holds) == 8
    holds.sort()
    assert all(end <= next_begin for (_, end), (next_begin, _) in itertools.pairwise(holds))
    assert not path.exists()


def test_a_lease_that_beat_while_it_was_moved_aside_is_put_back(tmp_path):
    path = tmp_path / "lease"
    holder = Lease(path, me=Holder("a", 1, "mine"))
    assert holder.claim()
    seen = _read(path)
    holder.touch()  # it beats after the claimant looked
    later = time.time_ns() + 10**9
    os.utime(path, ns=(later, later))
    Lease(path, me=Holder("b", 2, "theirs"))._take_over(seen)
    assert holder.holds()  # still the holder's lease
    assert [p.name for p in tmp_path.iterdir()] == ["lease"]


@pytest.mark.parametrize("text", ["{not json", "[1]", "null"], ids=["broken", "list", "null"])
def test_a_damaged_lease_is_taken_over_once_it_stops_changing(tmp_path, text):
    path = tmp_path / "lease"
    path.write_text(text)
    lease = Lease(path, stale=0.3, poll=0.01, me=Holder("b", 2, "t"))
    start = time.monotonic()
    assert lease.claim()
    assert time.monotonic() - start >= 0.3 and lease.holds()


def test_a_claimant_gives_up_waiting_once_the_unit_is_published(tmp_path):
    path = tmp_path / "lease"
    assert Lease(path, me=Holder("a", 1, "x")).claim()
    calls = []
    waiter = Lease(path, stale=60, poll=0.01, me=Holder("b", 2, "y"))
    assert not waiter.claim(done=lambda: calls.append(1) or len(calls) >= 3)
    assert len(calls) == 3 and not waiter.holds()


@pytest.mark.parametrize("reused", [False, True], ids=["its-process", "reused"])
def test_a_pid_of_this_host_given_to_another_process_is_no_holder(tmp_path, reused):
    """A lease names a live PID of this host; when that process started at another time
    than the holder did, the holder is gone and the lease is taken over at once, else
    the claimant waits (here until the unit is published)."""
    from decentopt.experiments.lease import _started, host_name

    path = tmp_path / "lease"
    live = os.getpid()  # alive: a bare PID check would wait the whole stale time
    started = _started(live) - (1 if reused else 0)
    holder = {"host": host_name(), "pid": live, "token": "t", "started": started}
    path.write_text(json.dumps(holder))
    looks: list[int] = []
    lease = Lease(path, stale=60, poll=0.01, me=Holder("here", 2, "u"))
    start = time.monotonic()
    assert lease.claim(done=lambda: looks.append(1) or len(looks) >= 5) == reused
    assert time.monotonic() - start < 5 and lease.holds() == reused
