from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.algorithms.gossips import RoundsChannel as MultiRound
from decentopt.comm import SimulatedCommunicator


def polynomial(W: np.ndarray, rounds: int, acceleration: str) -> np.ndarray:
    """P(W) from the eigen-decomposition: W^K, or W^(K mod 2) Q_{K//2}(W)^2."""
    eig, V = np.linalg.eigh(W)
    if acceleration == "none":
        p = eig**rounds
    else:
        lam = np.sort(np.abs(eig))[-2]
        T = np.polynomial.Chebyshev.basis(rounds // 2)
        p = (T(eig / lam) / T(1 / lam)) ** 2 * (eig if rounds % 2 else 1.0)
    return V @ np.diag(p) @ V.T


@pytest.mark.parametrize("acceleration", ["none", "chebyshev"])
@pytest.mark.parametrize("rounds", [2, 4, 5])
def test_a_multi_round_mix_applies_its_polynomial(acceleration, rounds):
    topo = dopt.topology.ring(12)
    comm = MultiRound(SimulatedCommunicator(topo), rounds, acceleration)
    z = torch.randn(12, 3, 2, dtype=torch.float64)
    P = polynomial(topo.W.numpy(), rounds, acceleration)
    got = comm.mix(z)
    np.testing.assert_allclose(got.numpy(), np.einsum("ij,jkl->ikl", P, z.numpy()), atol=1e-12)
    assert comm.stats.rounds == rounds  # counted per round
    a, b = comm.mix_many([z, 2 * z])
    np.testing.assert_allclose(b.numpy(), 2 * a.numpy(), atol=1e-12)
    assert comm.stats.rounds == 2 * rounds  # packed: no extra rounds


def test_chebyshev_keeps_assumption_1_and_mixes_faster_per_round():
    topo = dopt.topology.ring(32)
    W = topo.W.numpy()
    P = polynomial(W, 4, "chebyshev")
    np.testing.assert_allclose(P, P.T, atol=1e-12)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    eig = np.linalg.eigvalsh(P)
    assert eig[0] > -1e-12  # positive semi-definite, as ED/EDM/NIDS need
    comm = MultiRound(SimulatedCommunicator(topo), 4, "chebyshev")
    assert comm.lam == pytest.approx(np.sort(np.abs(eig))[-2], rel=1e-9)
    plain = MultiRound(SimulatedCommunicator(topo), 4, "none")
    assert comm.lam < plain.lam == pytest.approx(topo.lam**4)
    # EDM stays exact with exact gradients, and converges in fewer rounds
    prob = dopt.problems.Quadratic.paper(n=32, d=3, p=5, sigma2=0.0, repetitions=1, seed=2)
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.5)
    state = alg.init(prob.initial_point())
    gen = torch.Generator().manual_seed(0)
    for _ in range(1500):
        state = alg.step(state, prob.gradient(state.x, gen), comm)
    assert float((state.x - prob.x_star).pow(2).sum(-1).mean()) < 1e-10


def test_bad_options_are_refused():
    comm = SimulatedCommunicator(dopt.topology.ring(4))
    with pytest.raises(ValueError, match="rounds must be"):
        MultiRound(comm, 0)
    with pytest.raises(ValueError, match="acceleration must be"):
        MultiRound(comm, 2, "nesterov")
