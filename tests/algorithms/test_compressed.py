"""Compressed gossip (CHOCO): exact where theory says so, biased where it says so, and counted."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator


@pytest.fixture(scope="module")
def deterministic_problem():
    return dopt.problems.Quadratic.paper(n=16, d=40, p=60, c=0.5, sigma2=0.0, repetitions=2, seed=1)


def run(name, prob, iterations=4000, **hp):
    alg = dopt.algorithms.make(name, lr=0.05, **hp)
    return dopt.simulate(alg, prob, dopt.topology.ring(prob.n), iterations, seed=0)


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("choco_ed", {}),
        ("choco_edm", {"beta": 0.8}),
    ],
)
@pytest.mark.parametrize(("compression", "gamma"), [("top_k(0.5)", 0.1), ("qsgd(4)", 0.4)])
def test_compressed_exact_diffusion_reaches_the_optimum(
    deterministic_problem, name, extra, compression, gamma
):
    """With exact gradients the compressed ED/EDM converge to x* itself (half the entries
    per message, or 5 bits per entry): the compression error vanishes as X_hat catches up,
    and what remains is ED over (1 - gamma) I + gamma W. (Aggressive compression needs a
    far smaller gamma on this ring: docs/algorithms.md.)"""
    res = run(name, deterministic_problem, compression=compression, gamma=gamma, **extra)
    assert np.all(res.final("dist_to_opt") < 1e-10)


def test_compressed_dsgd_keeps_the_heterogeneity_bias(deterministic_problem):
    """CHOCO-SGD is DSGD with a slower effective W: it stalls above the optimum, by more
    than DSGD does (its bias grows as the mixing slows)."""
    choco = run("choco_dsgd", deterministic_problem, compression="top_k(0.1)", gamma=0.4)
    dsgd = run("dsgd", deterministic_problem)
    assert np.all(choco.final("dist_to_opt") > 1e-4)
    assert np.all(choco.final("dist_to_opt") > dsgd.final("dist_to_opt"))
    mid = choco.history["dist_to_opt"][np.searchsorted(choco.steps, 3000)]
    np.testing.assert_allclose(choco.final("dist_to_opt"), mid, rtol=1e-4)  # stalled


def test_bytes_are_counted_compressed():
    n, d = 8, 50
    topo = dopt.topology.ring(n)
    x = torch.randn(n, 2, d, dtype=torch.float32)
    for spec, per_row in [
        ("none", d * 4),
        ("top_k(0.1)", 5 * 8),
        ("sign", 4 + 7),
        ("qsgd(3)", 4 + 25),
    ]:
        comm = SimulatedCommunicator(topo)
        q, wq = comm.mix_compressed(x, spec)
        assert comm.stats.rounds == 1
        assert comm.stats.bytes_sent == n * 2 * 2 * per_row  # n agents, 2 neighbours, 2 rows
        assert comm.stats.bytes_per_agent == 2 * 2 * per_row
        torch.testing.assert_close(wq, SimulatedCommunicator(topo).mix(q))


def test_a_bad_operator_fails_at_construction():
    with pytest.raises(ValueError, match=r"choco_dsgd: .*unknown compression 'topk'"):
        dopt.algorithms.make("choco_dsgd", compression="topk(0.1)")
    with pytest.raises(ValueError, match=r"gamma must be in \(0, 1\]"):
        dopt.algorithms.make("choco_edm", gamma=0.0)
    alg = dopt.algorithms.make("choco_dsgd", compression="qsgd(4)")
    assert str(alg.gossip.compression) == "qsgd(4)"


def test_several_rounds_per_mix_are_refused_for_compressed_gossip():
    from decentopt.algorithms.gossips import RoundsChannel as MultiRound

    comm = MultiRound(SimulatedCommunicator(dopt.topology.ring(6)), rounds=2, acceleration="none")
    alg = dopt.algorithms.make("choco_dsgd", compression="top_k(0.5)")
    state = alg.init(torch.zeros(6, 3))
    with pytest.raises(ValueError, match="mix_rounds = 1"):
        alg.step(state, torch.ones(6, 3), comm)


def test_float32_compressed_edm_holds_its_floor_over_long_runs():
    """The public copies add up every message, and ED's correction integrates their
    rounding errors again: kept in float32 they let the average drift away from x*
    (on this problem ||grad f(xbar)||^2 grew 46-fold from 2,000 to 8,000 iterations). They
    are kept in float64, so the float32 run stays at its noise floor."""
    prob = dopt.problems.Quadratic.paper(
        n=8, d=50, p=100, c=1.0, sigma2=0.05, repetitions=4, seed=3, dtype=torch.float32
    )
    alg = dopt.algorithms.make("choco_edm", lr=0.05, beta=0.9, compression="qsgd(4)", gamma=0.6)
    assert alg.init(prob.initial_point()).gossip["x_hat"].dtype == torch.float64
    res = dopt.simulate(alg, prob, dopt.topology.ring(8), 8000, seed=0, record=40)
    grad = res.history["grad_norm"].mean(axis=-1)
    early = grad[np.searchsorted(res.steps, 2000)]
    assert grad[-1] < 2 * early, (early, grad[-1])


def test_default_gamma_is_the_operators_suggestion():
    """CHOCO-SGD's default consensus step follows the operator (a sparsifier's ratio, 1
    for the quantisers and no compression); compressed ED/EDM need it given."""
    from decentopt.compression import suggested_gamma

    for spec, gamma in [("none", 1.0), ("top_k(0.1)", 0.1), ("random_k(0.01)", 0.01)]:
        assert dopt.algorithms.make("choco_dsgd", lr=0.1, compression=spec).gossip.gamma == gamma
        assert suggested_gamma(spec) == gamma
    assert dopt.algorithms.make("choco_dsgd", lr=0.1, compression="qsgd(2)").gossip.gamma == 1.0
    assert dopt.algorithms.make("choco_edm", lr=0.1).gossip.gamma == 1.0  # uncompressed: EDM
    for name in ("choco_ed", "choco_edm"):
        with pytest.raises(ValueError, match="exact diffusion needs gamma given for sign"):
            dopt.algorithms.make(name, lr=0.1, compression="sign")
    assert (
        dopt.algorithms.make("choco_edm", lr=0.1, compression="sign", gamma=0.05).gossip.gamma
        == 0.05
    )
    with pytest.raises(ValueError, match="exact diffusion needs gamma given for top_k"):
        dopt.algorithms.make("nids", lr=0.1, gossip="choco(top_k(0.1))")
    assert dopt.algorithms.make("dsgd", lr=0.1, gossip="choco(top_k(0.1))").gossip.gamma == 0.1


@pytest.mark.slow
def test_suggested_gamma_converges_on_the_32_agent_ring():
    """ring(32), d = 100, exact gradients, 1,000 iterations: CHOCO-SGD with its default
    gamma settles for every operator (to DSGD's floor over W_gamma), while top-k(0.1)
    at gamma = 1 is stopped as diverged."""
    prob = dopt.problems.Quadratic.paper(n=32, d=100, p=200, c=2.0, sigma2=0.0, repetitions=1)
    ring = dopt.topology.ring(32)
    for spec in ("top_k(0.1)", "random_k(0.1)", "top_k(0.01)", "qsgd(2)", "sign"):
        alg = dopt.algorithms.make("choco_dsgd", lr=0.05, compression=spec)
        res = dopt.simulate(alg, prob, ring, 1000, record=100)
        curve = res.history["grad_norm"][:, 0]
        assert not res.diverged.any(), spec
        assert curve[-1] < 0.1 * curve[0], spec
        np.testing.assert_allclose(curve[-1], curve[len(curve) // 2], rtol=1e-2)  # settled
    alg = dopt.algorithms.make("choco_dsgd", lr=0.05, compression="top_k(0.1)", gamma=1.0)
    assert dopt.simulate(alg, prob, ring, 1000, record=100).diverged.all()
