"""What building a graph costs, from its name and size alone: checked before it is built.

A graph of a billion agents, or a complete graph of a million (a dense ``W`` of
7 TiB), must be refused before anything is allocated, not after minutes of
building. The estimate follows how each builder stores the graph. Measured
(peak resident memory of building it, one process, torch 2.13, networkx 3):

* circulant graphs (``ring``, ``exponential`` from 64 agents): a stencil, 26 bytes
  per agent at 200,000 agents; estimated 32;
* dense ``W`` (``complete``, directed graphs, and every graph under 1,024 agents):
  3 copies of ``n x n`` float64 while it is checked, 24.6 n^2 bytes for ``complete(2000)``;
  estimated 32 n^2;
* graphs built through networkx (``star``, ``grid``, ``torus``, ``hypercube``,
  ``erdos_renyi``, trees): 967 bytes per agent for ``star(200000)``, 5,452 per agent
  for ``hypercube(131072)`` (17 links each); estimated 1,000 per agent and 600 per link;
* sequences of rounds (``one_peer_exponential``, ...): 2,811 bytes per agent for
  ``one_peer_exponential(200000)`` (18 rounds); estimated 200 per agent and round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from decentopt.topology.graphs import CIRCULANT_FROM
from decentopt.topology.sparse import SPARSE_FROM

__all__ = ["build_bytes"]

#: Bytes per agent of a circulant stencil.
CIRCULANT_BYTES = 32.0
#: Bytes per entry of a dense W (copies while checked).
DENSE_BYTES = 32.0
#: networkx graphs: bytes per agent.
NODE_BYTES = 1000.0
#: networkx graphs: bytes per link (undirected edge).
EDGE_BYTES = 600.0
#: Sequences of rounds: bytes per agent and round.
ROUND_BYTES = 200.0
#: Builders that keep W dense whatever the size.
_DENSE = {"complete", "directed_ring", "directed_exponential", "random_directed"}
_CIRCULANT = {"ring", "exponential"}
_ROUNDS = {
    "one_peer_exponential",
    "one_peer_hypercube",
    "base_graph",
    "directed_one_peer_exponential",
}
#: About how many neighbours an agent has, by graph (the rest, hypercubes among them:
#: logarithmically many; ``erdos_renyi``: ``p (n - 1)``).
_LINKS = dict.fromkeys(("grid", "torus"), 4.0) | dict.fromkeys(
    ("ring", "chain", "star", "binary_tree", "spanning_tree"), 2.0
)


def build_bytes(name: str, n: int, options: Mapping[str, Any] | None = None) -> float:
    """About how many bytes building the registered graph ``name`` over ``n`` agents takes."""
    options = options or {}
    size = float(n)
    # a stencil, or rounds drawn one by one (random_matchings: nothing is built ahead)
    if (name in _CIRCULANT and n >= CIRCULANT_FROM) or name == "random_matchings":
        return CIRCULANT_BYTES * size
    if name in _ROUNDS:
        return ROUND_BYTES * size * max(1.0, math.log2(max(size, 2.0)))
    if name in _DENSE or n < SPARSE_FROM:
        return DENSE_BYTES * size * size
    links = _LINKS.get(name, math.log2(max(size, 2.0)))
    if name == "erdos_renyi":
        p = options.get("p", 0.2)
        links = float(p) * (size - 1) if isinstance(p, int | float) else size - 1
    return NODE_BYTES * size + EDGE_BYTES * size * links / 2
