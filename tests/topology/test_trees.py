"""Trees for relaying: shapes, Assumption 1, spanning trees."""

from __future__ import annotations

import pytest

import decentopt as dopt


def test_chain_and_binary_tree():
    chain = dopt.topology.chain(6)
    assert chain.is_tree and chain.neighbors[0] == (1,) and chain.neighbors[3] == (2, 4)
    tree = dopt.topology.binary_tree(7)
    assert tree.is_tree and tree.neighbors[0] == (1, 2) and tree.neighbors[2] == (0, 5, 6)
    assert tree.max_degree == 3
    assert dopt.topology.star(5).is_tree
    assert dopt.topology.chain(1).is_tree and dopt.topology.chain(2).is_tree
    for topo in (chain, tree):
        assert topo.lam_min >= 0  # Assumption 1 holds: every method runs on them


def test_graphs_with_cycles_are_not_trees():
    for topo in (dopt.topology.ring(6), dopt.topology.complete(4), dopt.topology.torus(9)):
        assert not topo.is_tree
    assert not dopt.topology.one_peer_exponential(8).is_tree


def test_spanning_tree_keeps_breadth_first_distances():
    import scipy.sparse.csgraph as cg

    graph = dopt.topology.erdos_renyi(20, 0.2, seed=4)
    tree = dopt.topology.spanning_tree(graph, root=3)
    assert tree.is_tree and tree.n == 20
    hops = lambda t: cg.shortest_path((t.W.numpy() != 0) * 1.0, unweighted=True, indices=3)  # noqa: E731
    assert (hops(tree) == hops(graph)).all()
    for i, peers in enumerate(tree.neighbors):  # every tree edge is an edge of the graph
        assert set(peers) <= set(graph.neighbors[i])
    ring_tree = dopt.topology.spanning_tree(dopt.topology.ring(8))  # the edge 4 -- 5 is cut
    assert ring_tree.neighbors[4] == (3,) and ring_tree.neighbors[5] == (6,)


def test_spanning_tree_errors():
    with pytest.raises(ValueError, match="root must be an agent"):
        dopt.topology.spanning_tree(dopt.topology.ring(4), root=4)
    with pytest.raises(TypeError, match="static undirected"):
        dopt.topology.spanning_tree(dopt.topology.directed_ring(4))


@pytest.mark.parametrize(("graph", "options"), [("torus", {}), ("erdos_renyi", {"p": 0.3})])
def test_the_spanning_tree_of_a_named_graph_uses_only_its_links(graph, options):
    tree = dopt.topology.make("spanning_tree", 16, graph=graph, seed=2, **options)
    base = dopt.topology.make(graph, 16, **({"seed": 2} | options if options else {}))
    assert tree.is_tree and tree.n == 16
    for i in range(16):
        assert set(tree.neighbors[i]) <= set(base.neighbors[i])
    with pytest.raises(ValueError, match="unknown graph to span 'moon'"):
        dopt.topology.make("spanning_tree", 16, graph="moon")
