"""Summary statistics of a sweep, computed from its tidy result rows.

For each (heterogeneity level, algorithm):

* ``steady``: the metric averaged over the last 10 % of the recorded steps
  and over repetitions (diverged repetitions excluded);
* ``final``: the mean at the last step;
* ``iters``: the iteration from which the mean over repetitions stays at or
  below the threshold (momentum methods can dip below it and come back),
  interpolated log-linearly between recorded steps; ``None`` if it ends above;
* ``diverged``: how many repetitions were stopped;
* ``trend``: the mean at the last step over the mean at 80 % of the run --
  well below 1 means the method is still converging, so its "steady" value
  is an upper bound on where it settles.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from decentopt.algorithms.registry import PAPER_ORDER
from decentopt.experiments.config import ExperimentConfig
from decentopt.plotting import LABELS

__all__ = ["Stat", "summarise", "summary_markdown"]


@dataclass(frozen=True)
class Stat:
    steady: float
    steady_spread: float
    final: float
    iters: int | None
    diverged: int
    zeta2: float
    trend: float = 1.0

    @property
    def still_decreasing(self) -> bool:
        return self.trend < 0.8


def summarise(
    rows: Sequence[dict[str, Any]], config: ExperimentConfig, metric: str | None = None
) -> dict[tuple[float, str], Stat]:
    metric = metric or config.metric
    param = config.heterogeneity_param
    grouped: dict[tuple[float, str], dict[int, list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    zetas: dict[tuple[float, str], list[float]] = defaultdict(list)
    for row in rows:
        key = (float(row[param]), row["algorithm"])
        grouped[key][row["repetition"]].append((row["step"], row[metric]))
        zetas[key].append(row["zeta2"])
    stats = {}
    for key, reps in grouped.items():
        curves = []
        for rep in sorted(reps):
            pts = sorted(reps[rep])
            steps = np.array([s for s, _ in pts])
            curves.append([v for _, v in pts])
        values = np.array(curves, dtype=float)  # (R, steps)
        alive = np.all(np.isfinite(values), axis=1)
        tail = steps >= steps[-1] - 0.1 * (steps[-1] - steps[0])
        if alive.any():
            per_rep = values[alive][:, tail].mean(axis=1)
            mean_curve = values[alive].mean(axis=0)
            stat = Stat(
                steady=float(per_rep.mean()),
                steady_spread=float(per_rep.std()),
                final=float(values[alive][:, -1].mean()),
                iters=settling_step(steps, mean_curve, config.threshold),
                diverged=int((~alive).sum()),
                zeta2=float(np.mean(zetas[key])),
                trend=float(mean_curve[-1] / mean_curve[np.searchsorted(steps, 0.8 * steps[-1])]),
            )
        else:
            stat = Stat(np.nan, np.nan, np.nan, None, len(values), float(np.mean(zetas[key])))
        stats[key] = stat
    return stats


def settling_step(steps: np.ndarray, curve: np.ndarray, threshold: float) -> int | None:
    """Iteration from which ``curve`` stays <= ``threshold`` (log-linear interpolation)."""
    above = np.flatnonzero(~(curve <= threshold))
    if above.size == 0:
        return int(steps[0])
    k = int(above[-1]) + 1
    if k == len(curve):
        return None
    hi, lo = np.log(curve[k - 1]), np.log(max(curve[k], 1e-300))
    frac = (hi - np.log(threshold)) / (hi - lo) if hi > lo else 1.0
    return int(np.ceil(steps[k - 1] + frac * (steps[k] - steps[k - 1])))


def ordered_algorithms(names: Sequence[str]) -> list[str]:
    rank = {name: i for i, name in enumerate(PAPER_ORDER)}
    return sorted(set(names), key=lambda s: (rank.get(s, len(rank)), s))


def summary_markdown(
    stats: dict[tuple[float, str], Stat], config: ExperimentConfig, metric: str | None = None
) -> str:
    """A Markdown table, one row per algorithm and one column per heterogeneity level.

    ``reach`` (the settling iteration) is shown for the main metric only, whose
    threshold the configuration sets.
    """
    metric = metric or config.metric
    with_reach = metric == config.metric
    param = config.heterogeneity_param
    levels = sorted({level for level, _ in stats}, key=lambda v: stats_zeta(stats, v))
    algs = ordered_algorithms([a for _, a in stats])
    caption = (
        f"Steady-state {metric}: mean over the last 10 % of iterations and over repetitions "
        "(± spread over repetitions)"
    )
    if with_reach:
        caption += f"; reach: the iteration from which the mean stays below {config.threshold:g}"
    header = ["method"] + [f"{param} = {lv:g} (ζ² = {stats_zeta(stats, lv):.3g})" for lv in levels]
    lines = [caption + ".", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for alg in algs:
        cells = [LABELS.get(alg, alg)]
        for lv in levels:
            s = stats[(lv, alg)]
            if np.isnan(s.steady):
                cells.append(f"diverged ({s.diverged})")
                continue
            cell = f"{s.steady:.2e} ± {s.steady_spread:.1e}"
            if with_reach:
                cell += f"; reach: {s.iters if s.iters is not None else 'never'}"
            if s.diverged:
                cell += f", {s.diverged} diverged"
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def stats_zeta(stats: dict[tuple[float, str], Stat], level: float) -> float:
    return next(s.zeta2 for (lv, _), s in stats.items() if lv == level)
