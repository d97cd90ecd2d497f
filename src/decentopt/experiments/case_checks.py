"""Claim checks along a panel's case axis: a method compared with itself from case to case.

A panel's statistics are keyed ``(case, label)``: a sweep's cases are its heterogeneity
levels, the graph study's its graphs (the labels of its ``[graphs]``). The checks of
:data:`decentopt.experiments.claims.CHECKS` compare methods within each case (``cases``
picks which); these compare a method across the cases it names, in order:

* ``steady_increases_along`` / ``steady_does_not_decrease_along``: the method's steady
  error is below (not above) the next case's at each step of ``cases``;
* ``time_per_iteration_increases_along``: so is its modelled time per iteration;
* ``diverges`` / ``never_diverges``: some run of one of ``algorithms`` is stopped as
  diverged in every one of ``cases`` / none is in any of them.

Every comparison is judged as in the other checks (:func:`~.measures.compared`), at the
family-wise level divided among its comparisons in every panel judged together.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from decentopt.experiments.measures import Measure, compared
from decentopt.experiments.verdicts import SIG, Verdict, combine, family, label_name

__all__ = ["along", "divergence", "missing"]

Check = Callable[[Mapping[Any, Any]], Verdict]


def missing(
    stats: Mapping[Any, Any], labels: Sequence[str], cases: Sequence[Any]
) -> Verdict | None:
    """An inconclusive verdict naming what ``stats`` lacks of ``labels`` at ``cases``, or
    None when it has them all (a copy of a study without a graph or method it compares)."""
    lacking = [(c, a) for c in cases for a in labels if (c, a) not in stats]
    if not lacking:
        return None
    said = ", ".join(f"{label_name(a)} at {c!r}" for c, a in lacking)
    return Verdict(None, f"needs {said}")


def along(measure: Measure, strict: bool, words: str) -> Callable[..., tuple[Check, str]]:
    """A check that ``algorithm``'s ``measure`` is below (``strict``) or not above the next
    case's at each step of ``cases``; ``words``: what rises, for the test."""

    def make(algorithm: str, cases: Sequence[Any]) -> tuple[Check, str]:
        steps = list(itertools.pairwise(cases))
        order = " < " if strict else " <= "

        def check(stats: Mapping[Any, Any]) -> Verdict:
            if lacking := missing(stats, [algorithm], cases):
                return lacking
            k = len(steps) * family(stats)
            at = {c: stats[(c, algorithm)] for c in cases}
            judged = [compared(measure, at[a], at[b], k, strict) for a, b in steps]
            values = order.join(measure.describe(at[c]) for c in cases)
            said = ", ".join(
                f"{a} vs {b}: {w}" for (a, b), (_, w) in zip(steps, judged, strict=True)
            )
            return Verdict(combine([v for v, _ in judged]), f"{values} ({said})")

        test = f"{label_name(algorithm)}'s {words}: {order.join(map(str, cases))}, {SIG}"
        return check, test

    return make


def divergence(expected: bool) -> Callable[..., tuple[Check, str]]:
    """A check that some run of one of ``algorithms`` diverges in every one of ``cases``
    (``expected``) or that none diverges in any."""

    def make(algorithms: Sequence[str], cases: Sequence[Any]) -> tuple[Check, str]:
        def check(stats: Mapping[Any, Any]) -> Verdict:
            if lacking := missing(stats, algorithms, cases):
                return lacking
            where = [c for c in cases if any(stats[(c, a)].diverged for a in algorithms)]
            held = len(where) == len(cases) if expected else not where
            return Verdict(held, f"diverged in {', '.join(map(str, where)) or 'none'}")

        who = " or ".join(map(label_name, algorithms))
        how = "in every one" if expected else "in none"
        return check, f"runs of {who} stopped as diverged {how} of {', '.join(map(str, cases))}"

    return make
