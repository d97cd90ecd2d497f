from __future__ import annotations

import numpy as np

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
