"""Run-by-run ratios and the judgements on them (``decentopt.experiments.paired``)."""

from __future__ import annotations

import numpy as np
import pytest

from decentopt.experiments.paired import paired_ratios, ratio_grows, ratio_near
from decentopt.experiments.summary import Stat

INF = float("inf")


def stat(settle, diverged: int = 0) -> Stat:
    return Stat(0.0, 0.0, 0.0, None, diverged, 1.0, settle=tuple(settle))


def test_ratios_are_taken_run_by_run_and_never_settling_is_placed():
    ratios = paired_ratios(stat([10, 20, INF, INF]), stat([30, INF, 5, INF]), lambda s: s.settle)
    assert ratios[0] == 3 and ratios[1] == INF and ratios[2] == 0 and np.isnan(ratios[3])
    assert paired_ratios(stat([1, 2], diverged=1), stat([1, 2]), lambda s: s.settle) is None


@pytest.mark.parametrize(
    ("ratios", "expected"),
    [
        ([3.9, 4.0, 4.1, 4.05, 3.95], True),  # tight around 4, inside 3 to 5
        ([2.0, 2.1, 1.9, 2.05, 1.95], False),  # tight around 2: below 3
        ([6.0, 6.2, 5.9, 6.1, 6.0], False),  # above 5
        ([3.0, 6.0, 2.0, 7.0, 4.0], None),  # too spread to tell
        ([4.0, INF, 4.0, 4.0, 4.0], False),  # one method never settles where the other does
        ([4.0, INF, 0.0, 4.0, 4.0], None),  # both ways: unknown
    ],
)
def test_ratio_near_is_an_equivalence_test(ratios, expected):
    verdict, text = ratio_near(np.array(ratios), 3.0, 5.0, deterministic=False)
    assert verdict is expected, text


def test_one_run_is_judged_as_it_is_only_without_noise():
    assert ratio_near(np.array([4.0]), 3.0, 5.0, deterministic=True)[0] is True
    assert ratio_near(np.array([4.0]), 3.0, 5.0, deterministic=False)[0] is None


def test_ratio_grows_compares_two_cases_by_rank():
    small, large = np.linspace(1.1, 1.3, 6), np.linspace(1.4, 1.6, 6)
    assert ratio_grows(small, large, comparisons=1)[0] is True
    assert ratio_grows(large, small, comparisons=1)[0] is False
    assert ratio_grows(small, small.copy(), comparisons=1)[0] is None
    verdict, text = ratio_grows(small[:3], large[:3], comparisons=1)
    assert verdict is None and "too few runs" in text
