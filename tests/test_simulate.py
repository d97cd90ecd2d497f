from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.simulate import TAIL_POINTS, record_steps


def test_public_api_contract():
    """The calls written in DESIGN.md work exactly as written there."""
    topo = dopt.topology.ring(32)
    assert isinstance(topo.W, torch.Tensor) and topo.lam > 0.99 and topo.spectral_gap > 0
    assert topo.lam_min >= -1e-12
    topo2 = dopt.topology.from_matrix(topo.W)
    assert topo2.n == 32
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    for name in "dsgd dmsgd decentlam qg_dsgdm dsgt dsgt_hb ed edm".split():
        dopt.algorithms.make(name, lr=0.05)
    prob = dopt.problems.Quadratic.paper(
        n=32, d=10, p=20, c=1.0, sigma2=0.05, repetitions=20, seed=0
    )
    A, x_local = torch.randn(32, 20, 10), torch.randn(32, 10)
    one = dopt.problems.Quadratic(A=A, x_local=x_local, sigma2=0.0)
    assert one.repetitions == 1
    res = dopt.simulate(alg, prob, topo, iterations=200, seed=0)
    hist = res.history["dist_to_opt"]
    assert hist.shape == (len(res.steps), 20)
    assert res.steps[0] == 0 and res.steps[-1] == 200
    assert hist[-1].mean() < hist[0].mean()
    np.testing.assert_allclose(hist[0], prob.x_star.pow(2).sum(-1).numpy())  # x0 = 0


def test_record_grids():
    assert list(record_steps(5, "all")) == [0, 1, 2, 3, 4, 5]
    assert list(record_steps(10, 4)) == [0, 4, 8, 10]
    log = record_steps(10000, "log", 50)
    assert log[0] == 0 and log[-1] == 10000 and len(log) <= 51 + TAIL_POINTS
    assert np.all(np.diff(log) > 0)
    # steady-state statistics rest on a dense final window, not one or two log points
    assert (log >= 9000).sum() >= TAIL_POINTS
    with pytest.raises(ValueError, match="record"):
        record_steps(10, "sometimes")  # type: ignore[arg-type]


def test_same_seed_same_run_and_seeds_differ():
    prob = dopt.problems.Quadratic.paper(n=8, d=3, p=5, repetitions=2, seed=0)
    alg = dopt.algorithms.make("dsgd", lr=0.05)
    topo = dopt.topology.ring(8)
    a = dopt.simulate(alg, prob, topo, 50, seed=1)
    b = dopt.simulate(alg, prob, topo, 50, seed=1)
    c = dopt.simulate(alg, prob, topo, 50, seed=2)
    np.testing.assert_array_equal(a.history["dist_to_opt"], b.history["dist_to_opt"])
    assert not np.allclose(a.history["dist_to_opt"][-1], c.history["dist_to_opt"][-1])


def test_diverging_repetition_is_stopped_and_reported():
    # repetition 1 has 30x the curvature, so lr = 0.3 diverges there and not in repetition 0
    A = torch.randn(8, 2, 12, 3, generator=torch.Generator().manual_seed(0))
    A[:, 1] *= 30**0.5
    prob = dopt.problems.Quadratic(A=A, x_local=torch.randn(8, 2, 3), sigma2=0.0)
    res = dopt.simulate(dopt.algorithms.make("ed", lr=0.3), prob, dopt.topology.ring(8), 2000)
    assert res.diverged.tolist() == [False, True]
    assert 0 < res.diverged_at[1] < 2000 and res.diverged_at[0] == -1
    after = res.steps > res.diverged_at[1]
    assert np.all(np.isnan(res.history["dist_to_opt"][after, 1]))
    assert np.all(np.isfinite(res.history["dist_to_opt"][:, 0]))
    assert res.final("dist_to_opt")[0] < 1e-8
    assert torch.isfinite(res.final_state.x).all()


def test_all_diverged_stops_early():
    prob = dopt.problems.Quadratic.paper(n=4, d=3, p=5, sigma2=0.0, repetitions=2, seed=0)
    res = dopt.simulate(dopt.algorithms.make("dsgd", lr=5.0), prob, dopt.topology.ring(4), 10**5)
    assert res.diverged.all()
    assert res.wall_time < 5
    assert np.isnan(res.final("dist_to_opt")).all()


def test_bad_input_messages():
    prob = dopt.problems.Quadratic.paper(n=8, d=3, p=5, repetitions=2, seed=0)
    alg = dopt.algorithms.make("edm", lr=0.05)
    with pytest.raises(ValueError, match="n = 6 agents but the problem has n = 8"):
        dopt.simulate(alg, prob, dopt.topology.ring(6), 10)
    with pytest.raises(ValueError, match="x0 must have shape"):
        dopt.simulate(alg, prob, dopt.topology.ring(8), 10, x0=torch.zeros(5))
    with pytest.raises(ValueError, match="NaN or inf"):
        dopt.simulate(alg, prob, dopt.topology.ring(8), 10, x0=torch.full((3,), float("nan")))
    with pytest.raises(ValueError, match="iterations"):
        dopt.simulate(alg, prob, dopt.topology.ring(8), -1)


def test_x0_broadcasts():
    prob = dopt.problems.Quadratic.paper(n=4, d=3, p=5, repetitions=2, seed=0)
    alg = dopt.algorithms.make("dsgd", lr=0.05)
    res = dopt.simulate(alg, prob, dopt.topology.ring(4), 0, x0=torch.ones(3))
    assert res.final_state.x.shape == (4, 2, 3) and bool((res.final_state.x == 1).all())
