"""Step-size schedules: the multi-step decay with warm-up, and its hyper-parameters
refused in one line each."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decentopt.schedules import MultiStep


def test_multi_step_decays_at_its_milestones_after_a_linear_warm_up():
    schedule = MultiStep(torch.tensor(0.4), milestones=[6, 3], gamma=0.5, warmup=np.int64(4))
    assert schedule.milestones == (3, 6) and schedule.warmup == 4
    want = [0.1, 0.2, 0.3, 0.4 * 0.5, 0.4 * 0.5, 0.4 * 0.5, 0.4 * 0.25]
    assert [schedule(t) for t in range(7)] == pytest.approx(want)


@pytest.mark.parametrize(
    ("kwargs", "error", "said"),
    [
        ({"base": 0.0}, ValueError, "MultiStep: base must be > 0; got 0.0"),
        ({"base": 1.0, "gamma": 0.0}, ValueError, "MultiStep: gamma must be in (0, 1]; got 0.0"),
        ({"base": 1.0, "gamma": 2}, ValueError, "MultiStep: gamma must be in (0, 1]; got 2.0"),
        ({"base": 1.0, "warmup": -1}, ValueError, "MultiStep: warmup must be >= 0; got -1"),
        ({"base": 1.0, "warmup": 1.5}, TypeError, "MultiStep: warmup must be a whole number"),
        ({"base": "0.1"}, TypeError, "MultiStep: base must be a real number; got str '0.1'"),
    ],
)
def test_bad_hyper_parameters_are_refused_in_one_line(kwargs, error, said):
    with pytest.raises(error) as caught:
        MultiStep(**kwargs)
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value)
