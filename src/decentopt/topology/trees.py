"""Trees: the graphs RelaySGD relays over (Vogels et al., NeurIPS 2021).

On a tree every pair of agents is joined by exactly one path, so a message relayed
along the edges reaches every agent once: RelaySum sums each agent's value exactly
once, after as many rounds as the agents are apart. Each builder returns a
:class:`~decentopt.topology.Topology` (Metropolis weights, lazy where an eigenvalue
would be negative), so every other method runs on the same tree for comparison.

* :func:`chain` -- agents in a line, ``i -- i + 1`` (diameter ``n - 1``);
* :func:`binary_tree` -- agent ``i`` below ``(i - 1) // 2`` (diameter about ``2 log2 n``);
* :func:`spanning_tree` -- the breadth-first tree of any connected topology from a root
  (the RelaySum paper's spanning trees of a given network);
* :func:`~decentopt.topology.star` is a tree too.
"""

from __future__ import annotations

import networkx as nx

from decentopt.topology.graphs import from_networkx
from decentopt.topology.topology import Topology, agents

__all__ = ["binary_tree", "chain", "spanning_tree"]


def chain(n: int) -> Topology:
    """Agents ``0 .. n-1`` in a line."""
    n = agents(n)
    return from_networkx(nx.path_graph(n), name=f"chain({n})")


def binary_tree(n: int) -> Topology:
    """A complete binary tree in heap order: agent ``i > 0`` hangs below ``(i - 1) // 2``."""
    n = agents(n)
    return from_networkx(nx.full_rary_tree(2, n), name=f"binary_tree({n})")  # heap order


def spanning_tree(network: Topology, root: int = 0) -> Topology:
    """The breadth-first spanning tree of ``network``'s graph from ``root`` (neighbours in
    ascending order): distances from the root stay those of the graph."""
    if not isinstance(network, Topology):
        raise TypeError(
            "spanning_tree needs a static undirected Topology; "
            f"got {getattr(network, 'name', network)!r}"
        )
    n = network.n
    if not 0 <= root < n:
        raise ValueError(f"spanning_tree: root must be an agent in 0 .. {n - 1}; got {root}")
    graph = nx.from_dict_of_lists(dict(enumerate(network.neighbors)))
    tree = nx.bfs_tree(graph, root, sort_neighbors=sorted).to_undirected()
    return from_networkx(tree, name=f"spanning_tree({network.name})")
