"""The stragglers study: claims judged in simulated seconds (the time model's clock)."""

from __future__ import annotations

import numpy as np
import pytest

from decentopt.cli import main
from decentopt.experiments.claims import check_claims, parse_claims
from decentopt.experiments.spec import load_spec
from decentopt.experiments.study import load_study
from decentopt.experiments.summary import summarise
from tests.experiments.test_verdicts import LEVELS, STEPS, THRESHOLD, curve, rows_of, spec

SOONER = parse_claims(
    [{"text": "a sooner in time", "check": "sooner_in_time", "algorithm": "a", "others": ["b"]}],
    "test",
)


def clocked(rows: list[dict], seconds_per_step: dict[str, float]) -> list[dict]:
    return [r | {"sim_time": seconds_per_step[r["algorithm"]] * r["step"]} for r in rows]


def sweep(rate_a: float, rate_b: float) -> list[dict]:
    rng = np.random.default_rng(0)
    runs = lambda rate: [  # noqa: E731
        [curve(0.001, rate * (1 + 0.05 * rng.standard_normal())) for _ in range(8)] for _ in LEVELS
    ]
    return rows_of({"a": runs(rate_a), "b": runs(rate_b)})


def test_settling_is_compared_in_simulated_seconds_not_iterations():
    """a settles in twice the iterations of b but at a quarter of the seconds per step: a is
    sooner in time; at equal seconds per step it is later; without a clock, inconclusive."""
    rows = sweep(0.01, 0.02)
    s = spec()
    faster = summarise(clocked(rows, {"a": 0.25, "b": 1.0}), s)
    [(_, verdict)] = check_claims(SOONER, faster)
    assert verdict.holds is True and "simulated seconds" in verdict.evidence
    level = next(iter(faster))[0]
    settle, seconds = faster[(level, "a")].settle, faster[(level, "a")].seconds
    assert seconds[-1] == 0.25 * STEPS[-1] and all(np.isfinite(settle))
    [(_, verdict)] = check_claims(SOONER, summarise(clocked(rows, {"a": 1.0, "b": 1.0}), s))
    assert verdict.holds is False
    [(_, verdict)] = check_claims(SOONER, summarise(rows, s))
    assert verdict.holds is None and "no [timing]" in verdict.evidence
    assert THRESHOLD == s.threshold


def test_the_study_runs_two_problems_over_two_graphs_with_a_time_model():
    study = load_study("stragglers", quick=True)
    assert study.study == "graphs" and set(study.graphs) == {"ring", "exponential"}
    assert study.specs == ("stragglers_quadratic", "stragglers_logistic")
    for part, problem in zip(study.specs, ("quadratic", "logistic"), strict=True):
        spec = load_spec(part, quick=True)
        assert spec.problem == problem and spec.timing is not None
        assert spec.timing.slow == (0,) and spec.timing.factor == 4
        assert {"dsgd_delayed", "ad_psgd", "osgp", "edm"} <= set(spec.algorithms)
        assert spec.algorithms["dsgd_delayed"].make().gossip.tau == 1
        assert sum("wall-clock time" in c.text for c in spec.claims) == 2


@pytest.mark.slow
def test_reproduce_stragglers_judges_its_claims(tmp_path, capsys):
    args = ["reproduce", "stragglers", "--quick", "--check", "--x", "time", "--out"]
    assert main([*args, str(tmp_path), "--no-progress", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    # each part's claims, judged on each graph: 2 problems x 2 graphs, two AD-PSGD claims each
    assert out.count("AD-PSGD paper") == 2 * 2 * 2 and "of 20 claims hold in this run" in out
    for case in ("quadratic, n = 16, ring", "logistic, n = 16, exponential"):
        assert f"### {case}" in out
    assert (tmp_path / "stragglers_logistic_ad_psgd_time.png").exists()
