from __future__ import annotations

import math

import numpy as np
import pytest

from decentopt.analysis import compare, compare_settling, settling_step


def test_settling_step():
    steps = np.array([0, 10, 20, 30, 40])
    assert settling_step(steps, np.array([1.0, 0.1, 0.01, 0.001, 0.001]), 0.01) == 20
    # a dip below and back above does not count
    assert settling_step(steps, np.array([1.0, 0.001, 0.1, 0.001, 0.001]), 0.01) == 25
    assert settling_step(steps, np.array([1.0, 0.5, 0.4, 0.3, 0.2]), 0.01) is None


def test_compare_is_welchs_test_at_the_claims_level():
    # 20 runs each: Welch's t with ~38 degrees of freedom, 2.02 standard errors
    assert compare(1.0, 0.1, 1.3, 0.1, runs=(20, 20)) == -1  # 0.3 > 2.02 * 0.141
    assert compare(1.0, 0.1, 1.27, 0.1, runs=(20, 20)) == 0
    assert compare(1.3, 0.1, 1.0, 0.1, runs=(20, 20)) == 1
    # few runs widen the band (t with ~4 degrees of freedom: 2.78 standard errors)
    assert compare(1.0, 0.1, 1.35, 0.1, runs=(3, 3)) == 0
    # Bonferroni over ten comparisons: 2.9 standard errors each
    assert compare(1.0, 0.1, 1.35, 0.1, runs=(20, 20), comparisons=10) == 0
    assert compare(1.0, 0.1, 1.45, 0.1, runs=(20, 20), comparisons=10) == -1


def test_without_a_standard_error_a_comparison_cannot_be_made():
    nan = float("nan")
    assert compare(1.0, nan, 1.3, nan) is None  # one run of a random problem
    assert compare(1.0, 0.0, 1.3, 0.0) == -1  # exact values of deterministic runs
    assert compare(1.0, 0.0, 1.0 + 1e-15, 0.0) == 0  # round-off
    assert compare(nan, 0.1, 1.0, 0.1) is None  # a diverged method


def test_settling_is_compared_by_ranks_with_never_last():
    fast, slow = [10, 11, 12, 13, 14, 15], [20, 21, 22, 23, 24, 25]
    assert compare_settling(fast, slow) == -1 and compare_settling(slow, fast) == 1
    never = [float("inf")] * 6
    assert compare_settling(fast, never) == -1 and compare_settling(never, never) == 0
    assert compare_settling([10, 11, 12], [20, 21, 22]) == 0  # three runs cannot tell
    assert compare_settling([10], [20]) is None
    assert compare_settling([10], [20], exact=True) == -1
    assert compare_settling([float("inf")], [float("inf")], exact=True) == 0


def test_welch_degrees_of_freedom_with_unequal_errors():
    """Welch-Satterthwaite: SE 1 over 3 runs and 0.1 over 10 give df = 1.01^2 / (1/2 +
    1e-4/9) = 2.04, t_0.975 = 4.22 (the pooled n_a + n_b - 2 = 11 would give 2.20)."""
    from decentopt.analysis import critical_value

    assert critical_value(1.0, 3, 0.1, 10, 1) == pytest.approx(4.2225, abs=1e-3)
    # so a gap of 3 standard errors is within noise here, though beyond 2.2
    assert compare(0.0, 1.0, 3.0 * math.hypot(1.0, 0.1), 0.1, runs=(3, 10)) == 0


def test_never_settling_runs_rank_after_every_settled_one():
    """Never settling ranks after the slowest settled run (18), not tied with it: the
    samples then differ by no more than chance (two-sided p = 0.053), where ranking the
    never-settled runs as 18 would call them different (p = 0.041)."""
    inf = float("inf")
    assert compare_settling([7, 3, 8, 1, inf, 2], [13, 14, 8, inf, 18, inf]) == 0
