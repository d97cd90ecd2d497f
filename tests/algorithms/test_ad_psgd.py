"""AD-PSGD's synchronous equivalent: pairs of a random matching average, then step along
gradients computed before the averaging; the average is centralized SGD exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.algorithms import make
from decentopt.algorithms.ad_psgd import random_matching
from tests.algorithms.test_common import LinearOracle


def test_each_iteration_averages_over_a_random_maximal_matching():
    graph = dopt.topology.erdos_renyi(9, 0.4, seed=3)
    edges = {(i, j) for i, peers in enumerate(graph.neighbors) for j in peers}
    seen = set()
    for t in range(20):
        p = random_matching(graph.neighbors, seed=0, t=t)
        paired = np.flatnonzero(p >= 0)
        assert all(p[p[i]] == i and (i, int(p[i])) in edges for i in paired)  # a matching
        free = np.flatnonzero(p < 0)
        assert not any((int(i), int(j)) in edges for i in free for j in free)  # maximal
        np.testing.assert_array_equal(p, random_matching(graph.neighbors, seed=0, t=t))
        seen.add(tuple(p))
    assert len(seen) >= 5  # the matching changes from iteration to iteration


def test_the_average_is_centralized_sgd_on_the_gradients_before_the_averaging():
    graph = dopt.topology.erdos_renyi(8, 0.4, seed=1)
    n, d, steps, alpha = graph.n, 3, 15, 0.05
    oracle = LinearOracle(n, d, steps, seed=4)
    alg = make("ad_psgd", lr=alpha, seed=2)
    comm = dopt.comm.SimulatedCommunicator(graph)
    state = alg.init(torch.from_numpy(np.random.default_rng(5).standard_normal((n, d))))
    xbar = state.x.numpy().mean(0)
    for t in range(steps):
        grads = oracle.stacked(t, state.x)
        xbar = xbar - alpha * grads.numpy().mean(0)
        state = alg.step(state, grads, comm)
        np.testing.assert_allclose(state.x.numpy().mean(0), xbar, rtol=1e-12, atol=1e-13)
    assert comm.stats.rounds == steps


def test_ad_psgd_runs_at_its_own_pace_under_the_time_model():
    from decentopt.driver.timeline import pace

    assert pace(make("ad_psgd")) == (0, True)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: make("ad_psgd", seed=-1), r"seed must be a whole number >= 0"),
        (lambda: make("ad_psgd", gossip="push_sum"), r"ad_psgd cannot take push_sum gossip"),
        (lambda: make("osgp", tau=-2), r"tau must be >= 0; got -2"),
    ],
)
def test_bad_input_is_refused_in_one_line(call, message):
    with pytest.raises((TypeError, ValueError), match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_ad_psgd_needs_a_static_undirected_graph():
    prob = dopt.problems.Quadratic.paper(n=8, d=4, p=8, c=0.5, sigma2=0.0, repetitions=1)
    with pytest.raises(ValueError, match=r"ad_psgd runs on one fixed W"):
        dopt.simulate(make("ad_psgd"), prob, dopt.topology.one_peer_exponential(8), 5)


def test_osgp_without_delay_is_sgp_bit_for_bit():
    graph = dopt.topology.random_directed(7, 0.3, seed=4)
    n, d, steps = graph.n, 3, 10
    oracle = LinearOracle(n, d, steps, seed=1)
    x0 = torch.from_numpy(np.random.default_rng(2).standard_normal((n, d)))
    out = []
    for alg in (make("osgp", tau=0, lr=0.05, beta=0.8), make("sgp", lr=0.05, beta=0.8)):
        comm = dopt.comm.SimulatedCommunicator(graph)
        state = alg.init(x0.clone())
        for t in range(steps):
            state = alg.step(state, oracle.stacked(t, state.x), comm)
        out.append(state.x)
    assert torch.equal(out[0], out[1])


def test_each_matched_pair_averages_and_the_consensus_distance_falls_by_their_gaps():
    """Without gradients a step is the matching's pairwise average (Lian et al., 2018,
    Algorithm 1): x_i, x_j <- (x_i + x_j) / 2 for each matched pair, the others unchanged;
    the mean is kept and the consensus distance sum_i ||x_i - xbar||^2 falls by exactly
    sum over pairs of ||x_i - x_j||^2 / 2."""
    graph = dopt.topology.erdos_renyi(9, 0.4, seed=3)
    alg = make("ad_psgd", lr=0.1, seed=5)
    comm = dopt.comm.SimulatedCommunicator(graph)
    x = np.random.default_rng(6).standard_normal((graph.n, 4))
    state = alg.init(torch.from_numpy(x.copy()))
    start = ((x - x.mean(0)) ** 2).sum()
    for t in range(6):
        partner = random_matching(graph.neighbors, seed=5, t=t)
        want = x.copy()
        paired = np.flatnonzero(partner >= 0)
        want[paired] = (x[paired] + x[partner[paired]]) / 2
        state = alg.step(state, torch.zeros_like(state.x), comm)
        np.testing.assert_allclose(state.x.numpy(), want, rtol=0, atol=1e-15)
        gaps = sum(((x[i] - x[partner[i]]) ** 2).sum() for i in paired) / 2  # each pair twice
        before = ((x - x.mean(0)) ** 2).sum()
        after = ((want - want.mean(0)) ** 2).sum()
        assert after == pytest.approx(before - gaps / 2, rel=1e-12)
        np.testing.assert_allclose(want.mean(0), x.mean(0), atol=1e-15)
        x = want
    assert ((x - x.mean(0)) ** 2).sum() < 0.5 * start  # six matchings: well mixed already


def test_osgp_delays_its_messages_one_iteration_by_default():
    """OSGP (Assran et al., 2019, Algorithm 3) overlaps one iteration: tau = 1, i.e. DmSGD
    with delayed(1, push_sum) bit for bit, and not the undelayed SGP nor a delay of 2."""
    graph = dopt.topology.random_directed(7, 0.3, seed=4)
    n, d, steps = graph.n, 3, 10
    oracle = LinearOracle(n, d, steps, seed=1)
    x0 = torch.from_numpy(np.random.default_rng(2).standard_normal((n, d)))

    def final(alg):
        comm = dopt.comm.SimulatedCommunicator(graph)
        state = alg.init(x0.clone())
        for t in range(steps):
            state = alg.step(state, oracle.stacked(t, state.x), comm)
        return state.x

    osgp = final(make("osgp", lr=0.05, beta=0.8))
    assert make("osgp").tau == 1
    assert torch.equal(osgp, final(make("dmsgd", lr=0.05, beta=0.8, gossip="delayed(1, push_sum)")))
    assert not torch.equal(osgp, final(make("sgp", lr=0.05, beta=0.8)))
    assert not torch.equal(osgp, final(make("osgp", tau=2, lr=0.05, beta=0.8)))
