from __future__ import annotations

import numpy as np

from decentopt.analysis import compare, compare_settling, settling_step


def test_settling_step():
    steps = np.array([0, 10, 20, 30, 40])
    assert settling_step(steps, np.array([1.0, 0.1, 0.01, 0.001, 0.001]), 0.01) == 20
    # a dip below and back above does not count
    assert settling_step(steps, np.array([1.0, 0.001, 0.1, 0.001, 0.001]), 0.01) == 25
    assert settling_step(steps, np.array([1.0, 0.5, 0.4, 0.3, 0.2]), 0.01) is None


def test_compare_uses_two_standard_errors():
    assert compare(1.0, 0.1, 1.3, 0.1) == -1  # 0.3 > 2 * 0.141
    assert compare(1.0, 0.1, 1.2, 0.1) == 0
    assert compare(1.3, 0.1, 1.0, 0.1) == 1
    assert compare_settling([10, 11, 12], [20, 21, 22]) == -1
    assert compare_settling([10, float("inf")], [20, 21]) == 1
