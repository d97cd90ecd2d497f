"""Statistics of recorded trajectories, with the noise of independent runs in view.

Pure functions of arrays: when a curve settles below a threshold, how fast it
approaches its limit, whether it is still falling at the end, and whether one
mean is below another at the family-wise level :data:`ALPHA`. The
experiment summaries (:mod:`decentopt.experiments.summary`) and the claim checks
are built on them; they serve any table of recorded runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "ALPHA",
    "compare",
    "compare_settling",
    "critical_value",
    "mean_se",
    "ordering_verdict",
    "rank_test_can_decide",
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


#: Family-wise error rate of a comparison claim: the chance that a strict claim ("A below
#: B at every level") about methods of the same distribution gets a verdict other than
#: "inconclusive". "Holds" needs every comparison to pass at ALPHA (an intersection-union
#: test: its level is ALPHA without a correction); "does not hold" needs one comparison
#: the other way at ALPHA / comparisons (Bonferroni).
ALPHA = 0.05


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (NaN for a single value: no spread to see)."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2:
        return float(arr.mean()) if arr.size else float("nan"), float("nan")
    return float(arr.mean()), float(arr.std(ddof=1) / np.sqrt(arr.size))


def critical_value(se_a: float, n_a: int, se_b: float, n_b: int, comparisons: int) -> float:
    """Welch's two-sided critical t at level ``ALPHA / comparisons`` (normal when the run
    counts are unknown)."""
    from scipy import stats  # a second to load: only where claims are checked

    level = 1 - ALPHA / (2 * max(1, comparisons))
    va, vb = se_a**2, se_b**2
    if n_a >= 2 and n_b >= 2 and va + vb > 0:
        df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
        return float(stats.t.ppf(level, df))
    return float(stats.norm.ppf(level))


def compare(
    a: float,
    se_a: float,
    b: float,
    se_b: float,
    *,
    runs: tuple[int, int] = (0, 0),
    comparisons: int = 1,
) -> int | None:
    """-1 if ``a`` is significantly lower than ``b``, +1 if higher, 0 within noise; ``None``
    when the noise is unknown (a standard error is NaN: one run of a random problem).

    Welch's t-test at level ``ALPHA / comparisons`` (``runs``: the runs behind each
    mean); two exact values (standard errors 0: deterministic runs) are ordered as
    they are, up to round-off.
    """
    if not (np.isfinite(a) and np.isfinite(b)) or np.isnan(se_a) or np.isnan(se_b):
        return None
    if se_a == 0 and se_b == 0:
        gap = 1e-12 * max(abs(a), abs(b))
    else:
        gap = critical_value(se_a, runs[0], se_b, runs[1], comparisons) * math.hypot(se_a, se_b)
    return -1 if b - a > gap else (1 if a - b > gap else 0)


def compare_settling(
    a: Sequence[float], b: Sequence[float], *, comparisons: int = 1, exact: bool = False
) -> int | None:
    """-1 if runs of ``a`` settle significantly sooner than ``b``'s, +1 later, 0 unclear;
    ``None`` with fewer than two runs of a random problem.

    A two-sided Mann-Whitney U test at level ``ALPHA / comparisons`` on the settling
    iterations, a run that never settles ranked after every one that does (two
    never-settling methods are equal, not one sooner). ``exact``: deterministic runs,
    whose single values are compared as they are.
    """
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if min(xa.size, xb.size) < (1 if exact else 2):
        return None
    if xa.size < 2 or xb.size < 2:
        ma, mb = xa.mean(), xb.mean()
        return 0 if ma == mb else (-1 if ma < mb else 1)
    pooled = np.concatenate([xa, xb])
    if np.all(pooled == pooled[0]):
        return 0
    from scipy import stats

    # never (inf) ranks after every settled run, and ties with every other never
    test = stats.mannwhitneyu(xa, xb, alternative="two-sided")
    if test.pvalue >= ALPHA / max(1, comparisons):
        return 0
    return 1 if test.statistic > xa.size * xb.size / 2 else -1


def ordering_verdict(loose: int | None, tight: int | None, strict: bool) -> bool | None:
    """One comparison's part in "A below B" (``strict``) or "A not above B" at every level.

    ``loose``: the comparison at level ``ALPHA``; ``tight``: at ``ALPHA / comparisons``
    (-1 lower, 0 within noise, +1 higher, ``None`` unknown). "Below" holds only if every
    comparison is -1 at ``ALPHA`` (intersection-union); either claim fails when one is +1
    at the corrected level; "not above" holds otherwise.
    """
    if loose is None or tight is None:
        return None
    if tight == 1:
        return False
    return True if (loose == -1 or not strict) else None


def rank_test_can_decide(n_a: int, n_b: int, comparisons: int = 1) -> bool:
    """Whether a two-sided Mann-Whitney test of ``n_a`` against ``n_b`` runs can reach
    ``ALPHA / comparisons`` at all: its smallest p-value is ``2 / C(n_a + n_b, n_a)``
    (0.1 for 3 against 3, 0.029 for 4 against 4, 0.008 for 5 against 5)."""
    return 2 / math.comb(n_a + n_b, n_a) < ALPHA / max(1, comparisons)
