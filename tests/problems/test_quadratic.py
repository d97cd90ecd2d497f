from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.problems import Quadratic


@pytest.fixture(scope="module")
def prob():
    return Quadratic.paper(n=8, d=4, p=6, c=[1.0, 0.5], sigma2=0.05, repetitions=3, seed=0)


def test_shapes_and_constants(prob):
    assert (prob.n, prob.repetitions, prob.dim, prob.p) == (8, 6, 4, 6)
    assert prob.x_star.shape == (6, 4)
    assert prob.zeta2.shape == prob.L.shape == prob.mu.shape == (6,)
    assert torch.all(prob.mu > 0) and torch.all(prob.L >= prob.mu)


def test_x_star_is_the_optimum_for_every_c(prob):
    grad_f = prob.full_gradient(prob.x_star.expand(8, -1, -1)).mean(0)
    assert grad_f.abs().max() < 1e-12
    # the same draws for both c, so the same x*
    torch.testing.assert_close(prob.x_star[:3], prob.x_star[3:])


def test_heterogeneity_scales_as_one_over_c_squared(prob):
    torch.testing.assert_close(prob.zeta2[3:] / prob.zeta2[:3], torch.full((3,), 4.0))


def test_paper_generator_definition():
    """x_i* = x* + (u_i - x*) / c with x* from the u_i (the paper's recipe)."""
    gen = torch.Generator().manual_seed(3)
    A = torch.randn(5, 1, 7, 3, generator=gen)
    u = torch.randn(5, 1, 3, generator=gen)
    prob = Quadratic.paper(n=5, d=3, p=7, c=2.0, sigma2=0.0, repetitions=1, seed=3)
    G = A.transpose(-1, -2) @ A
    x_star = torch.linalg.solve(G.sum(0), (G @ u.unsqueeze(-1)).squeeze(-1).sum(0))
    torch.testing.assert_close(prob.x_star, x_star)
    torch.testing.assert_close(prob.x_local, x_star + (u - x_star) / 2.0)


def test_gradient_noise_is_unbiased_with_paper_covariance():
    prob = Quadratic.paper(n=2, d=3, p=5, sigma2=0.5, repetitions=1, seed=1)
    x = torch.randn(2, 1, 3)
    gen = torch.Generator().manual_seed(0)
    samples = torch.stack([prob.gradient(x, gen) - prob.full_gradient(x) for _ in range(20000)])
    assert samples.mean(0).abs().max() < 0.01
    cov = torch.einsum("si,sj->ij", samples[:, 0, 0], samples[:, 0, 0]) / len(samples)
    want = 0.5 * prob.H[0, 0] / prob.p
    torch.testing.assert_close(cov, want, atol=0.01, rtol=0.05)


def test_metrics(prob):
    x = prob.x_star.expand(8, -1, -1).clone()
    m = prob.metrics(x)
    for name in ("dist_to_opt", "consensus", "grad_norm", "opt_gap"):
        assert m[name].shape == (6,) and m[name].abs().max() < 1e-20
    x[0] += 1.0
    m = prob.metrics(x)
    torch.testing.assert_close(m["dist_to_opt"], torch.full((6,), 4 / 8))
    torch.testing.assert_close(m["consensus"], torch.full((6,), 4 * (1 / 8) * (7 / 8)))


def test_custom_problem_and_errors():
    A = torch.randn(4, 6, 3)
    prob = Quadratic(A=A, x_local=torch.randn(4, 3), sigma2=0.0)
    assert prob.repetitions == 1
    with pytest.raises(ValueError, match="x_local must have shape"):
        Quadratic(A=A, x_local=torch.randn(4, 2))
    with pytest.raises(ValueError, match="sigma2"):
        Quadratic(A=A, x_local=torch.randn(4, 3), sigma2=-1.0)
    with pytest.raises(ValueError, match="singular"):
        Quadratic(A=torch.zeros(4, 6, 3), x_local=torch.randn(4, 3))
    with pytest.raises(ValueError, match="c must be > 0"):
        Quadratic.paper(n=4, c=0.0)


@pytest.mark.parametrize(("p", "d"), [(20, 4), (3, 5)])
def test_gradient_noise_has_covariance_sigma2_H_over_p(p, d):
    """Both sampling branches (Cholesky of H_i; A_i^T eps when p < d, H_i singular)."""
    prob = Quadratic.paper(n=2, d=d, p=p, sigma2=0.5, repetitions=1, seed=3)
    gen = torch.Generator().manual_seed(0)
    x = torch.zeros(2, 1, d, dtype=torch.float64)
    exact = prob.full_gradient(x)
    draws = torch.stack([prob.gradient(x, gen) - exact for _ in range(20000)])  # (S, n, 1, d)
    for i in range(2):
        noise = draws[:, i, 0]
        cov = noise.T @ noise / len(noise)
        A = prob.A[i, 0]
        want = 0.5 * (A.T @ A / p) / p
        torch.testing.assert_close(cov, want, rtol=0.0, atol=0.06 * float(want.diagonal().max()))


def test_low_memory_form_equals_the_hessian_form():
    """p < d: no per-agent d x d Hessians are stored, and the run is the same."""
    paper = Quadratic.paper(n=6, d=12, p=4, sigma2=0.1, repetitions=2, seed=5)
    assert paper.low_memory and paper.H is None
    full = Quadratic(paper.A, paper.x_local, 0.1, low_memory=False)
    assert full.H is not None
    torch.testing.assert_close(paper.x_star, full.x_star)
    torch.testing.assert_close(paper.zeta2, full.zeta2)
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    runs = [dopt.simulate(alg, q, dopt.topology.ring(6), 200, seed=1) for q in (paper, full)]
    np.testing.assert_allclose(
        runs[0].history["dist_to_opt"], runs[1].history["dist_to_opt"], rtol=1e-9
    )
