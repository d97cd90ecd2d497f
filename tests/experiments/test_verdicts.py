"""From raw rows to verdicts: the statistics behind every claim, tested on synthetic sweeps.

Rows go through :func:`summarise` and the claim checks exactly as a real sweep's do, so
a wrong standard error, steady window, trend or settling rule changes these verdicts.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from decentopt.experiments.claims import check_claims, parse_claims
from decentopt.experiments.spec import load_spec
from decentopt.experiments.summary import summarise
from decentopt.plan import record_steps

ITERATIONS = 2000
STEPS = record_steps(ITERATIONS, "log", 30)
LEVELS = (1.0, 0.5, 0.25)  # panel values of the quadratic kind (c), zeta^2 growing
THRESHOLD = 0.02


def spec(sigma2: float = 0.05):
    """A quadratic sweep's specification (noisy unless ``sigma2 = 0``), threshold 0.02."""
    base = load_spec("fig1", overrides=[f"problem_params.sigma2={sigma2}"])
    return dataclasses.replace(base, threshold=THRESHOLD)


def curve(steady: float, rate: float) -> np.ndarray:
    """A run converging linearly to ``steady``: ``steady + exp(-rate * step)``."""
    return steady + np.exp(-rate * STEPS)


def rows_of(curves: dict[str, list[list[np.ndarray]]]) -> list[dict]:
    """Tidy rows: ``curves[method][level][run]`` is one run's recorded metric."""
    rows = []
    for method, per_level in curves.items():
        for level, runs in zip(LEVELS, per_level, strict=True):
            for run, values in enumerate(runs):
                for step, value in zip(STEPS, values, strict=True):
                    rows.append(
                        {"c": level, "zeta2": 1 / level**2, "run": run, "step": int(step),
                         "algorithm": method, "dist_to_opt": float(value)}
                    )  # fmt: skip
    return rows


CLAIMS = parse_claims(
    [
        {"text": "a below b", "check": "steady_below", "algorithm": "a", "others": ["b"]},
        {"text": "a sooner", "check": "settles_sooner", "algorithm": "a", "others": ["b"]},
    ],
    "test",
)


def same_distribution_sweep(rng: np.random.Generator, runs: int) -> dict:
    """Methods a and b drawn from one distribution: steady errors and rates vary by run."""
    out: dict[str, list] = {}
    for method in ("a", "b"):
        out[method] = [
            [
                curve(0.002 * rng.lognormal(0, 0.3) / level, 0.004 * rng.lognormal(0, 0.3))
                for _ in range(runs)
            ]
            for level in LEVELS
        ]
    return out


def test_methods_of_one_distribution_get_at_most_five_percent_wrong_verdicts():
    """300 sweeps of three levels and ten runs where a and b are the same method: a verdict
    other than "inconclusive" on "a below b" or "a settles sooner" is wrong."""
    rng = np.random.default_rng(7)
    noisy = spec()
    wrong = np.zeros(2)
    trials = 300
    for _ in range(trials):
        stats = summarise(rows_of(same_distribution_sweep(rng, runs=10)), noisy)
        wrong += [v.holds is not None for _, v in check_claims(CLAIMS, stats)]
    rates = wrong / trials
    assert rates.max() <= 0.05, rates


def test_a_real_difference_is_found():
    """The same sweep with a half the steady error and twice the rate: both claims hold."""
    rng = np.random.default_rng(3)
    sweep = same_distribution_sweep(rng, runs=10)
    sweep["a"] = [
        [curve(0.001 * rng.lognormal(0, 0.3) / level, 0.008 * rng.lognormal(0, 0.3))
         for _ in range(10)]
        for level in LEVELS
    ]  # fmt: skip
    verdicts = check_claims(CLAIMS, summarise(rows_of(sweep), spec()))
    assert [v.holds for _, v in verdicts] == [True, True]


def test_one_run_of_a_random_problem_decides_nothing():
    rng = np.random.default_rng(1)
    sweep = same_distribution_sweep(rng, runs=1)
    stats = summarise(rows_of(sweep), spec())
    assert all(np.isnan(s.steady_se) for s in stats.values())
    verdicts = check_claims(CLAIMS, stats)
    assert [v.holds for _, v in verdicts] == [None, None]
    assert "no standard error" in verdicts[0][1].evidence
    # a deterministic problem's single run is exact: its values decide
    exact = summarise(rows_of(sweep), spec(sigma2=0.0))
    assert all(s.steady_se == 0 for s in exact.values())
    assert check_claims(CLAIMS, exact)[0][1].holds is not None


def test_the_steady_state_is_the_last_ten_percent_of_iterations_with_its_standard_error():
    """Each run falls by half at 80 % of the run and again at 95 %: only the last 10 %
    window gives the numbers below; the standard error is over runs, std / sqrt(R)."""
    rng = np.random.default_rng(0)
    levels = rng.uniform(1.0, 2.0, size=8)
    window = STEPS >= STEPS[-1] - 0.1 * (STEPS[-1] - STEPS[0])
    runs = []
    for base in levels:
        values = np.full(len(STEPS), base)
        values[STEPS >= 0.8 * ITERATIONS] /= 2
        values[STEPS >= 0.95 * ITERATIONS] /= 2
        runs.append(values)
    sweep = {"a": [runs] * len(LEVELS), "b": [runs] * len(LEVELS)}
    stat = summarise(rows_of(sweep), spec())[(1.0, "a")]
    per_run = np.array([r[window].mean() for r in runs])
    assert stat.steady == pytest.approx(per_run.mean(), rel=1e-12)
    assert stat.steady_se == pytest.approx(per_run.std(ddof=1) / np.sqrt(8), rel=1e-12)
    assert stat.runs == 8 and stat.tail_to == ITERATIONS
    assert stat.tail_from == int(STEPS[window][0]) >= 0.9 * ITERATIONS


def test_a_method_still_falling_is_marked_and_its_trend_measured():
    slow = [curve(0.0, 0.001) for _ in range(5)]  # still halving every ~700 steps at the end
    flat = [curve(0.01, 0.05) + 1e-4 * k for k in range(5)]
    stats = summarise(rows_of({"a": [slow] * 3, "b": [flat] * 3}), spec())
    window = STEPS >= STEPS[-1] - 0.1 * (STEPS[-1] - STEPS[0])
    idx = np.flatnonzero(window)
    first, second = idx[: len(idx) // 2], idx[len(idx) // 2 :]
    want = np.mean([r[second].mean() for r in slow]) / np.mean([r[first].mean() for r in slow])
    assert stats[(1.0, "a")].trend == pytest.approx(want, rel=1e-12)
    assert stats[(1.0, "a")].decreasing and not stats[(1.0, "b")].decreasing


def test_two_methods_that_never_settle_are_not_one_sooner():
    high = [curve(0.5, 0.01) for _ in range(6)]  # ends far above the threshold
    verdicts = check_claims(CLAIMS, summarise(rows_of({"a": [high] * 3, "b": [high] * 3}), spec()))
    assert verdicts[1][1].holds is None
    assert "never in 6/6 runs" in verdicts[1][1].evidence


def _stats(values: dict[str, list[tuple[float, float, tuple[float, ...]]]], runs: int) -> dict:
    """Stats per (level, method): ``(steady, standard error, settling iterations)``."""
    from decentopt.experiments.summary import Stat

    return {
        (lv, alg): Stat(m, se, m, None, 0, 1 / lv**2, settle=settle, rate=-0.1, runs=runs)
        for alg, per_level in values.items()
        for lv, (m, se, settle) in zip(LEVELS, per_level, strict=True)
    }


def test_below_at_every_level_is_an_intersection_union_test():
    """Each of three levels passes Welch's test at 5 % (gap 2.6 SE of the difference, five
    runs each: t = 2.31 at 5 %, 3.02 at 5 %/3): "holds", though no level passes the
    Bonferroni-corrected 5 %/3 that the "does not hold" direction keeps."""
    se = 0.1
    gap = 2.6 * math.hypot(se, se)
    settle = tuple(range(100, 105))
    a = [(1.0, se, settle)] * 3
    stats = _stats({"a": a, "b": [(1.0 + gap, se, settle)] * 3}, runs=5)
    [(_, verdict)] = check_claims(CLAIMS[:1], stats)
    assert verdict.holds is True
    # the same gap the other way refutes "a below b" only past the corrected level
    flipped = _stats({"a": [(1.0 + gap, se, settle)] * 3, "b": a}, runs=5)
    assert check_claims(CLAIMS[:1], flipped)[0][1].holds is None
    far = _stats({"a": [(1.0 + 2 * gap, se, settle)] * 3, "b": a}, runs=5)
    assert check_claims(CLAIMS[:1], far)[0][1].holds is False


def test_three_runs_against_three_are_too_few_to_decide_a_settling_claim():
    """The smallest two-sided Mann-Whitney p-value at 3 against 3 is 0.1: no order of the
    runs can decide, so the verdict says so rather than "same within noise"; the lenient
    claim is not granted by default either. At 5 against 5 the same gap decides."""
    lenient = parse_claims(
        [{"text": "t", "check": "settles_no_later", "algorithm": "a", "others": ["b"]}], "t"
    )
    for runs, want in [(3, None), (5, True)]:
        soon, late = tuple(range(10, 10 + runs)), tuple(range(100, 100 + runs))
        stats = _stats({"a": [(1.0, 0.1, soon)] * 3, "b": [(1.0, 0.1, late)] * 3}, runs)
        [(_, verdict)] = check_claims(CLAIMS[1:], stats)
        assert verdict.holds is want
        assert ("too few runs to decide: 3 vs 3" in verdict.evidence) == (runs == 3)
        backwards = _stats({"a": [(1.0, 0.1, late)] * 3, "b": [(1.0, 0.1, soon)] * 3}, runs)
        assert check_claims(lenient, backwards)[0][1].holds is (None if runs == 3 else False)


@pytest.mark.parametrize("quick", [False, True])
def test_every_preset_has_runs_enough_for_its_rank_test_claims(quick):
    """A settling or bytes claim a preset checks can be decided with its runs: at 5 % for
    a strict claim, at 5 % over its comparisons for a lenient one (what refutes it)."""
    import tomllib

    from decentopt.analysis import rank_test_can_decide
    from decentopt.experiments import PRESETS
    from decentopt.experiments.spec import PRESET_DIR

    strict = {"settles_sooner": True, "fewer_bytes": True, "settles_no_later": False}
    for name in PRESETS:
        raw = tomllib.loads((PRESET_DIR / f"{name}.toml").read_text())
        ranked = [
            c for c in raw.get("claims", []) if c["check"] in (*strict, "held_back_by_tracking")
        ]
        if not ranked or (quick and "quick" not in raw):
            continue
        cfg = load_spec(name, quick=quick)
        levels = len(getattr(cfg.params, cfg.panel))
        for claim in ranked:
            others = len(claim.get("others", [1]))
            deciding = 1 if strict.get(claim["check"], False) else others * levels
            assert rank_test_can_decide(cfg.runs, cfg.runs, deciding), (name, claim["check"])


@pytest.mark.parametrize("runs", [1, 10])
def test_a_settling_verdict_points_the_right_way(runs):
    """a settles at iteration 100 (+ run), b at 300: "a settles sooner" holds and its
    evidence says "sooner"; with the methods swapped it does not hold and says "later"; a
    deterministic problem's single run decides as its values are (runs = 1), several runs
    of a noisy one through the rank test."""
    from decentopt.experiments.summary import Stat

    def stats(first: float, second: float) -> dict:
        def stat(start: float) -> Stat:
            settle = tuple(start + r for r in range(runs))
            exact = runs == 1
            return Stat(0.1, 0.01, 0.1, None, 0, 1.0, settle=settle, runs=runs, deterministic=exact)

        return {(1.0, "a"): stat(first), (1.0, "b"): stat(second)}

    sooner = check_claims(CLAIMS[1:], stats(100, 300))[0][1]
    assert sooner.holds is True and "(sooner)" in sooner.evidence, sooner.evidence
    later = check_claims(CLAIMS[1:], stats(300, 100))[0][1]
    assert later.holds is False and "(later)" in later.evidence, later.evidence
