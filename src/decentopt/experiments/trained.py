"""Claims about training runs (a kind without a panel parameter, e.g. ``neural``), judged on
their final values (``--check``).

A training run has no panel levels and no steady state to average; it is judged by its
metric at the last evaluation, run by run, and by the bytes each agent sent to get there.
A claim names a variant (``dsgd_local4(lr=0.2)``) or a grid of them (``dsgd_local4``, for
every ``dsgd_local4(lr=...)``): a grid stands for its **tuned** member, the one with the
best mean final metric among those whose runs all finished (higher is better for an
accuracy, lower for a loss: :func:`higher_is_better`). The tuned members are chosen on the
runs they are then judged on, on both sides of a claim alike.

:func:`matches_at_bytes` (``algorithm``, ``others``, ``metric`` = ``"test_acc"``, ``margin``
= 0.01, ``tolerance`` = 0.1; a check of :data:`~.claims.CHECKS` that reads the final
values): ``algorithm`` is not worse than each of ``others`` by more than
``margin`` in the final ``metric`` ("matches or beats"), while each agent sends no more than
``1 + tolerance`` times the other's bytes. Every variant sees the same data split, initial
point and mini-batches in run ``r``, so the test is on the runs' differences ``d_r``
(``algorithm``'s minus the other's, signed so that positive is better): a one-sided
non-inferiority t-test that **holds** when the ``1 - ALPHA`` lower confidence bound of the
mean of ``d`` is above ``-margin`` (every comparison at ``ALPHA``: intersection-union),
**does not hold** when the upper bound at ``ALPHA / m`` is below ``-margin`` (Bonferroni
over the ``m`` others), and is inconclusive between, with one run (no spread), or when the
bytes are not comparable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from decentopt._renamed import renamed
from decentopt.analysis import ALPHA, mean_se
from decentopt.experiments import verdicts
from decentopt.experiments.paired import mean_bound
from decentopt.experiments.reports import markdown_table
from decentopt.experiments.variants import grids
from decentopt.experiments.verdicts import Verdict, joined
from decentopt.experiments.verdicts import label_name as _name
from decentopt.experiments.verdicts import label_names as _names

__all__ = [
    "Final",
    "final_table",
    "finals",
    "higher_is_better",
    "matches_at_bytes",
    "tuned",
]

__getattr__ = renamed(
    __name__, {"CHECKS": (lambda: verdicts.CHECKS, "it is decentopt.experiments.claims.CHECKS")}
)

Rows = Sequence[Mapping[str, Any]]


def higher_is_better(metric: str) -> bool:
    """Accuracies rise as a method improves; losses, errors and distances fall."""
    return "acc" in metric


@dataclass(frozen=True)
class Final:
    """A variant's final ``metric`` in each run (by run index; NaN: the run diverged) and the
    bytes each agent sent in all (the most of any run: a diverged run stops counting)."""

    values: dict[int, float]
    bytes_per_agent: float

    @property
    def finished(self) -> bool:
        return all(np.isfinite(v) for v in self.values.values())

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.values.values())))


def finals(rows: Rows, metric: str) -> dict[str, Final]:
    """Each variant's :class:`Final`, from the rows of its last recorded step in every run."""
    last: dict[tuple[str, int], Mapping[str, Any]] = {}
    for row in sorted(rows, key=lambda r: r["step"]):  # a run's last step is written last
        last[(row["algorithm"], int(row["run"]))] = row
    values: dict[str, dict[int, float]] = {}
    sent: dict[str, float] = {}
    for (label, run), row in sorted(last.items()):
        values.setdefault(label, {})[run] = float(row[metric])
        sent[label] = max(sent.get(label, 0.0), float(row.get("bytes_per_agent", np.nan)))
    return {label: Final(values[label], sent[label]) for label in values}


def tuned(name: str, table: Mapping[str, Final], metric: str) -> str | None:
    """The variant ``name`` stands for: itself, or its grid's member with the best mean final
    ``metric`` among those whose runs all finished (``None``: none did, or none ran)."""
    members = [name] if name in table else grids(list(table)).get(name, [])
    rank = final_rank(table, metric)
    return min((m for m in members if m in rank), key=rank.__getitem__, default=None)


def final_rank(table: Mapping[str, Final], metric: str) -> dict[str, float]:
    """Each variant whose runs all finished by its mean final ``metric``, the best lowest."""
    sign = -1.0 if higher_is_better(metric) else 1.0
    return {label: sign * final.mean for label, final in table.items() if final.finished}


def _megabytes(value: float) -> str:
    return f"{value / 1e6:.3g} MB"


def _side(name: str, table: Mapping[str, Final], metric: str) -> tuple[str | None, bool, str]:
    """The variant ``name`` stands for; else whether it ran (and diverged), and why none."""
    label = tuned(name, table, metric)
    if label is not None:
        return label, True, ""
    ran = name in table or name in grids(list(table))
    return None, ran, f"every run of {_name(name)} diverged" if ran else f"needs {_name(name)}"


def matches_at_bytes(
    algorithm: str,
    others: Sequence[str],
    metric: str = "test_acc",
    margin: float = 0.01,
    tolerance: float = 0.1,
) -> tuple[Callable[[Rows], Verdict], str]:
    """``algorithm`` (tuned) matches or beats each of ``others`` (tuned) in the final
    ``metric``, within ``margin``, at no more than ``1 + tolerance`` times their bytes."""
    if not (margin >= 0 and tolerance >= 0):
        raise TypeError(f"needs margin >= 0 and tolerance >= 0; got {margin}, {tolerance}")

    def compare(table: Mapping[str, Final], mine: str, other: str) -> tuple[bool | None, str]:
        """One comparison (the module docstring), of the variant ``mine`` with the one
        ``other`` stands for, and its evidence."""
        theirs, _, why = _side(other, table, metric)
        if theirs is None:
            return None, why
        a = table[mine]
        b = table[theirs]
        said = (
            f"{_name(mine)} {a.mean:.4g} at {_megabytes(a.bytes_per_agent)} vs "
            f"{_name(theirs)} {b.mean:.4g} at {_megabytes(b.bytes_per_agent)}"
        )
        sign = 1.0 if higher_is_better(metric) else -1.0
        runs = sorted(a.values.keys() & b.values.keys())
        diffs = np.array([sign * (a.values[r] - b.values[r]) for r in runs])
        if not a.bytes_per_agent <= (1 + tolerance) * b.bytes_per_agent:
            return None, f"{said}: not at equal bytes"
        if diffs.size < 2:
            return None, f"{said}: {diffs.size} run, no spread to judge by"
        low = mean_bound(diffs, ALPHA, upper=False)
        high = mean_bound(diffs, ALPHA / len(others), upper=True)
        verdict = True if low > -margin else (False if high < -margin else None)
        word = {True: "matches or beats", False: "falls short", None: "within noise"}[verdict]
        return verdict, (
            f"{said}: run by run {float(diffs.mean()):+.3g} better (bound {low:+.3g}, "
            f"{diffs.size} runs; {word})"
        )

    def check(rows: Rows) -> Verdict:
        if rows and metric not in rows[0]:
            return Verdict(None, f"no {metric} recorded in this run")
        table = finals(rows, metric)
        mine, ran, why = _side(algorithm, table, metric)
        if mine is None:  # diverged everywhere: it matches nothing
            return Verdict(False if ran else None, why)
        judged = (compare(table, mine, other) for other in others)
        return joined(judged, f"final {metric}, tuned: ")

    worse = "below" if higher_is_better(metric) else "above"
    test = (
        f"{_name(algorithm)}'s final {metric} (best of its grid) not {worse} that of "
        f"{_names(others)} (each best of its grid) by more than {margin:g}, "
        f"sending at most x{1 + tolerance:g} their bytes per agent: non-inferiority t-test on "
        f"the runs' differences at a {ALPHA:.0%} family-wise level"
    )
    return check, test


def final_table(rows: Rows, labels: Sequence[str], metric: str) -> str:
    """Per variant: the final ``metric`` (mean ± standard error over runs), the bytes each
    agent sent, its gossip rounds, and whether it is its grid's tuned member."""
    table = finals(rows, metric)
    best = {tuned(grid, table, metric) for grid in grids(list(table))}
    rounds: dict[str, float] = {}  # counted up to the end: the most of any row
    for row in rows:
        mine = float(row.get("rounds", np.nan))
        rounds[row["algorithm"]] = max(rounds.get(row["algorithm"], mine), mine)
    body = []
    for label in labels:
        if label not in table:
            continue
        values = np.array(list(table[label].values.values()))
        mean, se = mean_se(values)
        reached = f"{mean:.4f}" + ("" if np.isnan(se) else f" ± {se:.1g}")
        if not table[label].finished:
            reached = f"diverged in {int((~np.isfinite(values)).sum())}/{values.size} runs"
        cells = [_megabytes(table[label].bytes_per_agent), f"{rounds[label]:.0f}"]
        body.append([_name(label), reached, *cells, "best of its grid" if label in best else ""])
    header = ["variant", f"final {metric}", "bytes per agent", "rounds", "tuned"]
    return markdown_table(header, body)
