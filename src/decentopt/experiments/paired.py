"""Run-by-run ratios of two methods, and the claims judged on them.

Every method of a sweep sees the same data, graph and gradient noise in run ``r`` (seeds
are split by role), so the ratio of two methods' values in the same run -- iterations or
bytes to settle -- is free of the spread between runs, which a comparison of the two sets
of runs has to overcome. Two judgements rest on these ratios:

* :func:`ratio_near`: the ratio lies within ``[low, high]``, an equivalence test (two
  one-sided t-tests on the runs' log-ratios, TOST): it **holds** when the log-ratio's mean
  is above ``log low`` and below ``log high``, each at ``ALPHA`` (intersection-union: no
  correction), **does not hold** when it is below ``log low`` or above ``log high`` at
  ``ALPHA / (2 m)`` (Bonferroni over the two sides and the claim's ``m`` comparisons), and
  is inconclusive between; the check :func:`bytes_cut_by` judges it on bytes to settle.
* :func:`ratio_grows`: the ratio grows from one case to the next (say, from 32 to 64
  agents): the runs' ratios of the two cases compared by a Mann-Whitney U test, as
  settling iterations are (:func:`~decentopt.analysis.compare_settling`); the check
  :func:`gap_grows` judges it on the cases of a study (:mod:`.cases`).

A run where only the second method never settles has ratio ``inf``, one where only the
first does ``0``: such runs put the ratio outside any range (if runs of both kinds occur,
the verdict is unknown); where both never settle the ratio is unknown, and so is the
verdict.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from decentopt.analysis import ALPHA, compare_settling, ordering_verdict, rank_test_can_decide
from decentopt.experiments.measures import bytes_to_settle
from decentopt.experiments.summary import Stat, levels_by_zeta
from decentopt.experiments.verdicts import SIG as _SIG
from decentopt.experiments.verdicts import Verdict, joined
from decentopt.experiments.verdicts import label_name as _name
from decentopt.experiments.verdicts import label_names as _names

__all__ = [
    "bytes_cut_by",
    "gap_grows",
    "mean_bound",
    "paired_ratios",
    "ratio_grows",
    "ratio_near",
    "ratio_text",
]


def paired_ratios(a: Stat, b: Stat, values: Callable[[Stat], Sequence[float]]) -> np.ndarray | None:
    """``b``'s value over ``a``'s in each run (``values``: per-run, ``inf`` for never);
    ``None`` where a diverged run leaves the runs unmatched."""
    va, vb = np.asarray(values(a), dtype=float), np.asarray(values(b), dtype=float)
    if a.diverged or b.diverged or va.size != vb.size or not va.size:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):  # inf / inf: NaN; finite / inf: 0
        return vb / va


def ratio_text(ratios: np.ndarray | None) -> str:
    """The ratios' geometric mean and range, or what makes them unknown."""
    if ratios is None:
        return "runs unmatched (a run diverged)"
    if np.isnan(ratios).any():
        return f"neither settles in {int(np.isnan(ratios).sum())}/{ratios.size} runs"
    finite = ratios[np.isfinite(ratios) & (ratios > 0)]
    if finite.size < ratios.size:
        return f"only one settles in {ratios.size - finite.size}/{ratios.size} runs"
    mean = float(np.exp(np.log(finite).mean()))
    return f"x{mean:.3g} (runs x{finite.min():.3g} to x{finite.max():.3g})"


def mean_bound(values: np.ndarray, level: float, upper: bool) -> float:
    """One-sided ``1 - level`` t confidence bound of the mean of ``values`` (the mean itself
    where the runs agree exactly or there is one)."""
    mean = float(values.mean())
    if values.size < 2:
        return mean
    from scipy import stats

    se = float(values.std(ddof=1) / np.sqrt(values.size))
    quantile = float(stats.t.ppf(1 - level, values.size - 1))
    return mean + quantile * se if upper else mean - quantile * se


def ratio_near(
    ratios: np.ndarray | None, low: float, high: float, deterministic: bool, comparisons: int = 1
) -> tuple[bool | None, str]:
    """Whether the runs' ratios lie within ``[low, high]`` (the module docstring); a single
    run of a problem with gradient noise has no spread to judge by: inconclusive."""
    text = ratio_text(ratios)
    if ratios is None or np.isnan(ratios).any():
        return None, text
    above = bool(np.isinf(ratios).any())
    below = bool((ratios == 0).any())
    if above or below:  # one method never settles where the other does: out of any range
        return (None if above and below else False), text
    if ratios.size < 2 and not deterministic:
        return None, f"{text}; one run of a random problem: no spread to judge by"
    logs, lo, hi = np.log(ratios), np.log(low), np.log(high)
    refute = ALPHA / (2 * max(1, comparisons))
    if mean_bound(logs, refute, upper=True) < lo or mean_bound(logs, refute, upper=False) > hi:
        return False, f"{text}: outside x{low:.3g} to x{high:.3g}"
    if mean_bound(logs, ALPHA, upper=False) > lo and mean_bound(logs, ALPHA, upper=True) < hi:
        return True, f"{text}: within x{low:.3g} to x{high:.3g}"
    return None, f"{text}: not told apart from x{low:.3g} to x{high:.3g} by {ratios.size} runs"


def ratio_grows(
    smaller: np.ndarray | None, larger: np.ndarray | None, comparisons: int
) -> tuple[bool | None, str]:
    """Whether the ratios of the ``larger`` case exceed those of the ``smaller`` (one of
    ``comparisons`` such steps in a claim): Mann-Whitney, three-way as settling is."""
    words = f"{ratio_text(smaller)} -> {ratio_text(larger)}"
    if smaller is None or larger is None or np.isnan(smaller).any() or np.isnan(larger).any():
        return None, words
    if not rank_test_can_decide(smaller.size, larger.size):
        return None, f"{words} (too few runs to decide: {smaller.size} vs {larger.size})"
    # a larger ratio ranks later: "larger is later than smaller" is growth
    loose = compare_settling(smaller, larger)
    tight = compare_settling(smaller, larger, comparisons=comparisons)
    verdict = ordering_verdict(loose, tight, strict=True)
    word = {True: "grows", False: "shrinks", None: "within noise"}[verdict]
    return verdict, f"{words} ({word})"


def bytes_cut_by(
    algorithm: str,
    others: Sequence[str],
    factor: float,
    tolerance: float = 0.25,
    threshold: float | None = None,
) -> tuple[Callable[[Mapping[Any, Stat]], Verdict], str]:
    """``algorithm`` needs close to ``factor`` times fewer bytes than each of ``others`` to
    settle: the run-by-run ratio within ``factor`` x (1 -/+ ``tolerance``) (:func:`ratio_near`)."""
    if not (factor > 0 and 0 <= tolerance < 1):
        raise TypeError(f"needs factor > 0 and 0 <= tolerance < 1; got {factor}, {tolerance}")
    low, high = factor * (1 - tolerance), factor * (1 + tolerance)

    def check(stats: Mapping[Any, Stat]) -> Verdict:
        if not {algorithm, *others} <= {label for _, label in stats}:
            return Verdict(None, f"needs {_names([algorithm, *others])}")
        levels = levels_by_zeta(stats)
        judged = []
        for other, lv in itertools.product(others, levels):
            a, b = stats[(lv, algorithm)], stats[(lv, other)]
            ratios = paired_ratios(a, b, lambda s: bytes_to_settle(s, threshold))
            exact = a.deterministic and b.deterministic
            verdict, text = ratio_near(ratios, low, high, exact, len(others) * len(levels))
            judged.append(
                (verdict, f"{_name(other)}'s over {_name(algorithm)}'s at {lv:g}: {text}")
            )
        return joined(judged, "bytes to settle, run by run, ")

    below = "the threshold" if threshold is None else f"{threshold:g}"
    test = (
        f"{_names(others)}'s bytes per agent to settle below {below} over {_name(algorithm)}'s, "
        f"run by run, within x{low:.3g} to x{high:.3g} (equivalence t-tests on log-ratios) "
        f"{_SIG}, at every level"
    )
    return check, test


def gap_grows(
    algorithm: str, other: str, part: str | None = None
) -> tuple[Callable[[Sequence[Any]], Verdict], str]:
    """``other``'s iterations to settle over ``algorithm``'s, run by run, grow from each
    size to the next (over the cases of ``part``, or of every part with both methods; a
    case: a :class:`~.cases.Case`)."""

    settle = operator.attrgetter("settle")  # each run's settling iteration

    def check(cases: Sequence[Any]) -> Verdict:
        both = [c for c in cases if {algorithm, other} <= {label for _, label in c.stats}]
        mine = sorted((c for c in both if part in (None, c.part)), key=lambda c: c.n)
        if len({c.n for c in mine}) < 2:
            return Verdict(None, f"needs {_name(algorithm)} and {_name(other)} at two sizes")
        steps = list(itertools.pairwise(mine))
        levels = levels_by_zeta(mine[0].stats)
        judged = []
        for (small, large), lv in itertools.product(steps, levels):
            if (lv, algorithm) not in large.stats:
                return Verdict(None, f"needs the level {lv:g} in every case")
            ratios = [
                paired_ratios(c.stats[(lv, algorithm)], c.stats[(lv, other)], settle)
                for c in (small, large)
            ]
            verdict, text = ratio_grows(*ratios, comparisons=len(steps) * len(levels))
            judged.append((verdict, f"n = {small.n} -> {large.n}: {text}"))
        heading = f"{_name(other)}'s iterations to settle over {_name(algorithm)}'s, run by run"
        return joined(judged, f"{heading}: ")

    test = (
        f"{_name(other)}'s iterations to settle over {_name(algorithm)}'s (run by run) larger "
        f"at every next size, Mann-Whitney at a {ALPHA:.0%} family-wise level"
    )
    return check, test
