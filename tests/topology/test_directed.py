"""Directed graphs: column-stochastic checks, builders, schedules, and what mixes over them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.algorithms.gossips import RoundsChannel as MultiRound
from decentopt.comm import SimulatedCommunicator
from decentopt.theory import topology_report
from decentopt.topology import AssumptionError, DirectedTopology


@pytest.mark.parametrize(
    ("W", "message"),
    [
        (np.array([[0.5, 0.5], [0.6, 0.5]]), "column 0 .* sums to 1.1"),
        (np.array([[0.0, 0.5], [1.0, 0.5]]), "w_ii = 0 <= 0 for agent 0"),
        (np.array([[1.2, 0.5], [-0.2, 0.5]]), "negative"),
        (np.eye(3), "not strongly connected"),
        (np.array([[1.0, 0.5], [0.0, 0.5]]), "not strongly connected"),  # 1 -> 0 only
        (np.ones((2, 3)) / 2, "square"),
    ],
)
def test_bad_directed_matrices_name_the_fix(W, message):
    with pytest.raises(AssumptionError, match=message):
        DirectedTopology(W)


def test_builders_are_column_stochastic_and_count_sent_messages():
    for topo in (
        dopt.topology.directed_ring(6),
        dopt.topology.directed_exponential(10),
        dopt.topology.random_directed(9, 0.3, seed=1),
    ):
        W = topo.W.numpy()
        np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-12)
        assert topo.offers == {"column", "static"} and not topo.psd
        assert not isinstance(topo, dopt.topology.Topology)  # a sibling, not a subclass
        # degrees are messages sent: out-neighbours (column j's other non-zeros)
        assert list(topo.degrees) == [int((W[:, j] != 0).sum() - 1) for j in range(topo.n)]
        for i in range(topo.n):
            assert set(topo.neighbors[i]) == {j for j in range(topo.n) if j != i and W[i, j]}
    ring = dopt.topology.directed_ring(6)
    assert ring.out_neighbors[0] == (1,) and ring.neighbors[0] == (5,)
    assert ring.doubly_stochastic
    assert 0 < ring.mixing_rate < 1
    assert not hasattr(ring, "lam")  # the symmetric graphs' quantity means nothing here
    assert not dopt.topology.random_directed(9, 0.3, seed=1).doubly_stochastic
    assert dopt.topology.directed_exponential(8).degrees.tolist() == [3] * 8
    assert "directed" in ring.summary()
    lazy = ring.lazy()
    assert isinstance(lazy, DirectedTopology) and lazy.W[0, 0] == 0.75


def test_from_digraph_weights_by_out_degree():
    A = np.array([[0, 1, 1], [0, 0, 1], [1, 0, 0]])  # 0 -> 1, 2; 1 -> 2; 2 -> 0
    W = dopt.topology.from_digraph(A).W.numpy()
    np.testing.assert_allclose(W[:, 0], [1 / 3, 1 / 3, 1 / 3])
    np.testing.assert_allclose(W[:, 1], [0, 1 / 2, 1 / 2])
    np.testing.assert_allclose(W[:, 2], [1 / 2, 0, 1 / 2])


def test_directed_one_peer_exponential_sends_one_message_and_averages_exactly():
    schedule = dopt.topology.directed_one_peer_exponential(16)
    assert schedule.directed and schedule.period == 4 and not schedule.psd
    for t in range(4):
        assert schedule.at(t).messages.tolist() == [1] * 16
        assert schedule.at(t).targets(3) == ((3 + 2**t) % 16,)
        assert schedule.at(t).neighbours(3) == (((3 - 2**t) % 16, 0.5),)
    assert schedule.period_contraction < 1e-12  # the product over a period is 11^T / n
    symmetric = dopt.topology.one_peer_exponential(16)
    assert symmetric.at(0).messages.tolist() == [2] * 16  # the symmetrised graph sends two
    assert schedule.lazy().directed


def test_directed_schedule_checks_columns_and_strong_connectivity():
    from decentopt.topology.schedule import GossipRound, TopologySchedule

    n = 4
    idx = np.arange(n)
    forward = GossipRound.from_entries(n, (idx + 1) % n, idx, np.full(n, 0.5))
    TopologySchedule(n, "ok", (forward,), directed=True)
    with pytest.raises(AssumptionError, match="not symmetric"):
        TopologySchedule(n, "asymmetric", (forward,))
    half = GossipRound.from_entries(n, [1, 0], [0, 1], [0.5, 0.5])  # 0 <-> 1 only
    with pytest.raises(AssumptionError, match=r"2 groups|groups that never"):
        TopologySchedule(n, "split", (half,), directed=True)
    bad = GossipRound(np.full(n, 0.5), np.array([(idx + 1) % n]), np.full((1, n), 0.6))
    with pytest.raises(AssumptionError, match="not column-stochastic"):
        TopologySchedule(n, "bad", (bad,), directed=True)


def test_mixing_over_directed_graphs_matches_the_matrix():
    topo = dopt.topology.random_directed(70, 0.05, seed=3)  # large enough for the sparse rows
    z = torch.randn(70, 2048, dtype=torch.float64)
    for kernel in ("auto", "dense", "sparse"):
        got = SimulatedCommunicator(topo, kernel=kernel).mix(z)
        torch.testing.assert_close(got, topo.W @ z)
    comm = SimulatedCommunicator(topo)
    comm.mix(z)
    assert comm.stats.bytes_sent == int(topo.degrees.sum()) * 2048 * 8
    with pytest.raises(ValueError, match="Chebyshev acceleration needs a symmetric W"):
        MultiRound(SimulatedCommunicator(topo), rounds=3)
    MultiRound(SimulatedCommunicator(topo), rounds=3, acceleration="none")


def test_registry_builds_the_new_graphs_by_name():
    for name in ("chain", "binary_tree", "directed_ring", "directed_exponential", "random_directed",
                 "directed_one_peer_exponential"):  # fmt: skip
        assert dopt.topology.make(name, 8).n == 8


def test_the_topology_report_of_a_directed_graph_states_what_holds_and_gives_no_theorem_steps():
    for graph in (dopt.topology.directed_ring(8), dopt.topology.directed_one_peer_exponential(8)):
        rows = dict(topology_report(graph))
        assert "push_sum" in rows["Assumption 1"] and "not symmetric" in rows["Assumption 1"]
        assert not any("Theorem" in key for key in rows)
    assert "also row-stochastic" in dict(topology_report(dopt.topology.directed_ring(8)))["P"]
    rows = dict(topology_report(dopt.topology.random_directed(8, 0.3, seed=1)))
    assert rows["P"].startswith("column-stochastic") and "row" not in rows["P"]
    assert "relaying" in dict(topology_report(dopt.topology.chain(5)))["tree"]
    assert "tree" not in dict(topology_report(dopt.topology.ring(5)))


def test_sizes_that_are_not_powers_of_two():
    """n = 12: ceil(log2 12) = 4 peers (offsets 1, 2, 4, 8), weights 1/5, and 4 rounds of
    the one-peer graph; the directed ring's rate is |lambda_2| = |(1 + e^{2 pi i/12})/2|
    = cos(pi/12) = 0.966 (its real part, 0.933, is not the rate)."""
    import math

    W = dopt.topology.directed_exponential(12).W.numpy()
    assert ((W > 0).sum(axis=0) == 5).all() and ((W > 0).sum(axis=1) == 5).all()
    np.testing.assert_allclose(W[W > 0], 1 / 5)
    assert [i for i in range(12) if W[i, 0] > 0] == [0, 1, 2, 4, 8]
    assert dopt.topology.directed_one_peer_exponential(12).period == 4
    assert dopt.topology.directed_ring(12).mixing_rate == pytest.approx(
        math.cos(math.pi / 12), abs=1e-12
    )
    assert dopt.topology.directed_ring(12).mixing_rate == pytest.approx(0.966, abs=5e-4)
