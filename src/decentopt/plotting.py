"""Figures from saved result tables; plotting never runs training.

Curves show, for each algorithm, the mean over repetitions with a band from
the 10th to the 90th percentile, on a log scale. Every method has its own
colour, line style and marker, its markers offset from the other curves' so that
curves that coincide stay visible (:mod:`decentopt.styles`), and the panel says which
coincide. The x axis is logarithmic when the records are log-spaced (the default), so the
transient is not squeezed into the margin. Figures are drawn on an Agg canvas without
pyplot, their titles wrapped to the panels' width, laid out once and cut to a box
measured once (:mod:`decentopt.figures`).
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from decentopt.figures import (
    DPI,
    FORMATS,
    LEGEND_INCHES,
    new_figure,
    save_figure,
    suptitle,
    tight_box,
    tight_layout,
)
from decentopt.styles import (
    LABELS,
    METRIC_LABELS,
    display_name,
    marks,
    ordered,
    shown,
    style_for,
)

__all__ = [
    "DPI",
    "FORMATS",
    "LABELS",
    "METRIC_LABELS",
    "MOST_CURVES",
    "X_LABELS",
    "band",
    "best_methods",
    "coincident_groups",
    "display_name",
    "new_figure",
    "ordered",
    "plot_curves",
    "plot_epochs",
    "plot_scaling",
    "save_figure",
    "style_for",
    "tight_box",
    "tight_layout",
    "x_scale",
]


def x_scale(steps: Sequence[int]) -> str:
    """``"symlog"`` when recorded steps are log-spaced (gaps grow), else ``"linear"``."""
    gaps = np.diff(np.asarray(sorted(set(steps)), dtype=float))
    return "symlog" if len(gaps) >= 4 and gaps[-1] > 4 * max(gaps[1], 1.0) else "linear"


def coincident_groups(curves: dict[str, np.ndarray], rtol: float = 1e-3) -> list[list[str]]:
    """Methods whose mean curves agree within ``rtol`` at every step, in order."""
    groups: list[list[str]] = []
    for name, curve in curves.items():
        for group in groups:
            ref = curves[group[0]]
            if ref.shape == curve.shape and np.allclose(curve, ref, rtol=rtol, equal_nan=True):
                group.append(name)
                break
        else:
            groups.append([name])
    return groups


#: Axis labels of the columns a curve can be drawn against (``--x``).
X_LABELS = {
    "step": "iteration",
    "rounds": "gossip rounds",
    "bytes_per_agent": "bytes sent per agent",
    "model_time": "modelled seconds",
}


#: Most curves a figure of :func:`plot_curves` draws (its legend has as many entries).
MOST_CURVES = 12
#: The width of a panel of :func:`plot_curves`.
PANEL_INCHES = 4.2


def best_methods(rows: Sequence[dict[str, Any]], metric: str, most: int) -> set[str]:
    """The ``most`` methods whose mean ``metric`` at their last recorded step (over runs and
    panels) is lowest; a method that diverged (NaN) ranks last."""
    values: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        values[row["algorithm"]][row["step"]].append(float(row[metric]))
    score = {a: float(np.mean(by_step[max(by_step)])) for a, by_step in values.items()}
    ranked = sorted(score, key=lambda a: (not np.isfinite(score[a]), score[a]))
    return set(ranked[:most])


def band(values: np.ndarray, q: Sequence[float] = (10, 90)) -> np.ndarray:
    """``np.nanpercentile(values, q, axis=1)`` (steps x runs), the rows free of NaN at once."""
    out = np.full((len(q), len(values)), np.nan)
    clean = ~np.isnan(values).any(axis=1)
    with np.errstate(all="ignore"), warnings.catch_warnings():  # infinities, rows of NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        out[:, clean] = np.percentile(values[clean], q, axis=1)
        out[:, ~clean] = np.nanpercentile(values[~clean], q, axis=1)
    return out


def plot_curves(
    rows: Sequence[dict[str, Any]],
    metric: str,
    out: str | Path,
    *,
    panel: str | None = None,
    panel_title: str = "{key} = {value}",
    panel_order: Sequence[Any] | None = None,
    title: str | None = None,
    xscale: str = "auto",
    x: str = "step",
    formats: Sequence[str] = FORMATS,
    names: dict[str, str] | None = None,
) -> list[Path]:
    """One panel per value of ``panel`` (or a single panel); returns the written files.

    Of more than :data:`MOST_CURVES` methods, those with the lowest final mean are drawn (the
    figure stays small for a grid of a thousand variants; the table has them all).

    ``panel_title`` is formatted with ``key``, ``value`` and, when rows carry a
    ``zeta2`` column, ``zeta2`` (its mean in the panel). ``xscale``: ``"auto"``
    (symlog when records are log-spaced), ``"symlog"``, ``"log"`` (true log; x = 0
    left out: for seconds and bytes) or ``"linear"``. ``x``: the column
    on the horizontal axis: ``"step"``, ``"rounds"``, ``"bytes_per_agent"`` or
    ``"model_time"`` (the run's network model).
    """
    best = best_methods(rows, metric, MOST_CURVES)
    every = {row["algorithm"] for row in rows}
    if len(best) < len(every):
        note = f"the {MOST_CURVES} of {len(every)} with the lowest final {metric}"
        title = f"{title}\n{note}" if title else note
        rows = [row for row in rows if row["algorithm"] in best]
    panels: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        panels[row[panel] if panel else None].append(row)
    keys = list(panel_order) if panel_order else sorted(panels, key=lambda v: (v is None, v))
    width = PANEL_INCHES * len(keys)
    fig, axes = new_figure(1, len(keys), figsize=(width, 3.6))
    legend: dict[str, Any] = {}
    for ax, key in zip(axes[0], keys, strict=True):
        means, all_steps = _draw_curves(ax, panels[key], metric, x, legend)
        _set_scales(ax, x_scale(all_steps) if xscale == "auto" else xscale, x, metric)
        if panel:
            zetas = [r["zeta2"] for r in panels[key] if "zeta2" in r]
            zeta2 = float(np.mean(zetas)) if zetas else float("nan")
            ax.set_title(panel_title.format(key=panel, value=key, zeta2=zeta2))
        ax.grid(alpha=0.3, which="both", lw=0.4)
        _note_coincident(ax, means, names)
    order = ordered(list(legend))
    handles = [legend[a] for a in order]
    labels = [shown(a, names) for a in order]
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    if title:  # wrapped to what is drawn: a long title does not widen the figure
        suptitle(fig, title, width + LEGEND_INCHES)
    tight_layout(fig)
    return save_figure(fig, out, formats)


def _draw_curves(
    ax: Any, rows: Sequence[dict[str, Any]], metric: str, x: str, legend: dict[str, Any]
) -> tuple[dict[str, np.ndarray], list[float]]:
    """Each method's mean and 10-90 % band on ``ax`` (lines into ``legend``); means, xs."""
    # grouped by step: the x column (rounds, bytes, time) can repeat after a run stops
    curves: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    where: dict[str, dict[int, float]] = defaultdict(dict)
    for row in rows:
        curves[row["algorithm"]][row["step"]].append(row[metric])
        where[row["algorithm"]][row["step"]] = row[x]
    means: dict[str, np.ndarray] = {}
    all_steps: list[float] = []
    methods = ordered(list(curves))
    for i, alg in enumerate(methods):
        by_step = sorted(curves[alg])
        steps = np.array([where[alg][s] for s in by_step])
        all_steps += steps.tolist()
        vals = np.array([curves[alg][s] for s in by_step], dtype=float)  # (steps, R)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            means[alg] = mean = np.nanmean(vals, axis=1)  # every run diverged: NaN, a gap
        lo, hi = band(vals)
        style = style_for(alg, i)
        every = marks(len(steps), i, len(methods))  # coinciding curves show every marker
        (line,) = ax.plot(steps, mean, markevery=every, zorder=3 if alg == "edm" else 2, **style)
        ax.fill_between(steps, lo, hi, color=style["color"], alpha=0.12, lw=0)
        legend.setdefault(alg, line)
    return means, all_steps


def _set_scales(ax: Any, scale: str, x: str, metric: str) -> None:
    """The x axis on ``scale`` (symlog, log or linear), y on a log scale, both labelled."""
    if scale == "symlog":
        ax.set_xscale("symlog", linthresh=1.0)
    elif scale == "log":  # seconds or bytes: the start (0) is left out
        ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(X_LABELS.get(x, x) + (" (log scale)" if scale != "linear" else ""))
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))


def _note_coincident(ax: Any, means: dict[str, np.ndarray], names: dict[str, str] | None) -> None:
    """Say in the panel's corner which methods' curves coincide (drawn on top of each other)."""
    coincide = [g for g in coincident_groups(means) if len(g) > 1]
    if coincide:
        note = "; ".join(" = ".join(shown(a, names) for a in g) for g in coincide)
        box = {"fc": "white", "alpha": 0.7, "lw": 0}
        text = f"coincide: {note}"
        ax.text(0.02, 0.02, text, transform=ax.transAxes, fontsize=7, va="bottom", bbox=box)


def plot_epochs(
    rows: Sequence[dict[str, Any]],
    metrics: Sequence[str],
    out: str | Path,
    title: str = "",
    names: dict[str, str] | None = None,
) -> list[Path]:
    """One panel per metric against epochs (or steps); mean and range over runs; diverged
    runs left out."""
    x = "epoch" if rows and "epoch" in rows[0] else "step"
    fig, axes = new_figure(1, len(metrics), figsize=(4.3 * len(metrics), 3.6))
    good = [r for r in rows if r.get("diverged_at", -1) < 0]
    for i, alg in enumerate(ordered([r["algorithm"] for r in good])):
        mine = [r for r in good if r["algorithm"] == alg]
        epochs = sorted({r[x] for r in mine})
        style = style_for(alg, i)
        for ax, key in zip(axes[0], metrics, strict=True):
            vals = [[float(r[key]) for r in mine if r[x] == e] for e in epochs]
            ax.plot(epochs, [np.mean(v) for v in vals], label=shown(alg, names), **style)
            lo = [min(v) for v in vals]
            hi = [max(v) for v in vals]
            ax.fill_between(epochs, lo, hi, color=style["color"], alpha=0.15, lw=0)
            ax.set_xlabel(x)
            ax.set_ylabel(METRIC_LABELS.get(key, key))
            if "acc" not in key:
                ax.set_yscale("log")
            ax.grid(alpha=0.3, lw=0.4)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    if title:
        suptitle(fig, title, 4.3 * len(metrics) + LEGEND_INCHES)
    tight_layout(fig)
    return save_figure(fig, out)


def plot_scaling(rows: Sequence[Any], out: str | Path) -> list[Path]:
    """Table 1's study: DmSGD's bias against each variable; transients against 1 - lambda."""
    fig, (axes,) = new_figure(1, 5, figsize=(21, 3.8))
    panels = [r for r in rows if r.quantity.startswith("DmSGD")]
    for ax, r in zip(axes[:4], panels, strict=True):
        ax.loglog(r.xs, np.array(r.ys), "o-", color="tab:blue", alpha=0.4, lw=0.8)
        ax.set_title(f"DmSGD bias vs {r.variable}: {r.mean:+.2f} (paper {r.paper_exponent:+g})")
        ax.set_xlabel(r.variable)
        ax.set_ylabel(r.quantity + " (one line per seed)")
        ax.grid(alpha=0.3, which="both", lw=0.4)
    ax = axes[4]
    transient = [x for x in rows if x.quantity == "heterogeneity transient"]
    for i, r in enumerate(transient):
        label = f"{LABELS.get(r.method, r.method)}: {r.mean:+.2f} (paper {r.paper_exponent:+g})"
        ax.loglog(r.xs, np.array(r.ys).mean(axis=1), label=label, **style_for(r.method, i))
    if transient:
        # invert 1 - lambda = (1 - cos(2 pi / n)) / 2 of the paper's ring
        sizes = [round(2 * math.pi / math.acos(1 - 2 * g)) for g in transient[0].xs]
        ax.set_xlabel(f"1 - lambda (rings of {', '.join(map(str, sorted(sizes)))} agents)")
    ax.set_ylabel("sum_t consensus error / zeta0^2 (mean over seeds)")
    ax.set_title("heterogeneity transient")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both", lw=0.4)
    tight_layout(fig)
    return save_figure(fig, out)
