"""Outer optimizers over a method (SlowMo, DiLoCo): ``make(..., outer="nesterov(...)")``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.algorithms import Nesterov
from decentopt.comm import SimulatedCommunicator
from decentopt.driver.timeline import TimeModel, clock
from tests.algorithms.test_common import LinearOracle, run_vectorised
from tests.algorithms.test_local import Counting


@pytest.fixture(scope="module")
def graph() -> dopt.topology.Topology:
    return dopt.topology.erdos_renyi(7, 0.4, seed=3)


@pytest.mark.parametrize("H", [1, 3, 5])
@pytest.mark.parametrize("rule", ["dsgd", "dmsgd"])
def test_outer_sgd_with_lr_one_is_the_method_averaged_every_H_steps(rule, H, graph):
    """lr = 1, beta = 0: x_sync <- mean(x), every agent restarts there; for DSGD and DmSGD
    that is Gossip-PGA (mean(W z) = mean(z)), and an explicit loop that averages."""
    n, d, steps = graph.n, 3, 17
    oracle = LinearOracle(n, d, steps, seed=2)
    x0 = np.random.default_rng(5).standard_normal((n, d))
    hp = {"lr": 0.05} | ({"beta": 0.6} if rule == "dmsgd" else {})
    outer = dopt.algorithms.make(rule, outer=f"nesterov(lr=1, beta=0, every={H})", **hp)
    pga = dopt.algorithms.make(rule, gossip=f"periodic_global({H})", **hp)
    got, _ = run_vectorised(outer, graph, x0, oracle, steps)
    want, _ = run_vectorised(pga, graph, x0, oracle, steps)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
    W, x, m = graph.W.numpy(), x0.copy(), np.zeros_like(x0)
    for t in range(steps):  # the inner method itself, then the average every H steps
        g = np.stack([oracle.agent(t, i, x[i]) for i in range(n)])
        m = 0.6 * m + 0.4 * g if rule == "dmsgd" else g
        x = W @ (x - 0.05 * m)
        if (t + 1) % H == 0:
            x = np.repeat(x.mean(axis=0, keepdims=True), n, axis=0)
        np.testing.assert_allclose(got[t], x, rtol=1e-12, atol=1e-13)
    if H > 1:  # the agents part between averages (17 steps: the last is not an average)
        assert not np.allclose(got[-1][0], got[-1][1])


def test_nesterov_equals_a_per_agent_loop_on_the_quadratic(graph):
    """beta > 0: DSGD on the quadratic under outer Nesterov, against plain loops over agents
    and coordinates (f_i(x) = ||A_i (x - x_i*)||² / (2p), exact gradients)."""
    n, p, d, steps, H = graph.n, 6, 3, 40, 4
    lr, eta, beta = 0.05, 0.7, 0.9
    rng = np.random.default_rng(0)
    A, xs = rng.standard_normal((n, p, d)), rng.standard_normal((n, d))
    prob = dopt.problems.Quadratic(A=torch.from_numpy(A), x_local=torch.from_numpy(xs), sigma2=0.0)
    alg = dopt.algorithms.make("dsgd", lr=lr, outer=f"nesterov({eta}, {beta}, every={H})")
    comm = SimulatedCommunicator(graph)
    state = alg.init(prob.initial_point())
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        state = alg.step(state, prob.gradient(state.x, gen), comm)
    W = graph.W.numpy()
    x = [[0.0] * d for _ in range(n)]
    sync, mom = [0.0] * d, [0.0] * d
    for t in range(steps):
        z = []
        for i in range(n):
            r = [sum(A[i, k, j] * (x[i][j] - xs[i, j]) for j in range(d)) for k in range(p)]
            g = [sum(A[i, k, j] * r[k] for k in range(p)) / p for j in range(d)]
            z.append([x[i][j] - lr * g[j] for j in range(d)])
        x = [[sum(W[i, k] * z[k][j] for k in range(n)) for j in range(d)] for i in range(n)]
        if (t + 1) % H == 0:
            for j in range(d):
                delta = sync[j] - sum(x[i][j] for i in range(n)) / n
                mom[j] = beta * mom[j] + delta
                sync[j] = sync[j] - eta * (beta * mom[j] + delta)
            x = [list(sync) for _ in range(n)]
    got = state.x[:, 0].numpy()
    np.testing.assert_allclose(got, np.array(x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state.outer["outer_x"][:, 0].numpy(), np.tile(sync, (n, 1)))
    np.testing.assert_allclose(state.outer["outer_m"][:, 0].numpy(), np.tile(mom, (n, 1)))
    plain = dopt.algorithms.make("dsgd", lr=lr, outer=f"nesterov({eta}, 0, every={H})")
    other = plain.init(prob.initial_point())
    for _ in range(steps):
        other = plain.step(other, prob.gradient(other.x, gen), comm)
    assert not torch.allclose(other.x, state.x)  # the momentum made a difference


def test_exact_diffusion_under_outer_steps_keeps_its_correction():
    """ED's psi moves with x on a restart: with exact gradients it still reaches x* under
    heterogeneity, where DSGD under the same outer optimizer keeps a bias."""
    prob = dopt.problems.Quadratic.paper(n=8, d=4, p=8, c=0.3, sigma2=0.0, seed=1)
    ring = dopt.topology.ring(8)
    outer = "nesterov(lr=0.8, beta=0.5, every=5)"
    ends = {}
    for rule in ("ed", "dsgd"):
        alg = dopt.algorithms.make(rule, lr=0.05, outer=outer)
        res = dopt.simulate(alg, prob, ring, 3000)
        ends[rule] = float(res.history["dist_to_opt"][-1].max())
    assert ends["ed"] < 1e-20 < 1e-3 < ends["dsgd"]


def test_rounds_and_bytes_count_the_all_reduce():
    """An outer step adds one ring all-reduce (2 (n - 1) messages of P / n per agent) to
    what the method sends; under local(N) beyond the run (DiLoCo) only the all-reduces."""
    n, d, steps = 6, 5, 12
    ring = dopt.topology.ring(n)
    oracle = LinearOracle(n, d, steps)
    links = int(ring.degrees.sum())
    part = math.ceil(d * 8 / n)
    alg = dopt.algorithms.make("dsgd", outer="nesterov(every=3)", lr=0.05)
    _, comm = run_vectorised(alg, ring, np.zeros((n, d)), oracle, steps)
    assert comm.stats.rounds == 12 + 4
    assert comm.stats.bytes_sent == 12 * links * d * 8 + 4 * n * 2 * (n - 1) * part
    assert comm.stats.busiest_messages == 12 * 2 + 4 * 2 * (n - 1)
    diloco = dopt.algorithms.make("dsgd", gossip="local(100)", outer="nesterov(every=3)", lr=0.05)
    _, comm = run_vectorised(diloco, ring, np.zeros((n, d)), oracle, steps)
    assert comm.stats.rounds == 4
    assert comm.stats.bytes_sent == 4 * n * 2 * (n - 1) * part


@pytest.mark.parametrize("gossip", ["exact", "local(100)", "local(2)"])
def test_a_local_step_calls_nothing_and_an_outer_step_one_mean(gossip):
    n, d = 6, 2
    comm = Counting(dopt.topology.ring(n))
    alg = dopt.algorithms.make(
        "dmsgd", gossip=gossip, outer="nesterov(lr=0.7, beta=0.9, every=3)", lr=0.05, beta=0.5
    )
    kinds = []
    state = alg.init(torch.zeros(n, d, dtype=torch.float64))
    for t in range(9):
        comm.calls.clear()
        state = alg.step(state, torch.randn(n, d, dtype=torch.float64), comm)
        kind = alg.talks(t)
        kinds.append(kind)
        if kind == "none":
            assert comm.calls == [], t
        elif kind == "all":
            assert comm.calls == ["mean"], t  # one all-reduce and nothing else
        elif kind == "gossip+all":
            assert comm.calls[-1] == "mean" and comm.calls.count("mean") == 1, t
            assert len(comm.calls) > 1, t
        else:
            assert comm.calls and "mean" not in comm.calls, t
    assert [k.endswith("all") for k in kinds] == [(t + 1) % 3 == 0 for t in range(9)]


def test_the_time_model_charges_the_all_reduce_after_the_gossip():
    ring = dopt.topology.ring(4)
    model = TimeModel(compute=1.0, latency=0.5, bandwidth=1e9, noise=0.0)
    alg = dopt.algorithms.make("dsgd", outer="nesterov(every=2)")
    plain = clock(model, ring, 4, 0.0)
    both = clock(model, ring, 4, 0.0, talks=alg.talks)
    reduce = 2 * (4 - 1) * 0.5
    np.testing.assert_allclose(np.diff(both) - np.diff(plain), [0, reduce, 0, reduce])


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("nesterov(lr=0.7)", "give every=H"),
        ("nesterov(every=0)", "every must be >= 1"),
        ("nestrov(every=3)", "did you mean 'nesterov'"),
        ("nesterov(lr=0, every=3)", "lr must be > 0"),
        ("nesterov(beta=1, every=3)", r"beta must be in \[0, 1\)"),
        ("nesterov(every=2.5)", "every must be a whole number"),
        ("nesterov(mu=0.9, every=2)", "unknown nesterov argument 'mu'"),
        ("nesterov(1, 0.9, 4)", "name the argument '4'"),
        ("nesterov(every=2", r"write NAME or NAME\(ARGS\)"),
        (7, "must be text such as"),
    ],
)
def test_bad_texts_are_refused_in_one_line(text, said):
    with pytest.raises((TypeError, ValueError), match=said) as caught:
        dopt.algorithms.make("dsgd", outer=text)
    assert "\n" not in str(caught.value) and str(caught.value).startswith("dsgd: ")


def test_methods_that_cannot_restart_are_refused():
    for rule, why in (("relaysgd", "relays"), ("ad_psgd", "own pace")):
        with pytest.raises(ValueError, match=f"{rule} cannot take the outer optimizer.*{why}"):
            dopt.algorithms.make(rule, outer="nesterov(every=2)")


def test_text_state_and_names():
    choco = "choco(top_k(0.5), gamma=0.1)"
    alg = dopt.algorithms.make("edm", gossip=choco, outer="nesterov(0.5, every=4)")
    assert alg.outer == Nesterov(0.5, 0.9, every=4) and alg.name == "edm+choco+nesterov"
    assert dopt.algorithms.make("dsgd", outer=alg.outer.label()).outer == alg.outer
    assert alg.fused is None and dopt.algorithms.make("dsgd", outer=None).outer is None
    state = alg.init(torch.ones(3, 2))
    names = list(state.tensors())
    assert names[0] == "x" and names[-2:] == ["outer_x", "outer_m"]
    again = state.replace(outer_m=torch.full((3, 2), 2.0), t=5)
    assert again.t == 5 and float(again.outer["outer_m"][0, 0]) == 2.0
    assert torch.equal(state.outer["outer_m"], torch.zeros(3, 2))  # a new state, not changed
    assert "outer" in dopt.algorithms.hyperparameters("dsgd")
    assert "outer" in dopt.algorithms.hyperparameters("sgp")
