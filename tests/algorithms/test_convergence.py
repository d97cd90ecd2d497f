"""Exact convergence of the bias-corrected methods; the heterogeneity bias of the others."""

from __future__ import annotations

import numpy as np
import pytest

import decentopt as dopt

EXACT = ["ed", "edm", "dsgt", "dsgt_hb", "extra", "nids", "mt"]
BIASED = ["dsgd", "dmsgd"]


@pytest.fixture(scope="module")
def deterministic_problem():
    # two heterogeneity levels (c = 1 and c = 1/4, so zeta^2 differs by 16x), sigma = 0
    return dopt.problems.Quadratic.paper(
        n=16, d=5, p=10, c=[1.0, 0.25], sigma2=0.0, repetitions=2, seed=1
    )


def run(name, prob, iterations=4000):
    hp = {"lr": 0.05}
    if dopt.algorithms.REGISTRY[name].uses_momentum:
        hp["beta"] = 0.8
    return dopt.simulate(
        dopt.algorithms.make(name, **hp), prob, dopt.topology.ring(prob.n), iterations, seed=0
    )


@pytest.mark.parametrize("name", EXACT)
def test_bias_corrected_methods_reach_the_optimum(name, deterministic_problem):
    res = run(name, deterministic_problem)
    assert np.all(res.final("dist_to_opt") < 1e-10)
    assert np.all(res.final("grad_norm") < 1e-10)


@pytest.mark.parametrize("name", BIASED)
def test_biased_methods_stall_with_bias_growing_in_heterogeneity(name, deterministic_problem):
    prob = deterministic_problem
    res = run(name, prob)
    final = res.final("dist_to_opt")
    low, high = final[:2], final[2:]
    assert np.all(low > 1e-3), "the bias must be visible"
    # it has stalled: the last quarter of the run does not improve it
    mid = res.history["dist_to_opt"][np.searchsorted(res.steps, 3000)]
    np.testing.assert_allclose(final, mid, rtol=1e-6)
    # and it grows with zeta^2 (here 16x, so the bias grows about 16x)
    assert np.all(high > 8 * low)
    zeta_low, zeta_high = prob.zeta2[:2].numpy(), prob.zeta2[2:].numpy()
    np.testing.assert_allclose(zeta_high / zeta_low, 16.0, rtol=1e-10)
