"""Communication graphs, mixing matrices and their spectral quantities."""

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
from decentopt.topology.topology import AssumptionError, Topology, check_assumption1

#: Graph families by name (used by configuration files and the CLI).
REGISTRY: dict[str, Callable[..., Topology]] = {
    "ring": ring,
    "complete": complete,
    "star": star,
    "grid": grid,
    "torus": torus,
    "hypercube": hypercube,
    "exponential": exponential,
    "erdos_renyi": erdos_renyi,
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


def make(name: str, *args: Any, **kwargs: Any) -> Topology:
    """Build a registered topology by name, e.g. ``make("ring", 32)``."""
    try:
        builder = REGISTRY[name]
    except KeyError:
        raise ValueError(unknown_name("topology", name, sorted(REGISTRY))) from None
    return builder(*args, **kwargs)


__all__ = [
    "REGISTRY",
    "AssumptionError",
    "Topology",
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
    "ring",
    "star",
    "torus",
]
