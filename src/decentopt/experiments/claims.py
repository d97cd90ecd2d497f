"""Claims about a panel sweep, checked against its measurements (``--check``).

A specification states its claims in ``[[claims]]`` tables (the presets hold
the paper's, as the paper makes them): the text, and a check from
:data:`CHECKS` with its arguments, which turns the claim into a measurable
test evaluated on the summary of the finished sweep. :data:`CHECKS` is the one registry
of checks: each declares what it reads (a :class:`ClaimCheck`) -- a panel's statistics
(the checks below, those of :mod:`.case_checks` and :func:`~.paired.bytes_cut_by`), a
training run's final values (:mod:`.trained`) or the cases of a study
(:func:`~.paired.gap_grows`) -- and a run or study offers the checks that read what it
measures. Every verdict is one of
three: **holds**, **does not hold**, or **inconclusive** (a run that has not
finished converging, a difference within noise, a value between the
thresholds). Nothing here is tuned to make a claim pass.

Thresholds (the constants below; ``docs/experiments.md`` gives their reasons and
measured power): "A below B at every level" holds when every comparison (one per
level and other method: Welch's t on steady errors, Mann-Whitney U on settling
iterations or bytes, a never-settling run ranked last) passes at ``ALPHA = 0.05``
-- an intersection-union test, whose level needs no correction -- and does not hold
when one goes the other way at ``ALPHA / comparisons`` (Bonferroni). For methods of
one distribution the strict claims then get a verdict other than "inconclusive" at
most 5 % of the time; the lenient ones ("not above", "no later") *hold* unless
refuted, so under that null they hold 95 % of the time or more, by design. A rank
test that cannot reach its level with so few runs (3 against 3: p >= 0.1) says "too
few runs to decide"; one run of a noisy problem has no standard error: inconclusive.
Trapped: log-log slope of the steady error against ``zeta^2`` >= 0.5; unaffected: it
grows at most 1.2x; linear convergence: a negative slope of ``log(error)`` over the
transient and a flat tail. Sooner in time: each run's settling iteration on the time
model's clock (``sim_time``), compared as settling iterations are; inconclusive without
a time model.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from decentopt._schema import ConfigError
from decentopt.experiments.case_checks import along, divergence, missing
from decentopt.experiments.measures import (
    PER_ITERATION,
    SETTLING,
    STEADY,
    TIME,
    Measure,
    bytes_measure,
    bytes_to_settle,
    compared,
)
from decentopt.experiments.paired import bytes_cut_by, gap_grows
from decentopt.experiments.reports import markdown_table
from decentopt.experiments.summary import Stats, heterogeneity_slope, levels_by_zeta
from decentopt.experiments.trained import matches_at_bytes
from decentopt.experiments.verdicts import (
    CHECKS,
    ClaimCheck,
    Factory,
    Panel,
    Reads,
    Verdict,
    combine,
    family,
    joined,
    ordered_verdict,
)
from decentopt.experiments.verdicts import SIG as _SIG
from decentopt.experiments.verdicts import label_name as _name
from decentopt.experiments.verdicts import label_names as _names

__all__ = [
    "CHECKS",
    "Claim",
    "ClaimCheck",
    "Reads",
    "Verdict",
    "bytes_to_settle",
    "check_claims",
    "check_panels",
    "claims_markdown",
    "claims_report",
    "combine",
    "ordered_verdict",
    "parse_claims",
    "tally",
]

#: Log-log slope against zeta^2 from which an error is "trapped".
TRAPPED_SLOPE = 0.5
#: Growth over the zeta^2 range up to which an error is "unaffected".
UNAFFECTED_GROWTH = 1.2


@dataclass(frozen=True)
class Claim:
    """A claim as stated, the test that measures it, and the check that judges it (on a
    sweep's statistics, or on a study's cases)."""

    text: str
    test: str
    check: Callable[[Any], Verdict]


def _algs(stats: Stats) -> set[str]:
    return {a for _, a in stats}


def _effect(expect: str, test: str) -> Factory:
    """``expect`` "trapped" or "unaffected" for the named algorithms, with the thresholds of
    the module docstring; ``test``: its words, ``{}`` the algorithms."""

    def make(algorithms: Sequence[str]) -> tuple[Callable[[Stats], Verdict], str]:
        def check(stats: Stats) -> Verdict:
            present = [a for a in algorithms if a in _algs(stats)]
            levels = levels_by_zeta(stats)
            if not present or len(levels) < 2:
                return Verdict(None, "needs these algorithms and at least two heterogeneity levels")
            judged = []
            for alg in present:
                slope, growth = heterogeneity_slope(stats, alg)
                moving = any(stats[(lv, alg)].decreasing for lv in levels)
                if moving or not np.isfinite(slope):
                    kind = "still decreasing" if moving else "not measurable"
                elif slope >= TRAPPED_SLOPE:
                    kind = "trapped"
                elif growth <= UNAFFECTED_GROWTH:
                    kind = "unaffected"
                else:
                    kind = "between"
                verdict = {"trapped": False, "unaffected": False, expect: True}.get(kind)
                judged.append((verdict, f"{_name(alg)} slope {slope:+.2f}, x{growth:.3g} ({kind})"))
            low, high = (stats[(lv, present[0])].zeta2 for lv in (levels[0], levels[-1]))
            return joined(judged, f"ζ² from {low:.3g} to {high:.3g}: ")

        return check, test.format(_names(algorithms))

    return make


def ordered(
    measure: Measure,
    alg: str,
    others: Sequence[str],
    strict: bool,
    cases: Sequence[Any] | None = None,
) -> Callable[[Stats], Verdict]:
    """``alg`` is below (``strict``) or not above each of ``others`` in ``measure``, per level
    (or in each of ``cases``, a panel's case axis: :mod:`.case_checks`)."""

    def check(stats: Stats) -> Verdict:
        if cases is not None and (lacking := missing(stats, [alg, *others], cases)):
            return lacking
        if not {alg, *others} <= _algs(stats):
            return Verdict(None, f"needs {_name(alg)} and {_names(others)}")
        judged = []
        levels = levels_by_zeta(stats) if cases is None else list(cases)
        comparisons = len(others) * len(levels) * family(stats)
        for other, lv in itertools.product(others, levels):
            a, b = stats[(lv, alg)], stats[(lv, other)]
            verdict, word = compared(measure, a, b, comparisons, strict)
            where = "" if cases is None else f"{lv}: "
            said = f"{measure.describe(a)} vs {_name(other)} {measure.describe(b)} ({word})"
            judged.append((verdict, where + said))
        heading = measure.heading.format(alg=_name(alg)) if cases is None else _name(alg)
        return joined(judged, f"{heading}: ")

    return check


def held_back_by_tracking(stats: Stats) -> Verdict:
    """EDM settles sooner than DSGT-HB, and DSGT-HB's momentum does not speed up DSGT."""
    if not {"edm", "dsgt_hb", "dsgt"} <= _algs(stats):
        return Verdict(None, "needs EDM, DSGT-HB and DSGT")
    ahead = ordered(SETTLING, "edm", ["dsgt_hb"], strict=True)(stats)
    no_gain = ordered(SETTLING, "dsgt", ["dsgt_hb"], strict=False)(stats)
    return Verdict(
        combine([ahead.holds, no_gain.holds]),
        f"{ahead.evidence}. Momentum's gain on DSGT -- {no_gain.evidence}",
    )


def _ordering(measure: Measure, strict: bool, words: str, after: str = "") -> Callable[..., Any]:
    def make(
        algorithm: str, others: Sequence[str], cases: Sequence[Any] | None = None
    ) -> tuple[Callable[[Stats], Verdict], str]:
        where = "at every level" if cases is None else f"in each of {', '.join(map(str, cases))}"
        test = f"{_name(algorithm)} {words} {_names(others)}{after} {_SIG}, {where}"
        return ordered(measure, algorithm, others, strict, cases), test

    return make


def _converges(algorithms: Sequence[str] | None = None) -> tuple[Callable[[Stats], Verdict], str]:
    """No divergence, a negative transient slope of log(error), a flat tail (for every
    method, or for ``algorithms``)."""
    test = "no divergence; negative slope of log(error) over the transient; flat tail"

    def check(stats: Stats) -> Verdict:
        missing = [a for a in algorithms or () if a not in _algs(stats)]
        if missing:
            return Verdict(None, f"needs {_names(missing)}")
        chosen = {k: v for k, v in stats.items() if algorithms is None or k[1] in algorithms}
        slow = []
        moving = []  # inconclusive
        bad = []  # does not hold
        for (lv, alg), s in sorted(chosen.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            if s.diverged:
                bad.append(f"{_name(alg)} at {lv:g}: {s.diverged} diverged")
            elif not s.rate < 0:
                bad.append(f"{_name(alg)} at {lv:g}: transient slope {s.rate:.3g}")
            elif s.decreasing:
                moving.append(f"{_name(alg)} at {lv:g}")
            else:
                slow.append(s.rate)
        text = (
            f"transient slopes of log(error) from {min(slow):.3g} to {max(slow):.3g} per iteration"
            if slow
            else "no method converged"
        )
        if moving:
            text += f"; still decreasing at the end: {', '.join(moving)}"
        if bad:
            text += f"; failing: {', '.join(bad)}"
        return Verdict(combine([not bad, None if moving else True]), text)

    return check, test if algorithms is None else f"{_names(algorithms)}: {test}"


def _fewer_bytes(
    algorithm: str, others: Sequence[str], threshold: float | None = None, factor: float = 1.0
) -> tuple[Callable[[Stats], Verdict], str]:
    if not factor >= 1:
        raise TypeError(f"factor must be at least 1 (how many times fewer); got {factor}")
    below = "the threshold" if threshold is None else f"{threshold:g}"
    times = "fewer" if factor == 1 else f"{factor:g} times fewer"
    words = f"sends {times} bytes per agent than"
    make = _ordering(bytes_measure(threshold, factor), True, words, f" to settle below {below}")
    return make(algorithm, others)


def _all_of(checks: Sequence[Mapping[str, Any]]) -> tuple[Callable[[Stats], Verdict], str]:
    """Every one of ``checks``: tables as in ``[[claims]]``, without ``text``."""
    parts = []
    offered = {name: c for name, c in CHECKS.items() if c.reads == "panel"}
    for table in checks:
        args = dict(table)
        name = args.pop("check", None)
        if name not in offered:
            raise TypeError(f"all_of: each of checks names one of {', '.join(offered)}")
        parts.append(offered[name].make(**args))

    def check(stats: Stats) -> Verdict:
        verdicts = [judge(stats) for judge, _ in parts]
        return joined((v.holds, v.evidence) for v in verdicts)

    return check, "; and ".join(test for _, test in parts)


def _built_in(reads: Reads, table: Mapping[str, Factory]) -> None:
    for name, make in table.items():
        CHECKS.add(name, ClaimCheck(reads, make))


_built_in(
    "panel",
    {
        "converges_linearly": _converges,
        "trapped": _effect(
            "trapped", f"log-log slope of {{}}'s steady error vs ζ² >= {TRAPPED_SLOPE}"
        ),
        "unaffected": _effect(
            "unaffected",
            f"steady error of {{}} grows at most x{UNAFFECTED_GROWTH} over the ζ² range",
        ),
        "steady_below": _ordering(STEADY, True, "has a steady error below"),
        "steady_not_above": _ordering(STEADY, False, "has a steady error not above"),
        "settles_sooner": _ordering(SETTLING, True, "settles below the threshold sooner than"),
        "settles_no_later": _ordering(SETTLING, False, "settles below the threshold no later than"),
        "fewer_bytes": _fewer_bytes,
        "bytes_cut_by": bytes_cut_by,
        "sooner_in_time": _ordering(
            TIME, True, "settles below the threshold in less simulated time than"
        ),
        "steady_increases_along": along(STEADY, True, "steady error rises from case to case"),
        "steady_does_not_decrease_along": along(
            STEADY, False, "steady error does not fall from case to case"
        ),
        "time_per_iteration_increases_along": along(
            PER_ITERATION, True, "modelled time per iteration rises from case to case"
        ),
        "diverges": divergence(True),
        "never_diverges": divergence(False),
        "all_of": _all_of,
        "held_back_by_tracking": lambda: (
            held_back_by_tracking,
            "EDM settles sooner than DSGT-HB, and DSGT-HB no sooner than DSGT (momentum gains "
            f"nothing there), {_SIG}",
        ),
    },
)
_built_in("finals", {"matches_at_bytes": matches_at_bytes})
_built_in("cases", {"gap_grows": gap_grows})


def parse_claims(
    tables: Sequence[dict[str, Any]],
    where: str,
    checks: Mapping[str, ClaimCheck] = CHECKS,
    *,
    reads: Reads | None = None,
) -> tuple[Claim, ...]:
    """``[[claims]]`` tables: ``text`` (the claim as stated), ``check`` (a name of ``checks``,
    by default :data:`CHECKS`, among those that read ``reads``: what the run or study
    judges them on; ``None``: any) and its arguments."""
    offered = {name: c for name, c in checks.items() if reads in (None, c.reads)}
    claims = []
    for k, table in enumerate(tables):
        args = dict(table)
        text = args.pop("text", None)
        name = args.pop("check", None)
        if not isinstance(text, str) or name not in offered:
            raise ConfigError(
                f'{where} [[claims]] #{k + 1}: needs text = "..." and check = one of '
                f"{', '.join(offered)}"
            )
        try:
            check, test = offered[name].make(**args)
        except TypeError as exc:  # "f() got an unexpected keyword argument 'x'": no "f()"
            said = str(exc).split("() ", 1)[-1]
            raise ConfigError(f"{where} [[claims]] #{k + 1} ({name}): {said}") from None
        claims.append(Claim(text, test, check))
    return tuple(claims)


def check_claims(claims: Sequence[Claim], stats: Any) -> list[tuple[Claim, Verdict]]:
    """The verdict on every claim (a specification's ``claims``, or a study's)."""
    return [(claim, claim.check(stats)) for claim in claims]


def check_panels(
    claims: Sequence[Claim], panels: Mapping[str, Stats]
) -> list[tuple[Claim, Verdict]]:
    """The verdict on every claim judged on each of ``panels`` by name (a study's problems
    and numbers of agents), its level divided among all their comparisons: holding where it
    holds on every panel, failing where it fails on one."""
    mark = {True: "yes", False: "no", None: "?"}
    results = []
    for claim in claims:
        judged = {name: claim.check(Panel(stats, len(panels))) for name, stats in panels.items()}
        said = [(v.holds, f"{n}: {mark[v.holds]} ({v.evidence})") for n, v in judged.items()]
        results.append((claim, joined(said)))
    return results


def claims_markdown(results: list[tuple[Claim, Verdict]]) -> str:
    marks = {True: "holds", False: "**does not hold**", None: "inconclusive"}
    return markdown_table(
        ["claim", "test", "measured", "verdict"],
        [(c.text, c.test, v.evidence, marks[v.holds]) for c, v in results],
    )


def tally(verdicts: Sequence[tuple[Claim, Verdict]]) -> str:
    """How many of ``verdicts`` hold, do not, and are inconclusive, in one line."""
    counts = [sum(v.holds is x for _, v in verdicts) for x in (True, False, None)]
    return (
        f"{counts[0]} of {len(verdicts)} claims hold in this run, {counts[1]} do not, "
        f"{counts[2]} inconclusive"
    )


def claims_report(claims: Sequence[Claim], stats: Any) -> str:
    """The verdict on every claim as a table, then how many hold."""
    verdicts = check_claims(claims, stats)
    return f"{claims_markdown(verdicts)}\n\n{tally(verdicts)}\n"
