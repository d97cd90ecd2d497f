"""Numbers as users pass them, dtypes, and names with "did you mean"."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt._checks import as_count, as_real, unknown_name


@pytest.mark.parametrize("lr", [0.05, np.float32(0.05), np.float64(0.05), torch.tensor(0.05)])
def test_rates_accept_any_real_scalar(lr):
    alg = dopt.algorithms.make("edm", lr=lr, beta=np.float32(0.9))
    assert type(alg.lr) is float and alg.lr == pytest.approx(0.05)
    assert type(alg.rule.beta) is float and alg.rule.beta == pytest.approx(0.9)


def test_counts_accept_integral_numbers():
    assert as_count(np.int64(10), "n") == 10
    assert as_count(torch.tensor(3), "n") == 3
    assert as_count(20.0, "iterations") == 20
    with pytest.raises(TypeError, match="whole number"):
        as_count(20.5, "iterations")
    with pytest.raises(TypeError, match="whole number"):
        as_count(True, "iterations")
    with pytest.raises(ValueError, match="finite"):
        as_real(float("nan"), "c")
    prob = dopt.problems.Quadratic.paper(n=np.int64(4), d=3, p=5, repetitions=1, seed=0)
    res = dopt.simulate(
        dopt.algorithms.make("ed", lr=0.05), prob, dopt.topology.ring(4), np.int64(10)
    )
    assert res.steps[-1] == 10


def test_bad_rates_and_schedules_are_refused():
    with pytest.raises(TypeError, match="lr must be a real number"):
        dopt.algorithms.make("edm", lr="fast")
    with pytest.raises(ValueError, match="positive finite"):
        dopt.algorithms.make("edm", lr=float("inf"))
    alg = dopt.algorithms.make("ed", lr=lambda t: float("inf"))
    with pytest.raises(ValueError, match="positive and finite"):
        alg.lr_at(0)


def test_half_precision_names_the_supported_dtypes():
    with pytest.raises(TypeError, match=r"float16 is not supported; use torch.float32"):
        dopt.problems.Quadratic.paper(n=4, repetitions=1, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"bfloat16 is not supported"):
        dopt.problems.Logistic.paper(n=4, m=10, repetitions=1, dtype=torch.bfloat16)


def test_problem_parameters_reject_nan():
    with pytest.raises(ValueError, match="sigma_h2 must be finite"):
        dopt.problems.Logistic.paper(n=4, m=10, repetitions=1, sigma_h2=float("nan"))
    with pytest.raises(ValueError, match="c must be finite"):
        dopt.problems.Quadratic.paper(n=4, repetitions=1, c=float("nan"))
    with pytest.raises(ValueError, match="n must be >= 1"):
        dopt.problems.Quadratic.paper(n=-3, repetitions=1)


def test_did_you_mean():
    assert "did you mean 'edm'?" in unknown_name("algorithm", "edmm", ["ed", "edm"])
    assert "(" not in unknown_name("dataset", "x", ("cifar10", "digits"))  # no Python tuple
    with pytest.raises(ValueError, match=r"did you mean 'dsgt_hb'\?"):
        dopt.algorithms.make("DSGT-BH")
    with pytest.raises(ValueError, match=r"did you mean 'ring'\?"):
        dopt.topology.make("rign", 8)
    with pytest.raises(TypeError, match=r"did you mean 'beta'\?") as info:
        dopt.algorithms.make("edm", bta=0.9)
    # only real hyper-parameters are listed, not class constants
    assert "uses_momentum" not in str(info.value) and "rounds_per_step" not in str(info.value)
    assert dopt.algorithms.hyperparameters("edm") == (
        "lr",
        "beta",
        "nesterov",
        "dampening",
        "gossip",
        "outer",
    )
    with pytest.raises(TypeError, match="momentum is called beta"):
        dopt.algorithms.make("edm", momentum=0.9)


def test_from_matrix_offers_the_lazy_transform():
    W = np.array([[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(dopt.topology.AssumptionError, match=r"from_matrix\(W, lazy=True\)"):
        dopt.topology.from_matrix(W)
    topo = dopt.topology.from_matrix(W, lazy=True)
    np.testing.assert_allclose(topo.W.numpy(), np.full((2, 2), 0.5))
    assert topo.name == "lazy(custom)"


def test_step_size_functions_share_one_argument_order():
    from decentopt import theory

    assert theory.nonconvex_step_size(0.25, 0.5, L=2.0) == pytest.approx(0.0625)
    with pytest.raises(TypeError):
        theory.nonconvex_step_size(0.25, 2.0, 0.5)  # the old (lam, L, beta) order


def test_a_wrong_gradient_shape_is_refused():
    class Broken:
        def __init__(self) -> None:
            self.inner = dopt.problems.Quadratic.paper(n=4, d=3, p=5, repetitions=2)
            self.n, self.repetitions, self.dim = 4, 2, 3
            self.dtype, self.x_star = torch.float64, self.inner.x_star

        def initial_point(self):
            return self.inner.initial_point()

        def gradient(self, x, generator):
            return self.inner.gradient(x, generator).sum(-1, keepdim=True)  # (n, R, 1)

        def metrics(self, x):
            return self.inner.metrics(x)

    with pytest.raises(ValueError, match=r"Broken.gradient returned shape \(4, 2, 1\)"):
        dopt.simulate(dopt.algorithms.make("edm"), Broken(), dopt.topology.ring(4), 5)
