"""EDM identities: beta = 0 is ED; the average follows centralized momentum SGD."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from tests.algorithms.test_common import LinearOracle


def random_topology(n: int, seed: int) -> dopt.topology.Topology:
    """A random W satisfying Assumption 1: random graph, random positive edge weights."""
    rng = np.random.default_rng(seed)
    W = np.zeros((n, n))
    for i in range(n):  # a ring guarantees connectivity; chords add irregularity
        W[i, (i + 1) % n] = W[(i + 1) % n, i] = rng.uniform(0.05, 0.3)
    for _ in range(n):
        i, j = rng.choice(n, 2, replace=False)
        W[i, j] = W[j, i] = rng.uniform(0.05, 0.3)
    W /= W.sum(axis=1).max() * 1.01
    np.fill_diagonal(W, 1 - W.sum(axis=1))
    return dopt.topology.from_matrix((W + np.eye(n)) / 2)


def test_random_topology_is_irregular():
    W = random_topology(9, 0).W.numpy()
    assert len(np.unique(np.round(W[W > 0], 12))) > 5


def test_edm_with_beta_zero_is_ed():
    topo = random_topology(8, 1)
    prob = dopt.problems.Quadratic.paper(n=8, d=4, p=6, c=0.5, sigma2=0.05, repetitions=3, seed=2)
    ed = dopt.simulate(dopt.algorithms.make("ed", lr=0.05), prob, topo, 300, seed=7, record="all")
    edm = dopt.simulate(
        dopt.algorithms.make("edm", lr=0.05, beta=0.0), prob, topo, 300, seed=7, record="all"
    )
    assert (edm.final_state.x - ed.final_state.x).abs().max() <= 1e-12
    np.testing.assert_allclose(edm.history["dist_to_opt"], ed.history["dist_to_opt"], rtol=1e-10)


@pytest.mark.parametrize(
    ("network", "steps", "atol"),
    [
        (lambda n: random_topology(n, 3), 200, 1e-11),
        # a changing W_t (doubly stochastic every round) keeps the identity; ED's correction
        # is unstable over it, so fewer steps keep the iterates' scale moderate
        (lambda n: dopt.topology.random_matchings(n, seed=2), 60, 1e-10),
    ],
    ids=["random W", "random matchings"],
)
def test_edm_average_is_momentum_sgd(network, steps, atol):
    """xbar(t+1) = xbar(t) - alpha mbar(t) exactly, with noisy gradients and a random W."""
    n, d = 9, 5
    comm = SimulatedCommunicator(network(n))
    oracle = LinearOracle(n, d, steps, seed=4, noise=1.0)
    alpha, beta = 0.07, 0.85
    alg = dopt.algorithms.make("edm", lr=alpha, beta=beta)
    state = alg.init(torch.from_numpy(np.random.default_rng(5).standard_normal((n, d))))
    xbar = state.x.mean(0)
    mbar = torch.zeros(d)
    for t in range(steps):
        g = oracle.stacked(t, state.x)
        mbar = beta * mbar + (1 - beta) * g.mean(0)
        xbar = xbar - alpha * mbar
        state = alg.step(state, g, comm)
        torch.testing.assert_close(state.x.mean(0), xbar, rtol=0, atol=atol)
        torch.testing.assert_close(state.rule.m.mean(0), mbar, rtol=0, atol=atol / 10)
    # the agents do not agree (so the identity is not trivial)
    assert (state.x - state.x.mean(0)).abs().max() > 1e-3


def test_edm_two_step_recursion():
    """X(t+2) = W(2X(t+1) - X(t) - alpha M(t+1) + alpha M(t)), X(1) = W(X(0) - alpha M(0))."""
    n, d, steps = 6, 3, 30
    topo = random_topology(n, 6)
    W = topo.W
    comm = SimulatedCommunicator(topo)
    oracle = LinearOracle(n, d, steps, seed=8)
    alpha = 0.1
    alg = dopt.algorithms.make("edm", lr=alpha, beta=0.6)
    state = alg.init(torch.randn(n, d))
    xs, ms = [state.x], []
    for t in range(steps):
        state = alg.step(state, oracle.stacked(t, state.x), comm)
        xs.append(state.x)
        ms.append(state.rule.m)
    torch.testing.assert_close(xs[1], W @ (xs[0] - alpha * ms[0]))
    for t in range(steps - 2):
        want = W @ (2 * xs[t + 1] - xs[t] - alpha * ms[t + 1] + alpha * ms[t])
        torch.testing.assert_close(xs[t + 2], want, rtol=1e-12, atol=1e-12)


def test_gradient_tracker_average_equals_gradient_average():
    n, d, steps = 7, 3, 40
    topo = random_topology(n, 9)
    comm = SimulatedCommunicator(topo)
    oracle = LinearOracle(n, d, steps, seed=10, noise=1.0)
    for name in ("dsgt", "dsgt_hb"):
        for atc in (True, False):
            alg = dopt.algorithms.make(name, lr=0.05, atc=atc)
            state = alg.init(torch.zeros(n, d))
            for t in range(steps):
                g = oracle.stacked(t, state.x)
                state = alg.step(state, g, comm)
                torch.testing.assert_close(state.rule.y.mean(0), g.mean(0), rtol=0, atol=1e-12)


def test_tracking_without_atc_packs_two_messages_in_one_round():
    """atc=False: Y+ = W Y + G+ - G, equal to a per-agent loop, one (packed) round per step."""
    from tests.algorithms.reference import run_reference

    n, d, steps = 7, 3, 12
    topo = random_topology(n, 12)
    oracle = LinearOracle(n, d, steps, seed=13)
    x0 = np.random.default_rng(14).standard_normal((n, d))
    cases = (
        ("dsgt", {"lr": 0.05, "atc": False}),
        ("dsgt_hb", {"lr": 0.05, "beta": 0.7, "atc": False}),
    )
    for name, hp in cases:
        alg = dopt.algorithms.make(name, **hp)
        comm = SimulatedCommunicator(topo)
        state = alg.init(torch.from_numpy(x0))
        got = []
        for t in range(steps):
            state = alg.step(state, oracle.stacked(t, state.x), comm)
            got.append(state.x.numpy().copy())
        ref = run_reference(name, hp, topo.W.numpy(), list(x0), oracle.agent, steps)
        for t in range(steps):
            np.testing.assert_allclose(got[t], np.stack(ref[t]), rtol=1e-12, atol=1e-12)
        assert alg.rounds_per_step == 1 and comm.stats.rounds == steps
