"""Draw every topology builder for n = 16 and how fast each graph averages (docs/topologies.md).

Usage: python examples/draw_topologies.py [OUT]   (default docs/figures/graphs)
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import decentopt as dopt
from decentopt.drawing import plot_contraction, plot_network

BUILDERS = {
    "ring": lambda n: dopt.topology.ring(n),
    "torus": lambda n: dopt.topology.torus(n),
    "exponential": lambda n: dopt.topology.exponential(n),
    "complete": lambda n: dopt.topology.complete(n),
    "one_peer_exponential": lambda n: dopt.topology.one_peer_exponential(n),
    "one_peer_hypercube": lambda n: dopt.topology.one_peer_hypercube(n),
    "base_graph_2": lambda n: dopt.topology.base_graph(n, base=2),
    "base_graph_3": lambda n: dopt.topology.base_graph(n, base=3),
    "random_matchings": lambda n: dopt.topology.random_matchings(n, seed=0),
}


def main(out: Path) -> None:
    for name, build in BUILDERS.items():
        print("wrote", *plot_network(build(16), out / name))
    irregular = dopt.topology.base_graph(12, base=2)  # 12 = 8 + 4: a merge round
    print("wrote", *plot_network(irregular, out / "base_graph_2_n12"))
    networks = [build(32) for build in BUILDERS.values()]
    print("wrote", *plot_contraction(networks, out / "contraction_n32", rounds=30))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/figures/graphs"))
