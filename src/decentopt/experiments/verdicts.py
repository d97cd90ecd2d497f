"""Verdicts on claims: three-way, combined over comparisons, and panels judged together;
and the one registry of claim checks (filled by :mod:`.claims`).

A verdict *holds*, *does not hold* or is *inconclusive* (``None``). A claim judged on
several panels at once (the graph study's problems and numbers of agents) divides its
family-wise level among all of their comparisons: each panel's statistics come as a
:class:`Panel` that says how many are judged together (Bonferroni).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from decentopt._registry import Registry
from decentopt.analysis import ALPHA, ordering_verdict
from decentopt.plotting import LABELS

__all__ = [
    "CHECKS",
    "SIG",
    "ClaimCheck",
    "Factory",
    "Panel",
    "Reads",
    "Verdict",
    "combine",
    "family",
    "joined",
    "label_name",
    "label_names",
]

#: How a claim's test names its level.
SIG = f"at a {ALPHA:.0%} family-wise level"


@dataclass(frozen=True)
class Verdict:
    holds: bool | None  # None: inconclusive (or not measurable in this sweep)
    evidence: str


def combine(verdicts: Sequence[bool | None]) -> bool | None:
    """All hold: holds; any fails: does not hold; otherwise inconclusive."""
    if any(v is False for v in verdicts):
        return False
    return True if all(v is True for v in verdicts) else None


def joined(judged: Iterable[tuple[bool | None, str]], heading: str = "") -> Verdict:
    """The verdict of several comparisons, each ``(verdict, evidence)``: combined
    (:func:`combine`), their evidence joined by "; " after ``heading``."""
    pairs = list(judged)
    return Verdict(combine([v for v, _ in pairs]), heading + "; ".join(t for _, t in pairs))


#: Makes a check from a ``[[claims]]`` table's arguments: the check and its test in words.
Factory = Callable[..., tuple[Callable[[Any], Verdict], str]]
#: What a check reads: a panel's statistics (``"panel"``: a sweep's, ``(case, label) ->
#: Stat``), a training run's rows, judged by each variant's final values (``"finals"``:
#: :mod:`.trained`), or the cases of a study (``"cases"``: :mod:`.cases`).
Reads = Literal["panel", "finals", "cases"]


@dataclass(frozen=True)
class ClaimCheck:
    """A check a ``[[claims]]`` table can name: what it reads, and ``make``, which turns the
    table's arguments into the check and its test in words. A run or study judges its
    claims with the checks that read what it measures."""

    reads: Reads
    make: Factory


#: Every claim check (``check = "NAME"`` plus its arguments), the built-in ones listed in
#: :mod:`.claims`.
CHECKS: Registry[ClaimCheck] = Registry("claim check")


def ordered_verdict(order: int | None, strict: bool) -> bool | None:
    """Verdict on "A below B" (``strict``) or "A not above B" from :func:`compare`'s sign
    (``None``: no way to tell, e.g. one run of a random problem)."""
    return ordering_verdict(order, order, strict)


class Panel(dict):
    """A sweep's statistics, ``(case, label) -> Stat``, as one of ``panels`` panels a claim
    is judged on together: each comparison's level is divided by ``panels`` as well."""

    def __init__(self, stats: Mapping[Any, Any], panels: int) -> None:
        super().__init__(stats)
        self.panels = panels


def family(stats: Mapping[Any, Any]) -> int:
    """How many panels ``stats`` is judged together with (itself included)."""
    return stats.panels if isinstance(stats, Panel) else 1


def label_name(label: str) -> str:
    """A method's label as figures and reports name it ("dsgd" -> "DSGD")."""
    return LABELS.get(label, label)


def label_names(labels: Sequence[str]) -> str:
    return ", ".join(map(label_name, labels))
