"""RelaySGD: each agent holds the uniform average of delayed models, exactly, on any tree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator


def distances(topo: dopt.topology.Topology) -> np.ndarray:
    import scipy.sparse.csgraph as cg

    return cg.shortest_path((topo.W.numpy() != 0).astype(float), unweighted=True).astype(int)


@pytest.mark.parametrize(
    "tree",
    [
        lambda: dopt.topology.chain(7),
        lambda: dopt.topology.binary_tree(9),
        lambda: dopt.topology.star(6),
        lambda: dopt.topology.spanning_tree(dopt.topology.erdos_renyi(10, 0.3, seed=2)),
    ],
)
def test_every_agent_holds_the_average_of_delayed_half_steps(tree):
    """x_i(t+1) = (1/n) sum_j x_j(t - delay + 1/2) with delay = max(d(i, j) - 1, 0): a
    neighbour's half step arrives in the same round, each further hop costs a round; x(0)
    stands in for agents not reached yet."""
    topo = tree()
    n, d = topo.n, 3
    dist = distances(topo)
    alg = dopt.algorithms.make("relaysgd", lr=0.1, beta=0.5)
    comm = SimulatedCommunicator(topo)
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(1, d, dtype=torch.float64, generator=gen).expand(n, d).clone()
    state = alg.init(x0)
    halves = []
    for t in range(2 * n):
        grad = torch.randn(n, d, dtype=torch.float64, generator=gen)
        m = 0.5 * state.rule.m + 0.5 * grad
        halves.append(state.x - 0.1 * m)
        state = alg.step(state, grad, comm)
        want = torch.stack(
            [
                sum(
                    halves[t - max(dist[i, j] - 1, 0)][j] if dist[i, j] <= t + 1 else x0[j]
                    for j in range(n)
                )
                / n
                for i in range(n)
            ]
        )
        torch.testing.assert_close(state.x, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(
        state.rule.counts.sum(1).squeeze(-1), torch.full((n,), n - 1.0, dtype=torch.float64)
    )


def test_relaysgd_reaches_the_optimum_with_exact_gradients():
    prob = dopt.problems.Quadratic.paper(
        n=16, d=5, p=10, c=[1.0, 0.25], sigma2=0.0, repetitions=2, seed=1
    )
    res = dopt.simulate(
        dopt.algorithms.make("relaysgd", lr=0.05, beta=0.0), prob, dopt.topology.chain(16), 4000
    )
    assert np.all(res.final("dist_to_opt") < 1e-10)
    # gossip on the same chain keeps DSGD's bias
    dsgd = dopt.simulate(dopt.algorithms.make("dsgd", lr=0.05), prob, dopt.topology.chain(16), 4000)
    assert np.all(dsgd.final("dist_to_opt") > 1e-3)


def test_exchange_delivers_each_neighbour_its_own_message():
    topo = dopt.topology.binary_tree(5)  # 0: 1, 2; 1: 0, 3, 4; 2: 0; 3: 1; 4: 1
    comm = SimulatedCommunicator(topo)
    assert comm.slots == 3
    out = torch.zeros(5, 3, 2, dtype=torch.float32)
    for i, peers in enumerate(topo.neighbors):
        for s, j in enumerate(peers):
            out[i, s] = torch.tensor([i, j])  # "from i to j"
    (got,) = comm.exchange([out])
    for i, peers in enumerate(topo.neighbors):
        for s, j in enumerate(peers):
            assert got[i, s].tolist() == [j, i]  # slot s of i: what its s-th neighbour sent it
        assert torch.equal(got[i, len(peers) :], torch.zeros(3 - len(peers), 2))
    assert comm.stats.rounds == 1
    assert comm.stats.bytes_sent == 2 * 4 * 2 * 4  # 4 edges, both ways, 2 floats
    with pytest.raises(ValueError, match="static undirected graph"):
        SimulatedCommunicator(dopt.topology.directed_ring(4)).exchange([torch.zeros(4, 1, 1)])
    with pytest.raises(ValueError, match=r"\(n, slots, ...\) = \(5, 3, ...\)"):
        comm.exchange([torch.zeros(5, 2, 1)])
