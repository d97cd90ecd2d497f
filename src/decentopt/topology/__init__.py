"""Communication graphs, mixing matrices and their spectral quantities.

Static graphs are :class:`Topology` objects (one ``W``); time-varying ones are
:class:`TopologySchedule` objects (``W_t`` by gossip round, :mod:`.schedule`).
Both are registered by name in :data:`REGISTRY` and accepted by every
communicator. Directed graphs (:class:`DirectedTopology`, and schedules with
``directed=True``) carry column-stochastic ``W`` for the push-sum methods; trees
(:func:`chain`, :func:`binary_tree`, :func:`spanning_tree`, :func:`star`) are what
RelaySGD relays over.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from decentopt._checks import unknown_name
from decentopt._registry import Registry
from decentopt.topology.directed import (
    DirectedTopology,
    check_column_stochastic,
    directed_exponential,
    directed_one_peer_exponential,
    directed_ring,
    from_digraph,
    random_directed,
)
from decentopt.topology.graphs import (
    complete,
    erdos_renyi,
    exponential,
    from_adjacency,
    from_matrix,
    from_networkx,
    grid,
    hypercube,
    max_degree_weights,
    metropolis_hastings_weights,
    ring,
    star,
    torus,
)
from decentopt.topology.schedule import GossipRound, TopologySchedule
from decentopt.topology.time_varying import (
    base_graph,
    one_peer_exponential,
    one_peer_hypercube,
    random_matchings,
    sequence,
)
from decentopt.topology.topology import AssumptionError, Graph, Topology, check_assumption1
from decentopt.topology.trees import binary_tree, chain, spanning_tree

#: A static graph (symmetric or directed) or a time-varying one: what communicators accept.
#: Each offers its capabilities as ``offers`` (``"symmetric"``, ``"column"``, ``"static"``,
#: ``"tree"``); methods and gossips declare what they need of them.
Network = Topology | DirectedTopology | TopologySchedule

#: Static undirected graphs a spanning tree can be taken of, by name.
_SPANNED = Registry(
    "graph to span",
    [(f.__name__, f) for f in (ring, complete, grid, torus, hypercube, exponential, erdos_renyi)],
)


def spanning_tree_of(
    n: int, graph: str = "torus", root: int = 0, p: float = 0.2, seed: int = 0
) -> Topology:
    """The breadth-first spanning tree of the graph ``graph`` over ``n`` agents (its
    options: ``p`` and ``seed`` for ``erdos_renyi``), for RelaySGD on a network's links:
    ``[topology] name = "spanning_tree", graph = "torus"`` in a specification."""
    build = _SPANNED.find(graph)
    base = erdos_renyi(n, p, seed=seed) if build is erdos_renyi else build(n)
    return spanning_tree(base, root=root)


#: The graph families; each is registered under its function's name (``spanning_tree_of``
#: as ``spanning_tree``).
_FAMILIES = (
    ring,
    complete,
    star,
    grid,
    torus,
    hypercube,
    exponential,
    erdos_renyi,
    one_peer_exponential,
    one_peer_hypercube,
    base_graph,
    random_matchings,
    chain,
    binary_tree,
    spanning_tree_of,
    directed_ring,
    directed_exponential,
    random_directed,
    directed_one_peer_exponential,
)
#: Graph families by name (used by configuration files and the CLI).
REGISTRY: Registry[Callable[..., Topology | TopologySchedule]] = Registry(
    "topology", [(f.__name__.removesuffix("_of"), f) for f in _FAMILIES]
)


def check_arguments(name: str, kwargs: dict[str, Any]) -> None:
    """Refuse an unknown topology, an unknown argument or a missing one, naming the fix."""
    params = inspect.signature(REGISTRY.find(name)).parameters
    valid = list(params)[1:]  # the first is the number of agents
    for key in kwargs:
        if key == "n":
            raise ValueError(
                f"'n' is not a key of {name}: the number of agents is the specification's "
                "top-level 'agents'"
            )
        if key not in valid:
            if not valid:
                raise ValueError(f"{name} takes no options (only its name); remove '{key}'")
            said = unknown_name("key", key, ["name", *valid])
            raise ValueError(said.replace(f"key {key!r}", f"key {key!r} for {name}", 1))
    for key in valid:
        if params[key].default is inspect.Parameter.empty and key not in kwargs:
            raise ValueError(f"{name} needs '{key}'")


def weight_arrays(network: Network) -> list[np.ndarray]:
    """What fixes a network's weights: ``W``, or the gather form of each round of a period
    (of the first 8 rounds of a random schedule); ranks compare digests of them."""
    if not isinstance(network, TopologySchedule):
        return [network.W.numpy()]
    rounds = [network.at(t) for t in range(network.period or 8)]
    return [a for r in rounds for a in (r.self_weight, r.peers, r.weights)]


def weights_digest(network: Network, extra: str = "") -> str:
    """A short SHA-256 of :func:`weight_arrays` (and ``extra``): what ranks compare."""
    arrays = [np.ascontiguousarray(a).tobytes() for a in weight_arrays(network)]
    return hashlib.sha256(b"".join(arrays) + extra.encode()).hexdigest()[:16]


def make(name: str, *args: Any, **kwargs: Any) -> Topology | TopologySchedule:
    """Build a registered topology by name, e.g. ``make("ring", 32)``."""
    return REGISTRY.find(name)(*args, **kwargs)


__all__ = [
    "REGISTRY",
    "AssumptionError",
    "DirectedTopology",
    "GossipRound",
    "Graph",
    "Network",
    "Topology",
    "TopologySchedule",
    "base_graph",
    "binary_tree",
    "chain",
    "check_arguments",
    "check_assumption1",
    "check_column_stochastic",
    "complete",
    "directed_exponential",
    "directed_one_peer_exponential",
    "directed_ring",
    "erdos_renyi",
    "exponential",
    "from_adjacency",
    "from_digraph",
    "from_matrix",
    "from_networkx",
    "grid",
    "hypercube",
    "make",
    "max_degree_weights",
    "metropolis_hastings_weights",
    "one_peer_exponential",
    "one_peer_hypercube",
    "random_directed",
    "random_matchings",
    "ring",
    "sequence",
    "spanning_tree",
    "spanning_tree_of",
    "star",
    "torus",
    "weight_arrays",
]
