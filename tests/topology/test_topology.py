from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.topology import AssumptionError


@pytest.mark.parametrize("n", [5, 8, 32])
def test_paper_ring_spectrum(n):
    topo = dopt.topology.ring(n)
    W = topo.W.numpy()
    assert np.allclose(np.diag(W), 0.5)
    assert W[0, 1] == W[0, n - 1] == 0.25
    want = np.sort(0.5 + 0.5 * np.cos(2 * np.pi * np.arange(n) / n))
    np.testing.assert_allclose(topo.eigenvalues, want, atol=1e-12)
    assert topo.lam == pytest.approx(0.5 + 0.5 * math.cos(2 * math.pi / n), abs=1e-12)
    assert topo.spectral_gap == pytest.approx(1 - topo.lam)
    assert topo.lam_min == pytest.approx(want[0], abs=1e-12)


def test_paper_ring_n32_lambda():
    assert dopt.topology.ring(32).lam == pytest.approx(0.990393, abs=1e-6)


def test_complete_graph_mixes_exactly():
    topo = dopt.topology.complete(6)
    assert topo.lam == pytest.approx(0.0, abs=1e-12)
    assert topo.lam_min == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    "topo",
    [
        dopt.topology.torus(16, 4),
        dopt.topology.grid(15, 5),
        dopt.topology.hypercube(16),
        dopt.topology.torus(12),
        dopt.topology.grid(7),
        dopt.topology.star(7),
        dopt.topology.exponential(16),
        dopt.topology.erdos_renyi(20, 0.3, seed=1),
        dopt.topology.ring(10, weights="metropolis"),
        dopt.topology.ring(9, weights="max_degree"),
        dopt.topology.from_networkx(nx.petersen_graph()),
    ],
    ids=lambda t: t.name,
)
def test_builders_satisfy_assumption1(topo):
    W = topo.W.numpy()
    np.testing.assert_allclose(W, W.T)
    np.testing.assert_allclose(W.sum(1), 1.0)
    assert np.all(np.diag(W) > 0)
    assert topo.lam_min >= -1e-12
    assert 0 < topo.spectral_gap <= 1


def test_lazy_is_applied_only_when_needed():
    even = dopt.topology.ring(10, weights="metropolis")  # eigenvalue -1/3 before the transform
    assert even.name.startswith("lazy(")
    assert even.lam_min == pytest.approx(1 / 3, abs=1e-12)  # (1 - 1/3) / 2
    star = dopt.topology.star(5)  # Metropolis star: eigenvalues >= 0, left as it is
    assert not star.name.startswith("lazy(")
    with pytest.raises(AssumptionError, match=r"1\(3\).*lazy"):
        dopt.topology.from_networkx(nx.cycle_graph(10), lazy=False)


def test_lazy_true_takes_a_sparse_graph_whose_own_w_has_a_negative_eigenvalue():
    auto = dopt.topology.hypercube(1024)  # stored sparse, its W with eigenvalue -9/11
    forced = dopt.topology.hypercube(1024, lazy=True)
    assert forced.name == auto.name == "lazy(hypercube(1024)[metropolis])"
    assert (forced.csr != auto.csr).nnz == 0 and forced.lam_min == pytest.approx(1 / 11)


def test_metropolis_and_max_degree_weights():
    A = nx.to_numpy_array(nx.star_graph(3))
    W = dopt.topology.metropolis_hastings_weights(A)
    assert W[0, 1] == pytest.approx(1 / 4)  # 1 / (1 + max(3, 1))
    assert W[1, 1] == pytest.approx(3 / 4)
    M = dopt.topology.max_degree_weights(A)
    assert M[1, 2] == 0 and M[0, 1] == pytest.approx(1 / 4) and M[1, 1] == pytest.approx(3 / 4)


def test_exponential_graph_neighbours():
    topo = dopt.topology.exponential(8)
    assert set(topo.neighbors[0]) == {1, 2, 4, 7, 6}


def test_lazy_transform():
    topo = dopt.topology.ring(8)
    lazy = topo.lazy()
    np.testing.assert_allclose(lazy.W.numpy(), (topo.W.numpy() + np.eye(8)) / 2)
    assert lazy.lam == pytest.approx((1 + topo.lam) / 2)


def good() -> np.ndarray:
    return dopt.topology.ring(6).W.numpy().copy()


@pytest.mark.parametrize(
    ("W", "pattern"),
    [
        (np.ones((2, 3)) / 3, "square"),
        (np.array([[0.5, 0.5], [0.5, np.nan]]), "NaN"),
        (np.array([[1.2, -0.2], [-0.2, 1.2]]), "negative"),
        (np.array([[0.6, 0.4], [0.3, 0.7]]), r"1\(2\).*not symmetric"),
        (np.array([[0.6, 0.3], [0.3, 0.6]]), r"1\(2\).*doubly stochastic"),
        (np.array([[0.0, 1.0], [1.0, 0.0]]), r"1\(1\).*w_ii.*lazy"),
        (
            np.array([[0.2, 0.4, 0.4], [0.4, 0.2, 0.4], [0.4, 0.4, 0.2]]),
            r"1\(3\).*smallest eigenvalue.*lazy",
        ),
        (np.eye(3), "not connected"),
        ("not a matrix", "square array of numbers"),
    ],
)
def test_assumption1_violations(W, pattern):
    with pytest.raises(AssumptionError, match=pattern):
        dopt.topology.from_matrix(W)


def test_from_matrix_accepts_tensor_and_keeps_values():
    W = good()
    topo = dopt.topology.from_matrix(torch.from_numpy(W))
    assert topo.W.dtype == torch.float64
    np.testing.assert_array_equal(topo.W.numpy(), W)


def test_make_and_bad_arguments():
    assert dopt.topology.make("ring", 5).n == 5
    with pytest.raises(ValueError, match="unknown topology 'cube'"):
        dopt.topology.make("cube", 5)
    with pytest.raises(ValueError, match="integer >= 1"):
        dopt.topology.ring(0)
    with pytest.raises(ValueError, match="power of two"):
        dopt.topology.hypercube(12)
    with pytest.raises(ValueError, match="at least 3 x 3"):
        dopt.topology.torus(6)
    assert "torus(3x4)" in dopt.topology.torus(12).name
    assert dopt.topology.hypercube(8).n == 8
    with pytest.raises(ValueError, match="undirected"):
        dopt.topology.from_networkx(nx.DiGraph([(0, 1)]))
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        dopt.topology.erdos_renyi(5, 0.0)


def test_summary_fields():
    s = dopt.topology.ring(32).summary()
    assert set(s) == {"name", "n", "lambda", "1-lambda", "lambda_min", "max_degree"}
    assert s["max_degree"] == 2


def test_large_circulant_spectra_come_from_an_fft():
    """Above FFT_FROM agents: rfft of W's first row, the same values as the cosine sums."""
    from decentopt.topology.circulant import FFT_FROM, spectrum

    n = FFT_FROM + 4465
    stencil = dict(dopt.topology.exponential(n).stencil)
    fast = spectrum(n, stencil)
    k = np.arange(n // 2 + 1)
    slow = sum(c * np.cos(2 * np.pi * o * k / n) for o, c in stencil.items())
    np.testing.assert_allclose(fast, slow, atol=1e-12)


@pytest.mark.slow
def test_an_exponential_graph_of_ten_million_agents_is_built():
    topo = dopt.topology.exponential(10**7)
    assert 0 < topo.lam < 1 and topo.lam_min > 0 and topo.max_degree == 2 * 24  # +-2^0..2^23
