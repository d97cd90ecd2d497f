"""``decentopt topology NAME --n N``: a graph's spectral quantities, Assumption 1 and the
theorems' step sizes; for a time-varying graph its period and contraction per period."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

import numpy as np

from decentopt import theory, topology

__all__ = ["TOPOLOGY_OPTIONS", "configure_topology", "run_topology"]

#: The builders' parameters the command passes on (every one a registered builder has).
TOPOLOGY_OPTIONS = ("weights", "lazy", "cols", "p", "seed", "base", "graph", "root")
_LAZY: dict[str, bool | str] = {"auto": "auto", "yes": True, "no": False}


def configure_topology(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help=f"one of {', '.join(topology.REGISTRY)}, or 'matrix' with --matrix")
    p.add_argument("--n", type=int, help="number of agents")
    p.add_argument("--weights", help="metropolis or max_degree (ring: also 'paper', the default)")
    p.add_argument("--lazy", choices=_LAZY, help="the lazy transform (W + I)/2 (default auto)")
    p.add_argument("--cols", type=int, help="columns (grid, torus; default: most square)")
    p.add_argument("--p", type=float, help="edge probability (erdos_renyi, random_directed)")
    p.add_argument("--seed", type=int, help="graph seed (erdos_renyi, random_*; default 0)")
    p.add_argument("--base", type=int, help="base_graph's base k+1 (k peers per round)")
    p.add_argument("--graph", help="the graph spanning_tree spans (default torus)")
    p.add_argument("--root", type=int, help="spanning_tree's root (default 0)")
    p.add_argument("--draw", type=Path, metavar="FILE.png", help="also draw the graph (each round)")
    p.add_argument("--matrix", type=Path, help="a W saved with numpy.save (.npy) or as text")
    p.add_argument("--L", type=float, default=1.0, help="smoothness constant (default 1)")
    p.add_argument("--beta", type=float, default=0.9, help="momentum (default 0.9)")


def _build_topology(args: argparse.Namespace) -> topology.Network:
    if args.name == "matrix":
        if args.matrix is None:
            raise ValueError("'matrix' needs --matrix FILE (.npy or a text file of numbers)")
        if not args.matrix.is_file():
            raise FileNotFoundError(f"no matrix file at {args.matrix}")
        loader = np.load if args.matrix.suffix == ".npy" else np.loadtxt
        return topology.from_matrix(loader(args.matrix), name=args.matrix.name)
    if args.n is None:
        raise ValueError(f"give the number of agents: decentopt topology {args.name} --n 32")
    builder = topology.REGISTRY.get(args.name)
    accepted = inspect.signature(builder).parameters if builder is not None else {}
    given = {k: getattr(args, k) for k in TOPOLOGY_OPTIONS if getattr(args, k) is not None}
    for key in given:
        if builder is not None and key not in accepted:
            own = ", ".join(f"--{k}" for k in list(accepted)[1:]) or "none"
            raise ValueError(f"{args.name} takes no --{key}; its options: {own}")
    kwargs = {k: _LAZY.get(v, v) if k == "lazy" else v for k, v in given.items()}
    if "p" in accepted and accepted["p"].default is inspect.Parameter.empty:
        kwargs.setdefault("p", 0.2)  # erdos_renyi's required edge probability
    return topology.make(args.name, args.n, **kwargs)


def run_topology(args: argparse.Namespace) -> int:
    try:
        topo = _build_topology(args)
    except topology.AssumptionError as exc:
        print(f"Assumption 1: fails -- {exc}")
        return 1
    rows = theory.topology_report(topo, L=args.L, beta=args.beta)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    if args.draw is not None:
        from decentopt.drawing import plot_network

        fmt = args.draw.suffix.lstrip(".") or "png"
        print("drew " + ", ".join(map(str, plot_network(topo, args.draw, formats=(fmt,)))))
    return 0
