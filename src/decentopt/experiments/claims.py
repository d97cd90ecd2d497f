"""The paper's claims about its convex figures, checked against our measurements.

Each claim is stated as the paper makes it, turned into a measurable test
and evaluated on the summary of a finished sweep. Every verdict is one of
three: **holds**, **does not hold**, or **inconclusive** (a run that has not
finished converging, a difference within noise, a value between the
thresholds). Nothing here is tuned to make a claim pass.

Thresholds (each with its reason; the table in ``docs/experiments.md`` repeats them):

* ``A`` is lower than ``B`` only when ``B - A > 2 SE``, with ``SE`` the
  standard error of the difference of the two means over repetitions (about
  95 % confidence); within ``2 SE`` they are equal within noise.
* *Trapped by heterogeneity*: the steady error grows at least half as fast as
  ``zeta^2`` (log-log slope against ``zeta^2`` >= 0.5); a bias ``∝ zeta^2``
  has slope 1.
* *Unaffected by heterogeneity*: the steady error grows at most 1.2x over the
  whole ``zeta^2`` range (the paper's range spans x64); between the two is
  inconclusive, and so is any method still decreasing at the end of its run.
* *Linear convergence to a neighbourhood*: a negative fitted slope of
  ``log(error)`` over the transient and a flat tail (not still decreasing).
* *Faster*: each repetition's settling iteration (from which it stays below
  the threshold), compared with the same ``2 SE`` rule; a method that never
  settles in some repetition is slower than one that always does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from decentopt.experiments.reports import markdown_table
from decentopt.experiments.summary import Stat
from decentopt.plotting import LABELS

__all__ = ["CLAIMS", "Claim", "Verdict", "check_claims", "claims_markdown"]

Stats = dict[tuple[float, str], Stat]

#: Standard errors a difference must exceed to count.
SIGNIFICANCE = 2.0
#: Log-log slope against zeta^2 from which an error is "trapped".
TRAPPED_SLOPE = 0.5
#: Growth over the zeta^2 range up to which an error is "unaffected".
UNAFFECTED_GROWTH = 1.2


@dataclass(frozen=True)
class Verdict:
    holds: bool | None  # None: inconclusive (or not measurable in this sweep)
    evidence: str


@dataclass(frozen=True)
class Claim:
    text: str
    test: str
    check: Callable[[Stats], Verdict]


def _levels(stats: Stats) -> list[float]:
    zeta = {lv: s.zeta2 for (lv, _), s in stats.items()}
    return sorted(zeta, key=zeta.__getitem__)


def _algs(stats: Stats) -> set[str]:
    return {a for _, a in stats}


def _name(alg: str) -> str:
    return LABELS.get(alg, alg)


def _combine(verdicts: Sequence[bool | None]) -> bool | None:
    """All hold: holds; any fails: does not hold; otherwise inconclusive."""
    if any(v is False for v in verdicts):
        return False
    return True if all(v is True for v in verdicts) else None


def _ordered(order: int, strict: bool) -> bool | None:
    """Verdict on "A below B" (``strict``) or "A not above B" from :func:`compare`'s sign."""
    if order < 0:
        return True
    if order > 0:
        return False
    return None if strict else True


def compare(a: float, se_a: float, b: float, se_b: float) -> int:
    """-1 if ``a`` is significantly lower than ``b``, +1 if higher, 0 within noise."""
    se = math.sqrt(np.nan_to_num(se_a) ** 2 + np.nan_to_num(se_b) ** 2)
    if b - a > SIGNIFICANCE * se:
        return -1
    if a - b > SIGNIFICANCE * se:
        return 1
    return 0


def compare_settling(a: Sequence[float], b: Sequence[float]) -> int:
    """-1 if repetitions of ``a`` settle significantly sooner than ``b``'s, +1 later, 0 unclear."""
    a_never, b_never = np.isinf(a).any(), np.isinf(b).any()
    if a_never or b_never:
        return 0 if a_never and b_never else (1 if a_never else -1)

    def mean_se(v: Sequence[float]) -> tuple[float, float]:
        arr = np.asarray(v, dtype=float)
        return float(arr.mean()), float(arr.std(ddof=1) / np.sqrt(len(arr))) if len(
            arr
        ) > 1 else 0.0

    return compare(*mean_se(a), *mean_se(b))


def _settle_text(s: Stat) -> str:
    arr = np.asarray(s.settle, dtype=float)
    if not arr.size:
        return "n/a"
    if np.isinf(arr).any():
        return f"never in {int(np.isinf(arr).sum())}/{arr.size} reps"
    se = arr.std(ddof=1) / np.sqrt(arr.size) if arr.size > 1 else 0.0
    return f"{arr.mean():.0f} ± {se:.0f}"


def heterogeneity_slope(stats: Stats, alg: str) -> tuple[float, float]:
    """(log-log slope of the steady error against zeta^2, growth max/first over the levels)."""
    levels = _levels(stats)
    z = np.log([stats[(lv, alg)].zeta2 for lv in levels])
    e = np.array([stats[(lv, alg)].steady for lv in levels])
    slope = float(np.polyfit(z, np.log(e), 1)[0]) if np.all(e > 0) else float("nan")
    return slope, float(e.max() / e[0])


def heterogeneity_effect(algs: Sequence[str], expect: str) -> Callable[[Stats], Verdict]:
    """``expect`` "trapped" or "unaffected", with the thresholds of the module docstring."""

    def check(stats: Stats) -> Verdict:
        present = [a for a in algs if a in _algs(stats)]
        if not present or len(_levels(stats)) < 2:
            return Verdict(None, "needs these algorithms and at least two heterogeneity levels")
        verdicts, parts = [], []
        for alg in present:
            slope, growth = heterogeneity_slope(stats, alg)
            moving = any(stats[(lv, alg)].still_decreasing for lv in _levels(stats))
            if moving or not np.isfinite(slope):
                kind = "still decreasing" if moving else "not measurable"
            elif slope >= TRAPPED_SLOPE:
                kind = "trapped"
            elif growth <= UNAFFECTED_GROWTH:
                kind = "unaffected"
            else:
                kind = "between"
            verdicts.append(
                True if kind == expect else (False if kind in ("trapped", "unaffected") else None)
            )
            parts.append(f"{_name(alg)} slope {slope:+.2f}, x{growth:.3g} ({kind})")
        zetas = [stats[(lv, present[0])].zeta2 for lv in (_levels(stats)[0], _levels(stats)[-1])]
        return Verdict(
            _combine(verdicts), f"ζ² from {zetas[0]:.3g} to {zetas[1]:.3g}: " + "; ".join(parts)
        )

    return check


@dataclass(frozen=True)
class Measure:
    """A quantity two methods are ordered by: steady error or settling iterations."""

    order: Callable[[Stat, Stat], int]
    describe: Callable[[Stat], str]
    words: tuple[str, str, str]  # for order -1, 0, +1
    heading: str


STEADY = Measure(
    lambda a, b: compare(a.steady, a.steady_se, b.steady, b.steady_se),
    lambda s: f"{s.steady:.3g} ± {s.steady_se:.1g}",
    ("lower", "equal within noise", "higher"),
    "{alg} per level (low to high ζ²)",
)
SETTLING = Measure(
    lambda a, b: compare_settling(a.settle, b.settle),
    _settle_text,
    ("sooner", "same within noise", "later"),
    "iterations to settle below the threshold, {alg} per level",
)


def ordered(
    measure: Measure, alg: str, others: Sequence[str], strict: bool
) -> Callable[[Stats], Verdict]:
    """``alg`` is below (``strict``) or not above each of ``others`` in ``measure``, per level."""

    def check(stats: Stats) -> Verdict:
        if not {alg, *others} <= _algs(stats):
            return Verdict(None, f"needs {_name(alg)} and {', '.join(map(_name, others))}")
        verdicts, parts = [], []
        for other in others:
            for lv in _levels(stats):
                a, b = stats[(lv, alg)], stats[(lv, other)]
                order = measure.order(a, b)
                verdicts.append(_ordered(order, strict))
                parts.append(
                    f"{measure.describe(a)} vs {_name(other)} {measure.describe(b)} "
                    f"({measure.words[order + 1]})"
                )
        heading = measure.heading.format(alg=_name(alg))
        return Verdict(_combine(verdicts), f"{heading}: " + "; ".join(parts))

    return check


def held_back_by_tracking(stats: Stats) -> Verdict:
    """EDM settles sooner than DSGT-HB, and DSGT-HB's momentum does not speed up DSGT."""
    if not {"edm", "dsgt_hb", "dsgt"} <= _algs(stats):
        return Verdict(None, "needs EDM, DSGT-HB and DSGT")
    ahead = ordered(SETTLING, "edm", ["dsgt_hb"], strict=True)(stats)
    no_gain = ordered(SETTLING, "dsgt", ["dsgt_hb"], strict=False)(stats)
    return Verdict(
        _combine([ahead.holds, no_gain.holds]),
        f"{ahead.evidence}. Momentum's gain on DSGT -- {no_gain.evidence}",
    )


def converges_linearly(stats: Stats) -> Verdict:
    """No divergence, a negative transient slope of log(error), a flat tail."""
    verdicts, slow, moving, bad = [], [], [], []
    for (lv, alg), s in sorted(stats.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if s.diverged:
            bad.append(f"{_name(alg)} at {lv:g}: {s.diverged} diverged")
            verdicts.append(False)
        elif not s.rate < 0:
            bad.append(f"{_name(alg)} at {lv:g}: transient slope {s.rate:.3g}")
            verdicts.append(False)
        elif s.still_decreasing:
            moving.append(f"{_name(alg)} at {lv:g}")
            verdicts.append(None)
        else:
            verdicts.append(True)
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
    return Verdict(_combine(verdicts), text)


_SIG = f"by more than {SIGNIFICANCE:g} standard errors"

CLAIMS: dict[str, list[Claim]] = {
    "fig1": [
        Claim(
            "All algorithms converge linearly to a neighbourhood of the optimum.",
            "no divergence; negative slope of log(error) over the transient; flat tail",
            converges_linearly,
        ),
        Claim(
            "As heterogeneity increases, DmSGD, Quasi-Global and DecentLaM become trapped "
            "in heterogeneous regions.",
            f"log-log slope of the steady error against ζ² >= {TRAPPED_SLOPE:g}",
            heterogeneity_effect(["dmsgd", "qg_dsgdm", "decentlam"], expect="trapped"),
        ),
        Claim(
            "ED/D², EDM, DSGT and DSGT-HB eliminate the heterogeneity error.",
            f"steady error grows at most x{UNAFFECTED_GROWTH:g} over the ζ² range",
            heterogeneity_effect(["ed", "edm", "dsgt", "dsgt_hb"], expect="unaffected"),
        ),
        Claim(
            "EDM retains ED/D²'s accuracy: its final error is no worse than ED's.",
            f"EDM's steady error not above ED's {_SIG}, at every level",
            ordered(STEADY, "edm", ["ed"], strict=False),
        ),
        Claim(
            "Momentum improves the convergence rate of ED/D².",
            f"EDM's repetitions settle below the threshold sooner than ED's {_SIG}",
            ordered(SETTLING, "edm", ["ed"], strict=True),
        ),
        Claim(
            "DSGT-HB's momentum is held back by DSGT's gradient-consensus phase, while EDM is not.",
            "EDM settles sooner than DSGT-HB, and DSGT-HB no sooner than DSGT (momentum gains "
            f"nothing there), {_SIG}",
            held_back_by_tracking,
        ),
    ],
    "fig2": [
        Claim(
            "All algorithms converge (to a neighbourhood set by the gradient noise).",
            "no divergence; negative slope of log(error) over the transient; flat tail",
            converges_linearly,
        ),
        Claim(
            "EDM enhances ED/D², converging to a narrower region of the optimum.",
            f"EDM's steady ‖∇f(x̄)‖² below ED's {_SIG}, at every level",
            ordered(STEADY, "edm", ["ed"], strict=True),
        ),
        Claim(
            "EDM experiences minimal influence from data heterogeneity.",
            f"EDM's steady error grows at most x{UNAFFECTED_GROWTH:g} over the σ_h² range",
            heterogeneity_effect(["edm"], expect="unaffected"),
        ),
        Claim(
            "DmSGD, without bias correction, is affected by heterogeneity.",
            f"log-log slope of DmSGD's steady error against ζ² >= {TRAPPED_SLOPE:g}",
            heterogeneity_effect(["dmsgd"], expect="trapped"),
        ),
        Claim(
            "EDM converges at least as fast as the momentum-free bias-corrected methods.",
            f"EDM settles no later than ED/D² and DSGT {_SIG}, at every level",
            ordered(SETTLING, "edm", ["ed", "dsgt"], strict=False),
        ),
    ],
}


def check_claims(name: str, stats: Stats) -> list[tuple[Claim, Verdict]]:
    """The verdict on every claim recorded for the preset ``name``."""
    if name not in CLAIMS:
        raise ValueError(
            f"no claims are recorded for {name!r}; --check works for {', '.join(CLAIMS)}"
        )
    return [(claim, claim.check(stats)) for claim in CLAIMS[name]]


def claims_markdown(results: list[tuple[Claim, Verdict]]) -> str:
    marks = {True: "holds", False: "**does not hold**", None: "inconclusive"}
    return markdown_table(
        ["claim (paper)", "test", "measured", "verdict"],
        [(c.text, c.test, v.evidence, marks[v.holds]) for c, v in results],
    )
