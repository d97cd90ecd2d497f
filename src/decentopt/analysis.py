"""Statistics of recorded trajectories, with the noise of independent runs in view.

Pure functions of arrays: when a curve settles below a threshold, how fast it
approaches its limit, whether it is still falling at the end, and whether one
mean is below another by more than :data:`SIGNIFICANCE` standard errors. The
experiment summaries (:mod:`decentopt.experiments.summary`) and the claim checks
are built on them; they serve any table of recorded runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "SIGNIFICANCE",
    "compare",
    "compare_settling",
    "mean_se",
    "settling_step",
    "still_decreasing",
    "transient_rate",
]


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
