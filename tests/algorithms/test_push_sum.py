"""Push-sum over directed graphs: conserved mass, de-biased averages, exact tracking."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator


@pytest.fixture(scope="module")
def digraph():
    topo = dopt.topology.random_directed(12, 0.2, seed=5)
    assert not topo.doubly_stochastic  # the weights really move
    return topo


def test_mass_is_conserved_and_the_de_biased_average_follows_sgd(digraph):
    """sum_i u_i moves by -alpha sum_i g_i exactly and sum_i w_i stays n, whatever P."""
    n, d = digraph.n, 4
    alg = dopt.algorithms.make("sgp", lr=0.1, beta=0.0)
    comm = SimulatedCommunicator(digraph)
    gen = torch.Generator().manual_seed(0)
    state = alg.init(torch.randn(n, d, dtype=torch.float64, generator=gen))
    mass = (state.x * state.gossip["w"]).sum(0)
    for _ in range(30):
        grad = torch.randn(n, d, dtype=torch.float64, generator=gen)
        state = alg.step(state, grad, comm)
        mass = mass - 0.1 * grad.sum(0)
        torch.testing.assert_close(
            (state.x * state.gossip["w"]).sum(0), mass, rtol=1e-12, atol=1e-12
        )
        torch.testing.assert_close(
            state.gossip["w"].sum(), torch.tensor(float(n), dtype=torch.float64)
        )
    assert float(state.gossip["w"].min()) < 0.9 < 1.1 < float(state.gossip["w"].max())


def test_push_sum_consensus_reaches_the_true_average(digraph):
    """Without gradients the de-biased z_i tend to the uniform average of the start, where
    plain mixing with the same P tends to a Perron-weighted one."""
    n = digraph.n
    x0 = torch.randn(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    alg = dopt.algorithms.make("sgp", lr=1e-3, beta=0.0)  # lr unused: zero gradients
    comm = SimulatedCommunicator(digraph)
    state = alg.init(x0)
    plain = x0.clone()
    for _ in range(300):
        state = alg.step(state, torch.zeros_like(x0), comm)
        plain = digraph.W @ plain
    target = x0.mean(0, keepdim=True).expand_as(x0)
    torch.testing.assert_close(state.x, target, rtol=0, atol=1e-10)
    biased = (plain - target).abs().max()
    assert biased > 1e-2  # plain gossip over a column-stochastic P misses the average


@pytest.mark.parametrize(
    "graph",
    [
        lambda: dopt.topology.random_directed(16, 0.2, seed=5),
        lambda: dopt.topology.directed_one_peer_exponential(16),
    ],
)
def test_push_diging_reaches_the_optimum_over_directed_graphs(graph):
    prob = dopt.problems.Quadratic.paper(
        n=16, d=5, p=10, c=[1.0, 0.25], sigma2=0.0, repetitions=2, seed=1
    )
    res = dopt.simulate(dopt.algorithms.make("push_diging", lr=0.05), prob, graph(), 4000, seed=0)
    assert np.all(res.final("dist_to_opt") < 1e-10)
    sgp = dopt.simulate(dopt.algorithms.make("sgp", lr=0.05, beta=0.0), prob, graph(), 4000, seed=0)
    assert np.all(sgp.final("dist_to_opt") > 1e-6)  # SGP keeps a heterogeneity bias


def test_methods_refuse_graphs_they_cannot_run_on():
    prob = dopt.problems.Quadratic.paper(n=8, d=3, p=5, repetitions=1, seed=0)
    directed = dopt.topology.directed_ring(8)
    with pytest.raises(
        ValueError, match=r"edm runs on a symmetric doubly stochastic W.*undirected"
    ):
        dopt.simulate(dopt.algorithms.make("edm"), prob, directed, 10)
    # a rule that push-sum serves is told how to compose it
    with pytest.raises(ValueError, match=r"dmsgd runs on a symmetric.*gossip='push_sum'"):
        dopt.simulate(dopt.algorithms.make("dmsgd"), prob, directed, 10)
    with pytest.raises(ValueError, match=r"dsgt runs on a symmetric.*'push_sum \(atc=False\)'"):
        dopt.simulate(dopt.algorithms.make("dsgt"), prob, directed, 10)
    with pytest.raises(ValueError, match=r"relaysgd runs on a static tree.*chain"):
        dopt.simulate(dopt.algorithms.make("relaysgd"), prob, dopt.topology.ring(8), 10)
    with pytest.raises(ValueError, match="relaysgd runs on a static tree"):
        dopt.simulate(
            dopt.algorithms.make("relaysgd"), prob, dopt.topology.one_peer_exponential(8), 10
        )
    # push-sum accepts symmetric graphs too (doubly stochastic is column-stochastic)
    dopt.simulate(dopt.algorithms.make("sgp"), prob, dopt.topology.ring(8), 10)
    from decentopt.distributed import DecentralizedOptimizer

    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="dsgd runs on a symmetric"):
        DecentralizedOptimizer(
            model.parameters(), "dsgd", SimulatedCommunicator(dopt.topology.directed_ring(1))
        )
