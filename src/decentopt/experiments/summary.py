"""Summary statistics of a panel sweep, computed from its tidy result rows.

For each (heterogeneity level, algorithm):

* ``steady`` and ``steady_se``: the metric averaged over the recorded steps of
  the last 10 % of iterations (a dense window, see
  :func:`~decentopt.driver.record_steps`), then its mean and standard error
  over runs (diverged runs excluded);
* ``final``: the mean at the last step;
* ``iters``: the iteration from which the mean over runs stays at or
  below the threshold (momentum methods can dip below it and come back),
  interpolated log-linearly between recorded steps; ``None`` if it ends above;
* ``diverged``: how many runs were stopped;
* ``trend`` and ``decreasing``: the mean over the second half of that window
  over the mean over its first half, and whether the method is still
  converging (:func:`~decentopt.analysis.still_decreasing`) -- then its "steady" value is an upper
  bound on where it settles;
* ``settle``: each run's own settling iteration (``inf``: never);
* ``rate``: the fitted slope of ``log |mean error - limit|`` against the
  iteration over the transient (:func:`~decentopt.analysis.transient_rate`); negative means linear
  convergence to the limit;
* ``bytes_per_step``: bytes each agent sends per iteration on average (compressed
  messages count what they carry), so that iterations convert to bytes sent;
* ``steps`` and ``curves``: the recorded steps and each surviving run's curve (for a
  check with its own threshold);
* ``runs``, ``tail_points``, ``tail_from``, ``tail_to``: what the
  steady state rests on; with a single run of a problem with gradient noise the
  standard error is NaN (unknown: comparisons are then inconclusive), of a
  deterministic one 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from decentopt.analysis import mean_se, settling_step, still_decreasing, transient_rate


class Swept(Protocol):
    """What the statistics read of a run specification (a :class:`~.spec.RunSpec`): the
    statistics sit below the specification, which judges claims with them."""

    metric: str
    panel: str
    threshold: float
    params: Any


__all__ = ["Stat", "Swept", "heterogeneity_slope", "levels_by_zeta", "stats_zeta", "summarise"]


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
    #: the problem has no gradient noise: a single run's value is exact (its SE is 0)
    deterministic: bool = False
    bytes_per_step: float = float("nan")
    steps: tuple[float, ...] = ()
    curves: tuple[tuple[float, ...], ...] = ()
    #: simulated seconds at each of ``steps`` under the spec's time model (empty without one)
    seconds: tuple[float, ...] = ()
    #: modelled seconds per iteration under the spec's ``[network]`` (``model_time``) at the
    #: last recorded step (NaN without one)
    seconds_per_step: float = float("nan")


#: A panel sweep's statistics: ``(panel level or case, label) -> Stat``.
Stats = dict[tuple[float, str], Stat]


def _stat(
    steps: np.ndarray,
    values: np.ndarray,
    threshold: float,
    seconds: tuple[float, ...],
    **known: Any,
) -> Stat:
    """The statistics of one (level, algorithm): ``values`` is (runs, steps); ``seconds``
    the simulated time of each recorded step, where a time model clocked the run; ``known``:
    the fields read off the rows (``zeta2``, ``deterministic``, ``bytes_per_step``,
    ``seconds_per_step``)."""
    alive = np.all(np.isfinite(values), axis=1)
    if not alive.any():
        return Stat(np.nan, np.nan, np.nan, None, len(values), **known)
    tail = steps >= steps[-1] - 0.1 * (steps[-1] - steps[0])
    per_rep = values[alive][:, tail].mean(axis=1)
    mean_curve = values[alive].mean(axis=0)
    settle = [settling_step(steps, c, threshold) for c in values[alive]]
    rate = transient_rate(steps, mean_curve, tail)
    trend, decreasing = still_decreasing(steps, values[alive], tail, rate)
    steady, se = mean_se(per_rep)
    return Stat(
        steady=steady,
        steady_se=0.0 if known["deterministic"] and len(per_rep) == 1 else se,
        final=float(values[alive][:, -1].mean()),
        iters=settling_step(steps, mean_curve, threshold),
        diverged=int((~alive).sum()),
        trend=trend,
        decreasing=decreasing,
        settle=tuple(float("inf") if v is None else float(v) for v in settle),
        rate=rate,
        runs=int(alive.sum()),
        tail_points=int(tail.sum()),
        tail_from=int(steps[tail][0]),
        tail_to=int(steps[-1]),
        steps=tuple(float(v) for v in steps),
        curves=tuple(tuple(map(float, c)) for c in values[alive]),
        seconds=seconds,
        **known,
    )


def summarise(rows: Sequence[dict[str, Any]], spec: Swept, metric: str | None = None) -> Stats:
    """Statistics per (panel level, algorithm) of a panel sweep (see the module docstring)."""
    metric = metric or spec.metric
    groups: dict[tuple[float, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(float(row[spec.panel]), row["algorithm"])].append(row)
    stats = {}
    for key, mine in groups.items():
        runs: dict[int, list[tuple[int, float]]] = defaultdict(list)
        for row in mine:
            runs[row["run"]].append((row["step"], row[metric]))
        curves = [sorted(runs[run]) for run in sorted(runs)]
        steps = np.array([s for s, _ in curves[-1]])
        values = np.array([[v for _, v in curve] for curve in curves], dtype=float)  # (R, steps)
        # the last row of a step > 0 (of the last run to reach it); the simulated clock by step
        later = [r for r in reversed(mine) if r["step"] > 0]
        end = max(later, key=lambda r: r["step"]) if later else {"step": float("nan")}
        clock = {r["step"]: float(r["sim_time"]) for r in mine if "sim_time" in r}
        stats[key] = _stat(
            steps,
            values,
            spec.threshold,
            tuple(clock[int(v)] for v in steps) if clock else (),
            zeta2=float(np.mean([r.get("zeta2", key[0]) for r in mine])),  # else by level
            deterministic=bool(spec.params.deterministic),
            bytes_per_step=float(end.get("bytes_per_agent", float("nan"))) / end["step"],
            seconds_per_step=float(end.get("model_time", float("nan"))) / end["step"],
        )
    return stats


def levels_by_zeta(stats: Stats) -> list[float]:
    """The panel levels of ``stats``, from low to high heterogeneity."""
    zeta = {lv: s.zeta2 for (lv, _), s in stats.items()}
    return sorted(zeta, key=zeta.__getitem__)


def stats_zeta(stats: Stats, level: float) -> float:
    return next(s.zeta2 for (lv, _), s in stats.items() if lv == level)


def heterogeneity_slope(stats: Stats, alg: str) -> tuple[float, float]:
    """(log-log slope of the steady error against zeta^2, growth max/first over the levels)."""
    levels = levels_by_zeta(stats)
    z = np.log([stats[(lv, alg)].zeta2 for lv in levels])
    e = np.array([stats[(lv, alg)].steady for lv in levels])
    slope = float(np.polyfit(z, np.log(e), 1)[0]) if np.all(e > 0) else float("nan")
    return slope, float(e.max() / e[0])
