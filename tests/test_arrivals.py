"""Bounded staleness as the ranks run it (decentopt.driver.arrivals): the ages and clock
against a hand-worked ring and against a message-by-message emulation of a rank's
``Stream.take``; ages within [tau, S]; S = tau is the plain delay; same seed, same ages."""

from __future__ import annotations

import numpy as np
import pytest

import decentopt as dopt
from decentopt.driver.arrivals import neighbour_slots, stale_run
from decentopt.driver.timeline import TimeModel, clock, compute_times, stale_timeline


def emulate(compute: np.ndarray, neighbors, send: np.ndarray, tau: int, bound: int):
    """Each rank as ``decentopt.comm.posted.Stream.take`` runs it, message by message: per
    neighbour in order, consume its messages of step <= t - tau in order; one younger than
    ``bound`` that has not arrived (and a message already taken) stops the neighbour; an
    older one (or the first) is waited for. Messages of steps < 0 leave with step 0's."""
    steps, n = compute.shape
    ready = np.zeros((steps, n))
    start = np.zeros(n)
    latest = {(i, j): None for i in range(n) for j in neighbors[i]}
    ages = np.zeros((steps, n, max(len(p) for p in neighbors)), dtype=np.int64)
    done = [start.copy()]
    for t in range(steps):
        ready[t] = start + compute[t]
        for i in range(n):
            u = ready[t, i]
            for k, j in enumerate(neighbors[i]):
                s = -tau if latest[i, j] is None else latest[i, j] + 1
                while s <= t - tau:
                    arrival = ready[max(s, 0), j] + send[j]
                    if s > t - bound and latest[i, j] is not None and arrival > u:
                        break
                    u = max(u, arrival)
                    latest[i, j] = s
                    s += 1
                ages[t, i, k] = t - latest[i, j]
            start[i] = u
        done.append(start.copy())
    return ages, np.array(done)


def test_a_ring_of_three_with_one_slow_agent_as_worked_out_by_hand():
    """ring(3), delayed(1, staleness=2): agent 0 computes 4 s a step, agents 1 and 2 1 s;
    a message takes 0.25 s and each agent sends two, one after the other: s_j = 0.5 s.

    Agent 0 never waits (its neighbours are ahead): T_0(t) = 4t, every age 1.
    Agent 1 (agent 2 alike) reads 0, then 2:
      t=0: r = 1; waits for 0's first message, a_0(0) = 4 + 0.5 = 4.5; 2's came at 1.5.
           T(1) = 4.5, ages (1, 1).
      t=1: r = 5.5; 0's step 0 came at 4.5: age 1; 2's step 0 at 1.5: age 1. T(2) = 5.5.
      t=2: r = 6.5; 0's step 1 comes at 8 + 0.5 = 8.5 > 6.5: its step 0, age 2 (the bound,
           here); 2's step 1 came at 5.5 + 0.5 = 6: age 1. T(3) = 6.5.
      t=3: r = 7.5; waits for 0's step 1 (age 2) until 8.5, its step 2 comes at 12.5:
           age 2; 2's step 2 came at 7: age 1. T(4) = 8.5.
      t=4: r = 9.5; waits for 0's step 2 until 12.5: age 2. T(5) = 12.5; t=5: T(6) = 16.5.
    sim_time = max_i T_i(t): 0, 4.5, 8, 12, 16, 20, 24 (the clock of a lag of 2 says 4 at
    step 1: it leaves out the wait for the first messages)."""
    model = TimeModel(compute=1.0, slow=(0,), factor=4.0, latency=0.25, bandwidth=1e300)
    ring = dopt.topology.ring(3)
    run = stale_timeline(model, ring, 6, 0.0, 1, 2)
    np.testing.assert_array_equal(run.slots, [[1, 2], [0, 2], [0, 1]])
    np.testing.assert_array_equal(run.ages[:, 0], np.ones((6, 2)))
    fast = [[1, 1], [1, 1], [2, 1], [2, 1], [2, 1], [2, 1]]
    np.testing.assert_array_equal(run.ages[:, 1], fast)
    np.testing.assert_array_equal(run.ages[:, 2], fast)
    np.testing.assert_allclose(run.done[:, 0], 4.0 * np.arange(7), rtol=0, atol=1e-12)
    slow_paced = [0, 4.5, 5.5, 6.5, 8.5, 12.5, 16.5]
    np.testing.assert_allclose(run.done[:, 1], slow_paced, rtol=0, atol=1e-12)
    np.testing.assert_allclose(run.clock, [0, 4.5, 8, 12, 16, 20, 24], rtol=0, atol=1e-12)
    assert clock(model, ring, 6, 0.0, 2)[1] == 4.0


GRAPHS = {
    "ring": lambda: dopt.topology.ring(6),
    "star": lambda: dopt.topology.star(5),
    "erdos_renyi": lambda: dopt.topology.erdos_renyi(7, 0.5, seed=1),
}


@pytest.mark.parametrize("graph", list(GRAPHS))
@pytest.mark.parametrize(("tau", "bound"), [(1, 1), (1, 3), (2, 5)])
def test_the_ages_and_clock_are_those_of_each_rank_taking_its_messages(graph, tau, bound):
    """Against the rank's own procedure, emulated message by message, with noisy compute
    times, two slow agents and link times comparable to a step; every age in [tau, S]."""
    topo = GRAPHS[graph]()
    model = TimeModel(compute=0.1, noise=0.8, slow=(0, 3), factor=5.0, latency=0.04, seed=3)
    run = stale_timeline(model, topo, 60, 1e6, tau, bound)
    c = compute_times(model, topo.n, 60)
    reads = topo.W.numpy() != 0
    np.fill_diagonal(reads, False)
    send = reads.sum(axis=0) * model.message_seconds(1e6)
    ages, done = emulate(c, topo.neighbors, send, tau, bound)
    np.testing.assert_array_equal(run.ages, ages)
    np.testing.assert_array_equal(run.done, done)
    np.testing.assert_array_equal(run.clock, done.max(axis=1))
    used = run.ages[:, run.slots >= 0]
    assert used.min() >= tau and used.max() <= bound
    if bound > tau:
        assert used.max() == bound  # the slow agents' neighbours reach the bound


def test_a_step_waits_only_for_the_message_of_age_s():
    """T_i(t+1) = max(r_i(t), max_j a_j(max(t - S, -tau))): no message younger than the bound
    is waited for (a_j(s) = r_j(s) + s_j, messages before step 0 leave with step 0's)."""
    topo = dopt.topology.ring(5)
    model = TimeModel(compute=0.1, noise=0.5, slow=(2,), factor=6.0, latency=0.03, seed=9)
    tau, bound = 1, 4
    run = stale_timeline(model, topo, 40, 0.0, tau, bound)
    ready = run.done[:-1] + compute_times(model, 5, 40)
    send = 2 * model.message_seconds(0.0)
    for t in range(40):
        s = max(max(t - bound, -tau), 0)
        waited = [max([ready[s, j] + send for j in topo.neighbors[i]]) for i in range(5)]
        np.testing.assert_array_equal(run.done[t + 1], np.maximum(ready[t], waited))


def test_a_bound_equal_to_the_delay_is_the_plain_delay():
    """S = tau: every age is tau, and when no agent waits at step 0 (the same compute for
    all, free links) the clock is the plain delay's, bit for bit."""
    topo = dopt.topology.ring(6)
    noisy = TimeModel(compute=0.1, noise=1.0, slow=(1,), factor=3.0, latency=0.02, seed=4)
    for tau in (1, 3):
        run = stale_timeline(noisy, topo, 50, 100.0, tau, tau)
        assert (run.ages == tau).all()
    even = TimeModel(compute=1.0, latency=0.0, bandwidth=1e300)
    for tau in (1, 2):
        np.testing.assert_array_equal(
            stale_timeline(even, topo, 30, 0.0, tau, tau).clock, clock(even, topo, 30, 0.0, tau)
        )


def test_the_same_seed_gives_the_same_ages_and_another_seed_others():
    topo = dopt.topology.ring(6)
    model = TimeModel(compute=0.1, noise=1.0, latency=0.05, seed=5)
    first = stale_timeline(model, topo, 80, 0.0, 1, 4)
    again = stale_timeline(model, topo, 80, 0.0, 1, 4)
    reseeded = TimeModel(compute=0.1, noise=1.0, latency=0.05, seed=6)
    other = stale_timeline(reseeded, topo, 80, 0.0, 1, 4)
    assert np.array_equal(first.ages, again.ages) and np.array_equal(first.clock, again.clock)
    assert not np.array_equal(first.ages, other.ages)


def test_a_longer_schedule_begins_with_the_shorter():
    """The communicator asks for more steps when a run goes on: the first ones stay."""
    topo = dopt.topology.ring(5)
    model = TimeModel(compute=0.1, noise=0.7, slow=(0,), factor=4.0, latency=0.02, seed=2)
    short = stale_timeline(model, topo, 20, 0.0, 1, 3)
    long = stale_timeline(model, topo, 40, 0.0, 1, 3)
    np.testing.assert_array_equal(long.ages[:20], short.ages)
    np.testing.assert_array_equal(long.clock[:21], short.clock)


def test_a_delay_above_its_bound_is_refused():
    with pytest.raises(ValueError, match="1 <= tau <= bound; got tau = 3, bound = 2"):
        stale_run(np.ones((2, 3)), neighbour_slots([(1,), (0,), ()]), np.zeros(3), 3, 2)
