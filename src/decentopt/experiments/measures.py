"""What two methods are ordered by in a claim (steady error, settling iterations, bytes to
settle) and how one comparison is judged (see :mod:`decentopt.experiments.claims`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from decentopt.analysis import (
    compare,
    compare_settling,
    mean_se,
    ordering_verdict,
    rank_test_can_decide,
    settling_step,
)
from decentopt.experiments.summary import Stat

__all__ = [
    "PER_ITERATION",
    "SETTLING",
    "STEADY",
    "TIME",
    "UNKNOWN",
    "Measure",
    "bytes_measure",
    "bytes_to_settle",
    "compared",
    "seconds_to_settle",
]


def _runs_text(
    values: Sequence[float], digits: str = ".0f", se_digits: str = ".0f", unit: str = ""
) -> str:
    """Per-run values (``inf``: never): mean ± standard error and ``unit``, or how many never."""
    arr = np.asarray(values, dtype=float)
    if not arr.size:
        return "n/a"
    if np.isinf(arr).any():
        return f"never in {int(np.isinf(arr).sum())}/{arr.size} runs"
    mean, se = mean_se(arr)
    return f"{mean:{digits}}{unit}" if np.isnan(se) else f"{mean:{digits}} ± {se:{se_digits}}{unit}"


@dataclass(frozen=True)
class Measure:
    """A quantity two methods are ordered by: steady error or settling iterations."""

    #: (a, b, comparisons in the claim) -> -1, 0, +1, or None (no way to tell)
    order: Callable[[Stat, Stat, int], int | None]
    describe: Callable[[Stat], str]
    words: tuple[str, str, str]  # for order -1, 0, +1
    heading: str
    ranked: bool = False  # a rank test: a few runs may never reach significance


def _steady_order(a: Stat, b: Stat, comparisons: int) -> int | None:
    return compare(
        a.steady,
        a.steady_se,
        b.steady,
        b.steady_se,
        runs=(a.runs, b.runs),
        comparisons=comparisons,
    )


def _ranked(
    values: Callable[[Stat], Sequence[float]], factor: float = 1.0
) -> Callable[[Stat, Stat, int], int | None]:
    """Order by per-run ``values`` (``inf``: never), a rank test; ``a``'s times ``factor``."""

    def order(a: Stat, b: Stat, comparisons: int) -> int | None:
        exact = a.deterministic and b.deterministic
        scaled = [v * factor for v in values(a)]
        return compare_settling(scaled, values(b), comparisons=comparisons, exact=exact)

    return order


STEADY = Measure(
    _steady_order,
    lambda s: f"{s.steady:.3g}" + ("" if np.isnan(s.steady_se) else f" ± {s.steady_se:.1g}"),
    ("lower", "equal within noise", "higher"),
    "{alg} per level (low to high ζ²)",
)
SETTLING = Measure(
    _ranked(lambda s: s.settle),
    lambda s: _runs_text(s.settle),
    ("sooner", "same within noise", "later"),
    "iterations to settle below the threshold, {alg} per level",
    ranked=True,
)


def bytes_to_settle(stat: Stat, threshold: float | None = None) -> tuple[float, ...]:
    """Each run's bytes sent per agent until it settles (``inf``: never), below
    ``threshold`` (None: the specification's, as in ``settle``)."""
    if threshold is None:
        iters = stat.settle
    else:
        steps = np.asarray(stat.steps)
        found = (settling_step(steps, np.asarray(c), threshold) for c in stat.curves)
        iters = tuple(float("inf") if v is None else float(v) for v in found)
    return tuple(v * stat.bytes_per_step if np.isfinite(v) else v for v in iters)


def bytes_measure(threshold: float | None, factor: float = 1.0) -> Measure:
    below = "the threshold" if threshold is None else f"{threshold:g}"
    scaled = "" if factor == 1 else f" after x{factor:g}"
    return Measure(
        _ranked(lambda s: bytes_to_settle(s, threshold), factor),
        lambda s: _runs_text(bytes_to_settle(s, threshold), ".3g", ".1g", " B"),
        (f"fewer{scaled}", f"as many within noise{scaled}", f"more{scaled}"),
        f"bytes sent per agent to settle below {below}, {{alg}} per level",
        ranked=True,
    )


def seconds_to_settle(stat: Stat) -> tuple[float, ...]:
    """Each run's simulated seconds until it settles (``inf``: never), from the time model's
    clock at the recorded steps (``sim_time``); none without a time model (no order then)."""
    if not stat.seconds:
        return ()
    return tuple(
        float(np.interp(v, stat.steps, stat.seconds)) if np.isfinite(v) else v for v in stat.settle
    )


TIME = Measure(
    _ranked(seconds_to_settle),
    lambda s: _runs_text(seconds_to_settle(s), ".3g", ".1g") if s.seconds else "no [timing]",
    ("sooner", "same within noise", "later"),
    "simulated seconds to settle below the threshold, {alg} per level",
    ranked=True,
)


def _per_iteration_order(a: Stat, b: Stat, comparisons: int) -> int | None:
    """Modelled seconds per iteration: the network model's, exact (no noise to test)."""
    x, y = a.seconds_per_step, b.seconds_per_step
    if np.isnan(x) or np.isnan(y):
        return None  # no [network] in the specification
    return int(np.sign(x - y))


PER_ITERATION = Measure(
    _per_iteration_order,
    lambda s: f"{s.seconds_per_step * 1e3:.3g} ms",
    ("lower", "equal", "higher"),
    "modelled time per iteration, {alg} per level",
)

#: What a comparison says when it cannot be made.
UNKNOWN = "no standard error: one run of a problem with gradient noise"


def compared(
    measure: Measure, a: Stat, b: Stat, comparisons: int, strict: bool
) -> tuple[bool | None, str]:
    """One comparison's verdict (:func:`ordering_verdict`) and its word, or "too few runs"
    where a rank test cannot reach the level that decides the claim."""
    runs = (len(a.settle), len(b.settle))
    deciding = 1 if strict else comparisons  # "holds" at ALPHA; "does not hold" corrected
    exact = a.deterministic and b.deterministic
    if measure.ranked and not exact and min(runs) >= 2:
        if not rank_test_can_decide(*runs, deciding):
            return None, f"too few runs to decide: {runs[0]} vs {runs[1]}"
    loose, tight = measure.order(a, b, 1), measure.order(a, b, comparisons)
    if loose is None or tight is None:
        return None, UNKNOWN
    shown = tight if tight else min(loose, 0)  # "lower" at ALPHA, the rest corrected
    return ordering_verdict(loose, tight, strict), measure.words[shown + 1]
