"""The claims about bytes sent (``fewer_bytes``) and ``converges_linearly`` on chosen methods."""

from __future__ import annotations

import numpy as np
import pytest

from decentopt.experiments.claims import bytes_to_settle, check_claims, parse_claims
from decentopt.experiments.summary import summarise
from tests.experiments.test_verdicts import (
    STEPS,
    curve,
    rows_of,
    same_distribution_sweep,
    spec,
)


def with_bytes(rows: list[dict], per_step: dict[str, float]) -> list[dict]:
    """Rows with the bytes each agent has sent by their step."""
    return [r | {"bytes_per_agent": per_step[r["algorithm"]] * r["step"]} for r in rows]


def fewer(factor: float = 1.0, threshold: float | None = None) -> list:
    table = {"text": "a fewer", "check": "fewer_bytes", "algorithm": "a", "others": ["b"]}
    if threshold is not None:
        table["threshold"] = threshold
    return list(parse_claims([table | {"factor": factor}], "test"))


def test_bytes_to_settle_is_the_settling_iteration_times_the_bytes_per_iteration():
    rng = np.random.default_rng(0)
    rows = with_bytes(rows_of(same_distribution_sweep(rng, runs=4)), {"a": 16.0, "b": 800.0})
    stats = summarise(rows, spec())
    for (_, alg), s in stats.items():
        assert s.bytes_per_step == pytest.approx({"a": 16.0, "b": 800.0}[alg])
        reach = bytes_to_settle(s)
        assert reach == tuple(v * s.bytes_per_step for v in s.settle)
    # a threshold of the claim's own: above every recorded value, settled from step 0
    assert set(bytes_to_settle(stats[(1.0, "a")], threshold=1e9)) == {0.0}


def test_the_same_method_sending_fewer_bytes_is_found_and_the_factor_is_judged():
    """a and b converge alike; a sends 50 times fewer bytes per iteration: a needs fewer
    bytes (holds), but not 500 times fewer (does not hold)."""
    rng = np.random.default_rng(5)
    rows = with_bytes(rows_of(same_distribution_sweep(rng, runs=10)), {"a": 16.0, "b": 800.0})
    stats = summarise(rows, spec())
    assert check_claims(fewer(), stats)[0][1].holds is True
    verdict = check_claims(fewer(factor=500), stats)[0][1]
    assert verdict.holds is False and "more after x500" in verdict.evidence


def test_a_method_that_never_reaches_the_target_sends_more_whatever_it_saves_per_step():
    rng = np.random.default_rng(2)
    sweep = same_distribution_sweep(rng, runs=6)
    sweep["a"] = [[curve(0.5, 0.004) for _ in range(6)] for _ in sweep["a"]]  # plateau 0.5
    stats = summarise(with_bytes(rows_of(sweep), {"a": 1.0, "b": 800.0}), spec())
    verdict = check_claims(fewer(), stats)[0][1]
    assert verdict.holds is False and "never in 6/6 runs" in verdict.evidence
    # with a target both reach, the cheap method wins
    assert check_claims(fewer(threshold=0.6), stats)[0][1].holds is True


def test_methods_alike_in_bytes_are_rarely_judged_different():
    """200 sweeps where a and b are one method: a verdict other than inconclusive is wrong."""
    rng = np.random.default_rng(11)
    claims = fewer()
    wrong = 0
    for _ in range(200):
        rows = rows_of(same_distribution_sweep(rng, runs=10))
        stats = summarise(with_bytes(rows, {"a": 100.0, "b": 100.0}), spec())
        wrong += check_claims(claims, stats)[0][1].holds is not None
    assert wrong / 200 <= 0.05


def test_converges_linearly_judges_only_the_methods_it_names():
    rng = np.random.default_rng(4)
    sweep = same_distribution_sweep(rng, runs=3)
    sweep["b"] = [[np.full(STEPS.shape, np.nan) for _ in range(3)] for _ in sweep["b"]]
    stats = summarise(rows_of(sweep), spec())
    only_a, every = parse_claims(
        [
            {"text": "a", "check": "converges_linearly", "algorithms": ["a"]},
            {"text": "all", "check": "converges_linearly"},
        ],
        "test",
    )
    (_, on_a), (_, on_all) = check_claims([only_a, every], stats)
    assert on_a.holds is True and on_all.holds is False and "diverged" in on_all.evidence
    missing = parse_claims([{"text": "c", "check": "converges_linearly", "algorithms": ["c"]}], "t")
    assert check_claims(missing, stats)[0][1].holds is None


def test_a_factor_below_one_is_refused():
    with pytest.raises(ValueError, match="factor must be at least 1"):
        fewer(factor=0.5)
