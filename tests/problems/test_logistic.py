from __future__ import annotations

import pytest
import torch

import decentopt as dopt
from decentopt.problems import Logistic


@pytest.fixture(scope="module")
def prob():
    return Logistic.paper(
        n=6, d=4, m=50, sigma_h2=[0.1, 2.0], mu=0.05, sigma_s2=0.0, repetitions=2, seed=0
    )


def test_optimum_is_exact(prob):
    grad = prob.full_gradient(prob.x_star.expand(6, -1, -1)).mean(0)
    assert grad.abs().max() < 1e-12
    # and it is the minimiser: f increases in every direction
    for direction in torch.eye(4):
        assert torch.all(prob.objective(prob.x_star + 1e-3 * direction) > prob.f_star)


def test_gradient_matches_autograd(prob):
    x = torch.randn(6, 4, 4, requires_grad=True)
    U = prob._U.repeat(1, prob.repetitions // prob._U.shape[1], 1, 1)
    z = ((prob.v.unsqueeze(-1) * U) @ x.unsqueeze(-1)).squeeze(-1)
    loss = torch.nn.functional.softplus(-z).mean(-1).sum() + 0.5 * prob.mu * x.pow(2).sum()
    (auto,) = torch.autograd.grad(loss, x)
    torch.testing.assert_close(prob.full_gradient(x.detach()), auto)


def test_labels_follow_the_logistic_model():
    # one agent, many samples: the MLE without penalty recovers x_i = 1 + eps_i
    prob = Logistic.paper(
        n=1, d=3, m=40000, sigma_h2=0.0, mu=1e-6, sigma_s2=0.0, repetitions=1, seed=3
    )
    torch.testing.assert_close(prob.x_star[0], torch.ones(3), atol=0.05, rtol=0)


def test_heterogeneity_grows_with_sigma_h2(prob):
    assert torch.all(prob.zeta2[2:] > 5 * prob.zeta2[:2])


def test_noise_and_float32_path():
    prob = Logistic.paper(
        n=3, d=2, m=30, sigma_s2=0.25, repetitions=1, seed=1, compute_dtype=torch.float32
    )
    x = torch.zeros(3, 1, 2)
    gen = torch.Generator().manual_seed(0)
    exact = prob.full_gradient(x)
    samples = torch.stack([prob.gradient(x, gen) - exact for _ in range(4000)])
    assert samples.mean().abs() < 0.02
    assert samples.var().item() == pytest.approx(0.25, rel=0.1)
    assert (prob.full_gradient(x, exact=False) - exact).abs().max() < 1e-6


def test_bias_corrected_methods_converge_exactly(prob):
    res = dopt.simulate(
        dopt.algorithms.make("edm", lr=0.5, beta=0.5), prob, dopt.topology.ring(6), 3000
    )
    assert res.final("grad_norm").max() < 1e-20
    assert res.final("opt_gap").max() < 1e-12


def test_errors():
    with pytest.raises(ValueError, match="mu must be > 0"):
        Logistic.paper(n=2, m=5, d=2, mu=0.0)
    with pytest.raises(ValueError, match="labels"):
        Logistic(torch.zeros(2, 3, 2), torch.zeros(2, 3), mu=0.1)
    with pytest.raises(ValueError, match="shape"):
        Logistic(torch.zeros(2, 3, 2), torch.ones(2, 4), mu=0.1)


def test_levels_share_their_samples_and_give_the_numbers_of_their_own_copies():
    """paper() stores each sample once for all heterogeneity levels; every quantity equals
    that of the same problem given one copy of the samples per level, to a few units in the
    last place. Not bit for bit: the shared samples' margins are one product with a column
    per level, the copies' one product per column, and BLAS libraries may round a product
    with one right-hand side differently from one with several (MKL on AVX-512 does)."""
    shared = Logistic.paper(
        n=4, d=6, m=40, sigma_h2=[0.1, 10.0], repetitions=3, seed=2, compute_dtype=torch.float32
    )
    assert shared._U.shape[1] == 3
    assert shared.repetitions == 6
    copies = Logistic(
        shared._U.repeat(1, 2, 1, 1),
        shared.v,
        shared.mu,
        shared.sigma_s2,
        compute_dtype=torch.float32,
    )
    x = torch.randn(4, 6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pairs = {
        "x_star": (shared.x_star, copies.x_star),
        "f_star": (shared.f_star, copies.f_star),
        "L": (shared.L, copies.L),
        "zeta2": (shared.zeta2, copies.zeta2),
        "gradient": (shared.full_gradient(x), copies.full_gradient(x)),
        "float32 gradient": (
            shared.full_gradient(x, exact=False),
            copies.full_gradient(x, exact=False),
        ),
        "objective": (shared.objective(x.mean(0)), copies.objective(x.mean(0))),
    }
    for name, (a, b) in pairs.items():
        assert a.shape == b.shape, name
        computed_in = torch.float32 if name.startswith("float32") else b.dtype
        ulp = torch.finfo(computed_in).eps * float(b.abs().max())
        assert float((a - b).abs().max()) <= 8 * ulp, name
    with pytest.raises(ValueError, match="multiple of S"):
        Logistic(shared._U, shared.v[:, :4], mu=0.1)
