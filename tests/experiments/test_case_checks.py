"""Checks along a panel's case axis (decentopt.experiments.case_checks), judged as every
claim is: a method against itself from case to case, runs stopped as diverged, several
checks at once, and a level shared among the panels judged together."""

from __future__ import annotations

import math

from decentopt.experiments.claims import check_panels, parse_claims
from decentopt.experiments.summary import Stat, summarise
from decentopt.experiments.verdicts import Panel


def stat(steady: float, se: float = 0.0, diverged: int = 0, per_step: float = math.nan) -> Stat:
    exact = se == 0
    return Stat(
        steady,
        se,
        steady,
        None,
        diverged,
        1.0,
        runs=5,
        tail_points=20,
        deterministic=exact,
        seconds_per_step=per_step,
    )


def claim(**table):
    return parse_claims([{"text": "t", **table}], "t.toml")[0]


def test_a_method_rises_along_the_cases_named_in_order():
    rising = {("a", "m"): stat(1.0), ("b", "m"): stat(2.0), ("c", "m"): stat(3.0)}
    along = claim(check="steady_increases_along", algorithm="m", cases=["a", "b", "c"])
    assert along.check(rising).holds is True
    backwards = claim(check="steady_increases_along", algorithm="m", cases=["c", "b"])
    assert backwards.check(rising).holds is False
    flat = {("a", "m"): stat(1.0), ("b", "m"): stat(1.0)}
    assert (
        claim(check="steady_increases_along", algorithm="m", cases=["a", "b"]).check(flat).holds
        is None
    )
    not_falling = claim(check="steady_does_not_decrease_along", algorithm="m", cases=["a", "b"])
    assert not_falling.check(flat).holds is True
    lacking = along.check({("a", "m"): stat(1.0)})
    assert lacking.holds is None and lacking.evidence == "needs m at 'b', m at 'c'"


def test_modelled_time_per_iteration_comes_from_the_rows_and_orders_the_cases():
    class Spec:
        panel = "zeta2"
        metric = "err"
        threshold = 1e-3
        params = type("P", (), {"deterministic": True})()

    rows = [
        {"zeta2": 1.0, "algorithm": "m", "run": 0, "step": s, "err": 1.0 / (s + 1)}
        | {"model_time": 0.004 * s, "bytes_per_agent": 8.0 * s}
        for s in range(0, 101, 5)
    ]
    (got,) = summarise(rows, Spec()).values()
    assert got.seconds_per_step == 0.004 and got.bytes_per_step == 8.0
    cheaper = claim(check="time_per_iteration_increases_along", algorithm="m", cases=["a", "b"])
    stats = {("a", "m"): stat(1.0, per_step=0.002), ("b", "m"): stat(1.0, per_step=0.003)}
    assert cheaper.check(stats).holds is True
    assert cheaper.check({k: stat(1.0) for k in stats}).holds is None  # no [network]


def test_divergence_in_every_case_or_in_none():
    stats = {
        ("fixed", "ed"): stat(1.0),
        ("fixed", "edm"): stat(1.0),
        ("varying", "ed"): stat(1.0, diverged=2),
        ("varying", "edm"): stat(1.0),
    }
    both = claim(
        check="all_of",
        checks=[
            {"check": "never_diverges", "algorithms": ["ed", "edm"], "cases": ["fixed"]},
            {"check": "diverges", "algorithms": ["ed", "edm"], "cases": ["varying"]},
        ],
    )
    verdict = both.check(stats)
    assert verdict.holds is True and verdict.evidence == "diverged in none; diverged in varying"
    assert (
        claim(check="diverges", algorithms=["edm"], cases=["varying"]).check(stats).holds is False
    )
    assert (
        claim(check="never_diverges", algorithms=["ed"], cases=["varying"]).check(stats).holds
        is False
    )


def test_a_level_is_shared_among_the_panels_judged_together():
    """ "Below" holds when every comparison is lower at 5 %; it fails when one is higher at
    5 % / k (Bonferroni over every panel): means 3.2 standard errors apart (5 runs each)
    refute it in one panel (k = 1), not among 20 (k = 20), where it is inconclusive."""
    stats = {("a", "m"): stat(1.0, se=0.1), ("b", "m"): stat(1.0 + 3.2 * math.sqrt(0.02), 0.1)}
    along = claim(check="steady_increases_along", algorithm="m", cases=["a", "b"])
    assert along.check(stats).holds is True
    assert along.check(Panel(stats, 20)).holds is True
    falling = {("a", "m"): stats[("a", "m")], ("b", "m"): stat(1.0 - 3.2 * math.sqrt(0.02), 0.1)}
    ((_, refuted),) = check_panels([along], {"one": falling})
    assert refuted.holds is False
    ((_, spared),) = check_panels([along], {f"p{k}": falling for k in range(20)})
    assert spared.holds is None and spared.evidence.startswith("p0: ? (")


def test_an_all_of_naming_no_check_is_refused_in_one_line():
    import pytest

    with pytest.raises(ValueError, match=r"#1 \(all_of\): all_of: each of checks names one of"):
        claim(check="all_of", checks=[{"check": "nothing"}])
