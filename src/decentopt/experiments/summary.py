"""Summary statistics of a panel sweep, computed from its tidy result rows.

For each (heterogeneity level, algorithm):

* ``steady`` and ``steady_se``: the metric averaged over the recorded steps of
  the last 10 % of iterations (a dense window, see
  :func:`~decentopt.simulate.record_steps`), then its mean and standard error
  over runs (diverged runs excluded);
* ``final``: the mean at the last step;
* ``iters``: the iteration from which the mean over runs stays at or
  below the threshold (momentum methods can dip below it and come back),
  interpolated log-linearly between recorded steps; ``None`` if it ends above;
* ``diverged``: how many runs were stopped;
* ``trend`` and ``decreasing``: the mean over the second half of that window
  over the mean over its first half, and whether the method is still
  converging (:func:`still_decreasing`) -- then its "steady" value is an upper
  bound on where it settles;
* ``settle``: each run's own settling iteration (``inf``: never);
* ``rate``: the fitted slope of ``log |mean error - limit|`` against the
  iteration over the transient (:func:`transient_rate`); negative means linear
  convergence to the limit;
* ``runs``, ``tail_points``, ``tail_from``, ``tail_to``: what the
  steady state rests on.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from decentopt.experiments.spec import RunSpec


__all__ = [
    "SIGNIFICANCE",
    "Stat",
    "compare",
    "compare_settling",
    "heterogeneity_slope",
    "levels_by_zeta",
    "mean_se",
    "settling_step",
    "stats_zeta",
    "summarise",
]


@dataclass(frozen=True)
class Stat:
    steady: float
    steady_se: float
    final: float
    iters: int | None
    diverged: int
    zeta2: float
    trend: float = 1.0
    decreasing: bool = False
    settle: tuple[float, ...] = ()
    rate: float = float("nan")
    runs: int = 0
    tail_points: int = 0
    tail_from: int = 0
    tail_to: int = 0

    @property
    def still_decreasing(self) -> bool:
        return self.decreasing


def transient_rate(steps: np.ndarray, curve: np.ndarray, tail: np.ndarray) -> float:
    """Slope of ``log |curve - limit|`` against the step, before the curve reaches its limit.

    The limit is the tail mean; only points whose distance to it exceeds three
    times the tail's own fluctuation enter the fit (the noise floor is not
    part of the transient). Linear convergence to a neighbourhood gives a
    negative slope whether the error falls to its limit or rises to it (a
    biased method started nearer the optimum than its fixed point).
    """
    limit = float(curve[tail].mean())
    noise = float(np.abs(curve[tail] - limit).max())
    dev = np.abs(curve - limit)
    keep = (dev > 3 * noise + 1e-12 * abs(limit)) & ~tail
    if keep.sum() < 3:
        return float("nan")
    return float(np.polyfit(steps[keep], np.log(dev[keep]), 1)[0])


def still_decreasing(
    steps: np.ndarray, values: np.ndarray, tail: np.ndarray, rate: float
) -> tuple[float, bool]:
    """(ratio of the second half of the tail window to its first half, still converging).

    Still converging: over the window the error keeps falling at a quarter or
    more of its own transient rate, by more than 5 % and by more than two
    standard errors over runs. Noise at a floor moves the halves by a
    few percent either way but not at the transient's rate.
    """
    idx = np.flatnonzero(tail)
    first, second = idx[: len(idx) // 2], idx[len(idx) // 2 :]
    a, b = values[:, first].mean(axis=1), values[:, second].mean(axis=1)
    ratio = float(b.mean() / a.mean()) if a.mean() > 0 else 1.0
    drop = a - b
    se = drop.std(ddof=1) / np.sqrt(len(drop)) if len(drop) > 1 else 0.0
    gap = float(steps[second].mean() - steps[first].mean())
    tail_rate = np.log(ratio) / gap if ratio > 0 and gap > 0 else 0.0
    fast = np.isfinite(rate) and rate < 0 and tail_rate <= 0.25 * rate
    return ratio, bool(fast and ratio < 0.95 and drop.mean() > 2 * se)


def summarise(
    rows: Sequence[dict[str, Any]], spec: RunSpec, metric: str | None = None
) -> dict[tuple[float, str], Stat]:
    """Statistics per (panel level, algorithm) of a panel sweep (see the module docstring)."""
    metric = metric or spec.metric
    param = spec.panel
    grouped: dict[tuple[float, str], dict[int, list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    zetas: dict[tuple[float, str], list[float]] = defaultdict(list)
    for row in rows:
        key = (float(row[param]), row["algorithm"])
        grouped[key][row["run"]].append((row["step"], row[metric]))
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
        zeta2 = float(np.mean(zetas[key]))
        if alive.any():
            per_rep = values[alive][:, tail].mean(axis=1)
            mean_curve = values[alive].mean(axis=0)
            steady = float(per_rep.mean())
            settle = [settling_step(steps, c, spec.threshold) for c in values[alive]]
            rate = transient_rate(steps, mean_curve, tail)
            trend, decreasing = still_decreasing(steps, values[alive], tail, rate)
            stat = Stat(
                steady=steady,
                steady_se=float(per_rep.std(ddof=1) / np.sqrt(len(per_rep)))
                if len(per_rep) > 1
                else float("nan"),
                final=float(values[alive][:, -1].mean()),
                iters=settling_step(steps, mean_curve, spec.threshold),
                diverged=int((~alive).sum()),
                zeta2=zeta2,
                trend=trend,
                decreasing=decreasing,
                settle=tuple(float("inf") if v is None else float(v) for v in settle),
                rate=rate,
                runs=int(alive.sum()),
                tail_points=int(tail.sum()),
                tail_from=int(steps[tail][0]),
                tail_to=int(steps[-1]),
            )
        else:
            stat = Stat(np.nan, np.nan, np.nan, None, len(values), zeta2)
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


#: Standard errors a difference must exceed to count.
SIGNIFICANCE = 2.0


def levels_by_zeta(stats: dict[tuple[float, str], Stat]) -> list[float]:
    """The panel levels of ``stats``, from low to high heterogeneity."""
    zeta = {lv: s.zeta2 for (lv, _), s in stats.items()}
    return sorted(zeta, key=zeta.__getitem__)


def stats_zeta(stats: dict[tuple[float, str], Stat], level: float) -> float:
    return next(s.zeta2 for (lv, _), s in stats.items() if lv == level)


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1) / np.sqrt(arr.size)) if arr.size > 1 else 0.0


def compare(a: float, se_a: float, b: float, se_b: float) -> int:
    """-1 if ``a`` is significantly lower than ``b``, +1 if higher, 0 within noise."""
    se = math.sqrt(np.nan_to_num(se_a) ** 2 + np.nan_to_num(se_b) ** 2)
    if b - a > SIGNIFICANCE * se:
        return -1
    if a - b > SIGNIFICANCE * se:
        return 1
    return 0


def compare_settling(a: Sequence[float], b: Sequence[float]) -> int:
    """-1 if runs of ``a`` settle significantly sooner than ``b``'s, +1 later, 0 unclear."""
    a_never, b_never = np.isinf(a).any(), np.isinf(b).any()
    if a_never or b_never:
        return 0 if a_never and b_never else (1 if a_never else -1)
    return compare(*mean_se(a), *mean_se(b))


def heterogeneity_slope(stats: dict[tuple[float, str], Stat], alg: str) -> tuple[float, float]:
    """(log-log slope of the steady error against zeta^2, growth max/first over the levels)."""
    levels = levels_by_zeta(stats)
    z = np.log([stats[(lv, alg)].zeta2 for lv in levels])
    e = np.array([stats[(lv, alg)].steady for lv in levels])
    slope = float(np.polyfit(z, np.log(e), 1)[0]) if np.all(e > 0) else float("nan")
    return slope, float(e.max() / e[0])
