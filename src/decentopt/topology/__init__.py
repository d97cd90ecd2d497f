"""Communication graphs, mixing matrices and their spectral quantities.

Static graphs are :class:`Topology` objects (one ``W``); time-varying ones are
:class:`TopologySchedule` objects (``W_t`` by gossip round, :mod:`.schedule`).
Both are registered by name in :data:`REGISTRY` and accepted by every
communicator.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from decentopt._checks import unknown_name
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
from decentopt.topology.topology import AssumptionError, Topology, check_assumption1

#: A static graph or a time-varying one: what communicators accept.
Network = Topology | TopologySchedule

#: Graph families by name (used by configuration files and the CLI).
REGISTRY: dict[str, Callable[..., Topology | TopologySchedule]] = {
    "ring": ring,
    "complete": complete,
    "star": star,
    "grid": grid,
    "torus": torus,
    "hypercube": hypercube,
    "exponential": exponential,
    "erdos_renyi": erdos_renyi,
    "one_peer_exponential": one_peer_exponential,
    "one_peer_hypercube": one_peer_hypercube,
    "base_graph": base_graph,
    "random_matchings": random_matchings,
}


def check_arguments(name: str, kwargs: dict[str, Any]) -> None:
    """Refuse an unknown topology, an unknown argument or a missing one, naming the fix."""
    if name not in REGISTRY:
        raise ValueError(unknown_name("topology", name, sorted(REGISTRY)))
    params = inspect.signature(REGISTRY[name]).parameters
    valid = list(params)[1:]  # the first is the number of agents
    for key in kwargs:
        if key not in valid:
            raise ValueError(f"unknown key '{key}' for {name}; valid: name, {', '.join(valid)}")
    for key in valid:
        if params[key].default is inspect.Parameter.empty and key not in kwargs:
            raise ValueError(f"{name} needs '{key}'")


def make(name: str, *args: Any, **kwargs: Any) -> Topology | TopologySchedule:
    """Build a registered topology by name, e.g. ``make("ring", 32)``."""
    try:
        builder = REGISTRY[name]
    except KeyError:
        raise ValueError(unknown_name("topology", name, sorted(REGISTRY))) from None
    return builder(*args, **kwargs)


__all__ = [
    "REGISTRY",
    "AssumptionError",
    "GossipRound",
    "Network",
    "Topology",
    "TopologySchedule",
    "base_graph",
    "check_arguments",
    "check_assumption1",
    "complete",
    "erdos_renyi",
    "exponential",
    "from_adjacency",
    "from_matrix",
    "from_networkx",
    "grid",
    "hypercube",
    "make",
    "max_degree_weights",
    "metropolis_hastings_weights",
    "one_peer_exponential",
    "one_peer_hypercube",
    "random_matchings",
    "ring",
    "sequence",
    "star",
    "torus",
]
