"""Figures from saved result tables; plotting never runs training.

Curves show, for each algorithm, the mean over repetitions with a band from
the 10th to the 90th percentile, on a log scale.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from decentopt.algorithms.registry import PAPER_ORDER

__all__ = ["LABELS", "plot_curves", "save_figure"]

LABELS = {
    "dsgd": "DSGD",
    "dmsgd": "DmSGD",
    "decentlam": "DecentLaM",
    "qg_dsgdm": "QG-DSGDm",
    "dsgt": "DSGT",
    "dsgt_hb": "DSGT-HB",
    "ed": "ED/D²",
    "edm": "EDM",
}
METRIC_LABELS = {
    "dist_to_opt": r"$\frac{1}{n}\sum_i \|x_i - x^\star\|^2$",
    "grad_norm": r"$\|\nabla f(\bar x)\|^2$",
    "consensus": r"$\frac{1}{n}\sum_i \|x_i - \bar x\|^2$",
    "opt_gap": r"$f(\bar x) - f^\star$",
}


def _order(names: Sequence[str]) -> list[str]:
    rank = {name: i for i, name in enumerate(PAPER_ORDER)}
    return sorted(set(names), key=lambda s: (rank.get(s, len(rank)), s))


def plot_curves(
    rows: Sequence[dict[str, Any]],
    metric: str,
    out: str | Path,
    *,
    panel: str | None = None,
    panel_title: str = "{key} = {value}",
    panel_order: Sequence[Any] | None = None,
    title: str | None = None,
    formats: Sequence[str] = ("png", "pdf"),
) -> list[Path]:
    """One panel per value of ``panel`` (or a single panel); returns the written files.

    ``panel_title`` is formatted with ``key``, ``value`` and, when rows carry a
    ``zeta2`` column, ``zeta2`` (its mean in the panel).
    """
    panels: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        panels[row[panel] if panel else None].append(row)
    keys = list(panel_order) if panel_order else sorted(panels, key=lambda v: (v is None, v))
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.6), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, key in zip(axes[0], keys, strict=True):
        curves: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for row in panels[key]:
            curves[row["algorithm"]][row["step"]].append(row[metric])
        for i, alg in enumerate(_order(list(curves))):
            steps = np.array(sorted(curves[alg]))
            vals = np.array([curves[alg][s] for s in steps], dtype=float)  # (steps, R)
            with np.errstate(all="ignore"):
                mean = np.nanmean(vals, axis=1)
                lo, hi = np.nanpercentile(vals, [10, 90], axis=1)
            style = {"lw": 2.2} if alg == "edm" else {"lw": 1.3}
            color = "black" if alg == "edm" else cmap(i % 10)
            ax.plot(steps, mean, label=LABELS.get(alg, alg), color=color, **style)
            ax.fill_between(steps, lo, hi, color=color, alpha=0.15, lw=0)
        ax.set_yscale("log")
        ax.set_xlabel("iteration")
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        if panel:
            zetas = [r["zeta2"] for r in panels[key] if "zeta2" in r]
            zeta2 = float(np.mean(zetas)) if zetas else float("nan")
            ax.set_title(panel_title.format(key=panel, value=key, zeta2=zeta2))
        ax.grid(alpha=0.3, which="both", lw=0.4)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, out, formats)


def save_figure(
    fig: plt.Figure, out: str | Path, formats: Sequence[str] = ("png", "pdf")
) -> list[Path]:
    """Write ``fig`` as ``out.<fmt>`` for each format, close it, return the paths."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        path = out.with_suffix(f".{fmt}")
        fig.savefig(path, dpi=130, bbox_inches="tight")
        written.append(path)
    plt.close(fig)
    return written
