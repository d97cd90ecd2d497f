"""Drawings of graphs: a network's links (directed ones as arrows) and how fast its
mixing contracts (``decentopt topology NAME --draw F.png``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from decentopt.plotting import new_figure, save_figure, style_for

__all__ = ["graphs_of", "plot_contraction", "plot_network"]


def graphs_of(matrices: Sequence[np.ndarray]) -> list[Any]:
    """The links of each ``W`` (``w_ij > 0``, ``i != j``): undirected graphs when every
    ``W`` is symmetric, else directed ones with an edge ``j -> i`` (``i`` reads ``j``'s
    row) -- a directed schedule's symmetric rounds included."""
    import networkx as nx

    kind = nx.Graph if all(np.allclose(W, W.T) for W in matrices) else nx.DiGraph
    return [nx.from_numpy_array((W - np.diag(np.diag(W))).T, create_using=kind) for W in matrices]


def plot_network(network: Any, out: str | Path, formats: Sequence[str] = ("png",)) -> list[Path]:
    """The graph of a topology (one panel) or of each round of a schedule's period, agents on
    a circle, edge width by weight."""
    import networkx as nx

    count = min(network.period or 4, 8)  # the W_t of one period (a random schedule: 4)
    matrices = [network.at(t).matrix() for t in range(count)]
    fig, axes = new_figure(1, len(matrices), figsize=(2.6 * len(matrices), 2.8))
    pos = nx.circular_layout(range(network.n))
    for t, (ax, graph) in enumerate(zip(axes[0], graphs_of(matrices), strict=True)):
        widths = [0.6 + 3 * d["weight"] for _, _, d in graph.edges(data=True)]
        arrows = {"arrowstyle": "-|>", "connectionstyle": "arc3,rad=0.12"}  # sender -> receiver
        extra = arrows if graph.is_directed() else {}
        nx.draw_networkx_edges(graph, pos, ax=ax, width=widths, edge_color="#47a", **extra)
        nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=60, node_color="#222222")
        ax.set_title(f"round {t}" if len(matrices) > 1 else network.name, fontsize=9)
        ax.set_axis_off()
    if len(matrices) > 1:
        fig.suptitle(network.name, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out, formats)


def plot_contraction(
    networks: Sequence[Any], out: str | Path, rounds: int = 40, formats: Sequence[str] = ("png",)
) -> list[Path]:
    """``||W_{t-1} ... W_0 - 11^T/n||_2`` against gossip rounds ``t``: how fast each graph
    averages (exact averaging drops to round-off)."""
    fig, ((ax,),) = new_figure(1, 1, figsize=(5.6, 3.8))
    for i, network in enumerate(networks):
        P = np.eye(network.n)
        values = [1.0]
        for t in range(rounds):
            P = network.at(t).matrix() @ P
            values.append(max(float(np.linalg.norm(P - 1.0 / network.n, 2)), 1e-16))
        style = style_for(network.name, i)
        ax.plot(range(rounds + 1), values, label=network.name, markevery=5, **style)
    ax.set_yscale("log")
    ax.set_xlabel("gossip rounds t")
    ax.set_ylabel(r"$\|W_{t-1}\cdots W_0 - \frac{1}{n}11^\top\|_2$")
    ax.grid(alpha=0.3, which="both", lw=0.4)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return save_figure(fig, out, formats)
