"""Every formula of the theory module against values computed by hand.

Small case: lambda = 1/4 (sqrt = 1/2), beta = 1/2, L = 2.
"""

from __future__ import annotations

import numpy as np
import pytest

from decentopt import theory

LAM, BETA, L = 0.25, 0.5, 2.0


def test_step_sizes():
    assert theory.nonconvex_step_size(LAM, BETA, L=L) == pytest.approx(0.0625)  # min(.5/8, .5/8)
    assert theory.nonconvex_step_size(0.81, 0.5, L=1.0) == pytest.approx(0.025)  # (1-.9)/4
    assert theory.pl_step_size(LAM, BETA) == pytest.approx(0.05)  # min(.5/10, .5/5)
    assert theory.pl_step_size(LAM, 0.9, L=2.0) == pytest.approx(0.01)  # (1-.9)/(5*2)


def test_constants():
    assert theory.C0(LAM, BETA) == pytest.approx(4 + 0.375 + 0.125)
    assert theory.D1(LAM, BETA) == pytest.approx(3.125 / 1.5 + 80 / 4.5 + 160 / 3 * 0.03125)
    assert theory.D2(LAM, BETA) == pytest.approx(100 / 3 * (0.3125 / 1.5 + 1 + 0.09375))
    assert theory.rho2(LAM, BETA) == pytest.approx(0.9)
    assert theory.rho1(0.1, 0.5) == pytest.approx(0.95)
    # beta = 0 (ED): C0 = 24 / (1 + sqrt(lam))
    assert theory.C0(LAM, 0.0) == pytest.approx(16.0)


def test_zeta0_squared_uses_the_squared_norm():
    G = np.array([[1.0, 0.0], [3.0, 0.0]])
    assert theory.zeta0_squared(np.eye(2), G) == pytest.approx(1.0)  # ||[-1, 1]||^2 / 2
    W = np.full((2, 2), 0.5)  # complete graph: W (I - J) = 0
    assert theory.zeta0_squared(W, G) == pytest.approx(0.0)
    assert theory.zeta0_squared(np.eye(2), 2 * G) == pytest.approx(4.0)  # quadratic in G


def test_nonconvex_bound_terms():
    b = theory.nonconvex_bound(
        alpha=0.05, T=100, L=L, sigma2=1.0, n=4, lam=LAM, beta=BETA, f_gap0=3.0, zeta0_sq=2.0
    )
    assert b.terms["initial gap"] == pytest.approx(1.2)
    assert b.terms["noise (centralized)"] == pytest.approx(0.05)
    assert b.terms["noise (network)"] == pytest.approx(52 * 0.000625 / 0.75)
    assert b.terms["heterogeneity"] == pytest.approx(0.0288)
    assert b.total == pytest.approx(1.2 + 0.05 + 52 * 0.000625 / 0.75 + 0.0288)
    assert b.step_size_ok
    big = theory.nonconvex_bound(
        alpha=0.1, T=100, L=L, sigma2=1.0, n=4, lam=LAM, beta=BETA, f_gap0=3.0, zeta0_sq=2.0
    )
    assert not big.step_size_ok


def test_pl_bound_terms():
    alpha, mu, t = 0.04, 0.5, 10
    b = theory.pl_bound(
        t=t,
        alpha=alpha,
        L=1.0,
        mu=mu,
        sigma2=1.0,
        n=4,
        lam=LAM,
        beta=BETA,
        f_gap0=2.0,
        zeta0_sq=1.0,
    )
    d1, d2 = theory.D1(LAM, BETA), theory.D2(LAM, BETA)
    assert b.terms["initial gap"] == pytest.approx((18 + d1 * alpha**3 / 0.25) * 0.98**t)
    assert b.terms["heterogeneity"] == pytest.approx(d2 * alpha**2 / 0.75 * 0.9**t)
    assert b.terms["noise (centralized)"] == pytest.approx(6 * alpha / (4 * mu))
    assert b.terms["noise (network)"] == pytest.approx(169 * alpha**2 * 0.0625 / (mu * 0.75))
    assert b.step_size_ok


def test_bad_arguments():
    with pytest.raises(ValueError, match="lambda"):
        theory.C0(1.0, 0.5)
    with pytest.raises(ValueError, match="beta"):
        theory.D1(0.5, 1.0)
    with pytest.raises(ValueError, match="L must be > 0"):
        theory.nonconvex_step_size(0.5, 0.5, L=0.0)
