"""Local steps and periodic global averaging (``local(H)``, ``periodic_global(H)``), and the
rules that take local steps of their own (K-GT, LED)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.algorithms.gossips import Local, PeriodicGlobal, parse
from decentopt.comm import SimulatedCommunicator
from decentopt.driver.timeline import TimeModel, clock
from tests.algorithms.test_common import LinearOracle, centralized, run_vectorised

GOSSIPS = ["exact", "push_sum", "choco(top_k(0.5), gamma=0.7)", "multi_round(2)"]


@pytest.fixture(scope="module")
def graph() -> dopt.topology.Topology:
    return dopt.topology.erdos_renyi(7, 0.4, seed=3)


def runs(rule: str, gossips: list[str], W, steps: int = 14, seed: int = 1, **hp):
    n, d = W.n, 3
    oracle = LinearOracle(n, d, steps, seed=seed)
    x0 = np.random.default_rng(seed + 1).standard_normal((n, d))
    out = []
    for gossip in gossips:
        alg = dopt.algorithms.make(rule, gossip=gossip, lr=0.05, **hp)
        out.append(run_vectorised(alg, W, x0, oracle, steps))
    return out


@pytest.mark.parametrize("inner", GOSSIPS)
@pytest.mark.parametrize("rule", ["dsgd", "dmsgd", "ed"])
def test_local_one_is_its_inner_gossip_bit_for_bit(rule, inner, graph):
    if inner in ("push_sum",) and rule == "ed":
        pytest.skip("ED takes no push-sum")
    (plain, c1), (local, c2) = runs(rule, [inner, f"local(1, {inner})"], graph)
    for a, b in zip(plain, local, strict=True):
        assert np.array_equal(a, b)
    assert c1.stats == c2.stats


def test_local_one_runs_the_fused_block_path_as_its_inner():
    prob = dopt.problems.Quadratic.paper(n=8, d=4, p=6, sigma2=0.1, seed=2)
    ring = dopt.topology.ring(8)
    plain = dopt.simulate(dopt.algorithms.make("edm", lr=0.05), prob, ring, 200)
    local = dopt.simulate(dopt.algorithms.make("edm", lr=0.05, gossip="local(1)"), prob, ring, 200)
    assert local.path == plain.path
    assert np.array_equal(local.history["dist_to_opt"], plain.history["dist_to_opt"])


@pytest.mark.parametrize("rule", ["dsgd", "dmsgd"])
def test_periodic_global_one_is_centralized(rule):
    n, d, steps = 6, 4, 20
    oracle = LinearOracle(n, d, steps, seed=4)
    x0 = np.tile(np.random.default_rng(5).standard_normal(d), (n, 1))
    hp = {"lr": 0.05} | ({"beta": 0.8} if rule == "dmsgd" else {})
    alg = dopt.algorithms.make(rule, gossip="periodic_global(1)", **hp)
    got, comm = run_vectorised(alg, dopt.topology.ring(n), x0, oracle, steps)
    want = centralized(rule, hp, x0[0], oracle, steps)
    for t in range(steps):
        np.testing.assert_allclose(got[t], np.tile(want[t], (n, 1)), rtol=1e-12, atol=1e-13)
    assert comm.stats.rounds == steps  # one all-reduce a step


@pytest.mark.parametrize("inner", GOSSIPS)
def test_periodic_global_beyond_the_run_is_its_inner_gossip(inner, graph):
    texts = [inner, f"periodic_global(15, {inner})"]
    (plain, c1), (pga, c2) = runs("dmsgd", texts, graph, beta=0.8)
    for a, b in zip(plain, pga, strict=True):
        assert np.array_equal(a, b)
    assert c1.stats == c2.stats
    ((_, c3),) = runs("dmsgd", [f"periodic_global(7, {inner})"], graph, beta=0.8)
    per_step = c1.stats.rounds // 14  # multi-round gossip: 2 rounds a step
    assert c3.stats.rounds == 12 * per_step + 2  # 14 steps: 12 gossips and 2 all-reduces


@pytest.mark.parametrize("rule", ["dsgd", "dmsgd"])
def test_local_on_the_complete_graph_is_local_sgd(rule):
    """Each agent steps on its own (local momentum never averaged); every H-th step the
    iterates are averaged: a plain per-agent loop."""
    n, d, steps, H, alpha, beta = 5, 3, 23, 4, 0.05, 0.8
    oracle = LinearOracle(n, d, steps, seed=7)
    x0 = np.random.default_rng(8).standard_normal((n, d))
    hp = {"lr": alpha} | ({"beta": beta} if rule == "dmsgd" else {})
    alg = dopt.algorithms.make(rule, gossip=f"local({H})", **hp)
    got, comm = run_vectorised(alg, dopt.topology.complete(n), x0, oracle, steps)
    x, m = [v.copy() for v in x0], [np.zeros(d) for _ in range(n)]
    for t in range(steps):
        for i in range(n):
            g = oracle.agent(t, i, x[i])
            m[i] = beta * m[i] + (1 - beta) * g
            x[i] = x[i] - alpha * (m[i] if rule == "dmsgd" else g)
        if (t + 1) % H == 0:
            x = [sum(x) / n for _ in range(n)]
        np.testing.assert_allclose(got[t], np.stack(x), rtol=1e-12, atol=1e-13)
    assert comm.stats.rounds == steps // H


def test_rounds_and_bytes_count_only_what_is_sent():
    n, d, steps = 6, 5, 12
    ring = dopt.topology.ring(n)
    oracle = LinearOracle(n, d, steps)
    links = int(ring.degrees.sum())
    alg = dopt.algorithms.make("dsgd", gossip="local(4)", lr=0.05)
    _, comm = run_vectorised(alg, ring, np.zeros((n, d)), oracle, steps)
    assert comm.stats.rounds == 3
    assert comm.stats.bytes_sent == 3 * links * d * 8
    alg = dopt.algorithms.make("dsgd", gossip="periodic_global(3)", lr=0.05)
    _, comm = run_vectorised(alg, ring, np.zeros((n, d)), oracle, steps)
    part = math.ceil(d * 8 / n)  # a ring all-reduce: 2 (n - 1) messages of P / n per agent
    assert comm.stats.rounds == 12
    assert comm.stats.bytes_sent == 8 * links * d * 8 + 4 * n * 2 * (n - 1) * part
    assert comm.stats.busiest_messages == 8 * 2 + 4 * 2 * (n - 1)


class Counting(SimulatedCommunicator):
    """Counts every call that would cross agents."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def mix(self, z, out=None):
        self.calls.append("mix")
        return super().mix(z, out)

    def mix_map(self, fn, tensors, scalars=()):
        self.calls.append("mix_map")
        return super().mix_map(fn, tensors, scalars)

    def mean(self, z):
        self.calls.append("mean")
        return super().mean(z)


@pytest.mark.parametrize("text", ["local(3)", "local(3, push_sum)", "periodic_global(3)"])
def test_a_local_step_calls_nothing_on_the_network(text):
    n, d = 6, 2
    comm = Counting(dopt.topology.ring(n))
    alg = dopt.algorithms.make("dmsgd", gossip=text, lr=0.05, beta=0.5)
    state = alg.init(torch.zeros(n, d, dtype=torch.float64))
    for t in range(6):
        comm.calls.clear()
        state = alg.step(state, torch.randn(n, d, dtype=torch.float64), comm)
        kind = alg.talks(t)
        if kind == "none":
            assert comm.calls == []
        elif kind == "all":
            assert comm.calls == ["mean"]  # one all-reduce
        else:
            assert comm.calls and "mean" not in comm.calls
    assert [alg.talks(t) for t in range(3)][-1] != "none"


def test_refusals_name_what_works():
    for text in ("local(4)", "periodic_global(4)"):
        for rule in ("ed", "edm", "nids", "extra", "mt", "decentlam"):
            with pytest.raises(ValueError, match=r"k_gt \(K-GT\) or led"):
                dopt.algorithms.make(rule, gossip=text)
    dopt.algorithms.make("ed", gossip="local(1)")  # W every step: ED itself
    with pytest.raises(ValueError, match="its own local steps"):
        dopt.algorithms.make("k_gt", gossip="local(2)")
    with pytest.raises(ValueError, match="its own message per neighbour"):
        dopt.algorithms.make("relaysgd", gossip="local(2)")
    with pytest.raises(ValueError, match="cannot be the inner gossip"):
        dopt.algorithms.make("dsgd", gossip="local(2, delayed(1))")
    with pytest.raises(ValueError, match="every"):
        dopt.algorithms.make("dsgd", gossip="local(0)")


def test_text_round_trip():
    for text in ("local(4)", "local(2, push_sum)", "periodic_global(8, multi_round(2))"):
        gossip = parse(text)
        assert isinstance(gossip, Local | PeriodicGlobal)
        assert parse(gossip.label()) == gossip
    assert dopt.algorithms.make("dsgd", gossip="local(4)").name == "dsgd+local"


def test_dsgt_under_local_steps_reaches_the_optimum():
    """Gradient tracking over W_t in {I, W} (the construction of this library): its tracker
    keeps the mean gradient, and with exact gradients it reaches x*; ED diverges there."""
    prob = dopt.problems.Quadratic.paper(n=8, d=5, p=10, c=[1.0], sigma2=0.0, seed=1)
    ring = dopt.topology.ring(8)
    for gossip in ("local(4)", "periodic_global(4)"):
        alg = dopt.algorithms.make("dsgt", lr=0.05, atc=False, gossip=gossip)
        res = dopt.simulate(alg, prob, ring, 4000)
        assert np.all(res.final("dist_to_opt") < 1e-20)


def test_k_gt_and_led_are_exact_where_local_dsgd_is_biased():
    prob = dopt.problems.Quadratic.paper(n=8, d=5, p=10, c=[1.0, 0.25], sigma2=0.0, seed=1)
    ring = dopt.topology.ring(8)
    finals = {}
    for name, hp in {
        "k_gt": {"lr": 0.02, "local_steps": 4},
        "led": {"lr": 0.05, "local_steps": 4},
        "dsgd": {"lr": 0.05, "gossip": "local(4)"},
    }.items():
        res = dopt.simulate(dopt.algorithms.make(name, **hp), prob, ring, 6000)
        assert res.comm.rounds == 1500
        finals[name] = res.final("dist_to_opt")
    assert np.all(finals["k_gt"] < 1e-20) and np.all(finals["led"] < 1e-20)
    assert np.all(finals["dsgd"] > 1e-2)


def test_k_gt_with_one_step_is_gradient_tracking(graph):
    ((kgt, _),) = runs("k_gt", ["exact"], graph, local_steps=1)
    ((gt, _),) = runs("dsgt", ["exact"], graph, atc=False)
    for a, b in zip(kgt, gt, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_led_with_one_step_is_exact_diffusion(graph):
    ((led, _),) = runs("led", ["exact"], graph, local_steps=1, dual=1.0)
    ((ed, _),) = runs("ed", ["exact"], graph)
    for a, b in zip(led, ed, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_the_time_model_charges_only_what_is_sent():
    ring, steps, payload = dopt.topology.ring(8), 12, 800.0
    model = TimeModel(compute=1e-2, latency=1e-3, bandwidth=1e6)
    one = model.message_seconds(payload)
    every = clock(model, ring, steps, payload)
    np.testing.assert_allclose(np.diff(every), 1e-2 + 2 * one)  # two messages a round
    local = clock(model, ring, steps, payload, talks=Local(4).talks)
    want = np.cumsum([0.0] + [1e-2 + 2 * one * ((t + 1) % 4 == 0) for t in range(steps)])
    np.testing.assert_allclose(local, want)
    pga = clock(model, ring, steps, payload, talks=PeriodicGlobal(4).talks)
    reduce = 2 * 7 * model.message_seconds(payload / 8)
    sent = [reduce if (t + 1) % 4 == 0 else 2 * one for t in range(steps)]
    want = np.cumsum([0.0] + [1e-2 + s for s in sent])
    np.testing.assert_allclose(pga, want)


def test_sim_time_of_a_run_counts_local_steps(graph):
    prob = dopt.problems.Quadratic.paper(n=8, d=4, p=6, sigma2=0.1, seed=2)
    ring = dopt.topology.ring(8)
    timing = TimeModel(compute=1e-3, latency=1e-3, bandwidth=1e6)
    times = {}
    for gossip in ("exact", "local(4)", "periodic_global(4)"):
        alg = dopt.algorithms.make("dsgd", lr=0.05, gossip=gossip)
        res = dopt.simulate(alg, prob, ring, 100, record="all", timing=timing)
        times[gossip] = res.clock[-1]
    payload = 4 * 8  # one agent's row, float64
    one = timing.message_seconds(payload)
    np.testing.assert_allclose(times["exact"], 100 * (1e-3 + 2 * one))
    np.testing.assert_allclose(times["local(4)"], 100 * 1e-3 + 25 * 2 * one)
    reduce = 2 * 7 * timing.message_seconds(payload / 8)
    np.testing.assert_allclose(times["periodic_global(4)"], 100e-3 + 75 * 2 * one + 25 * reduce)


@pytest.mark.parametrize("H", [2, 3])
def test_local_choco_is_a_choco_round_every_h_th_step(H, graph):
    """``local(H, choco(top_k, gamma))`` under DSGD against a per-agent loop written here: each
    agent steps on its own; on every H-th step one CHOCO round (Koloskova, Stich & Jaggi 2019)
    mixes the half-steps -- q_i = top_k(z_i - hat_i), hat_i += q_i, s_i += sum_j w_ij q_j,
    x_i = z_i + gamma (s_i - hat_i) -- and between rounds the public copies stay as they are."""
    n, d, steps, alpha, gamma, keep = graph.n, 4, 17, 0.05, 0.6, 2  # top_k(0.5): 2 of 4
    oracle = LinearOracle(n, d, steps, seed=11)
    x0 = np.random.default_rng(12).standard_normal((n, d))
    inner = f"choco(top_k({keep / d}), gamma={gamma})"
    alg = dopt.algorithms.make("dsgd", lr=alpha, gossip=f"local({H}, {inner})")
    got, comm = run_vectorised(alg, graph, x0, oracle, steps)
    W = graph.W.numpy()

    def top_k(v: np.ndarray) -> np.ndarray:
        kept = np.argsort(-np.abs(v), kind="stable")[:keep]  # ties: the lowest index first
        out = np.zeros_like(v)
        out[kept] = v[kept]
        return out

    x = [row.copy() for row in x0]
    hat = [np.zeros(d) for _ in range(n)]
    s = [np.zeros(d) for _ in range(n)]
    for t in range(steps):
        z = [x[i] - alpha * oracle.agent(t, i, x[i]) for i in range(n)]
        if (t + 1) % H == 0:
            q = [top_k(z[i] - hat[i]) for i in range(n)]
            hat = [hat[i] + q[i] for i in range(n)]
            s = [s[i] + sum(W[i, j] * q[j] for j in range(n)) for i in range(n)]
            z = [z[i] + gamma * (s[i] - hat[i]) for i in range(n)]
        x = z
        np.testing.assert_allclose(got[t], np.stack(x), rtol=1e-12, atol=1e-12)
    assert comm.stats.rounds == steps // H
