"""Delayed gossip: one's own value now, the neighbours' from ``tau`` rounds ago (OSGP's
overlap). Identities: ``tau = 0`` is the undelayed method bit for bit; a per-agent loop of the
definition; the mass in flight makes the average follow the centralized method exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.algorithms import make
from decentopt.algorithms.gossips import Delayed, PushSum, parse
from tests.algorithms.test_common import LinearOracle, run_vectorised
from tests.algorithms.test_composition import pairs, rule_hp, trajectory


@pytest.fixture(scope="module")
def random_W() -> np.ndarray:
    return dopt.topology.erdos_renyi(7, 0.4, seed=3).W.numpy()


def test_delayed_gossip_is_offered_to_the_rules_that_send_values():
    takers = {name for name, _ in pairs("delayed")}
    assert takers >= {"dsgd", "dmsgd", "qg_dsgdm"}
    assert not takers & {"dsgt", "dsgt_hb", "mt", "relaysgd"}  # trackers, relaying
    # bias correction on stale values diverges: refused, in one line
    assert not takers & {"ed", "edm", "nids", "extra", "decentlam"}
    with pytest.raises(ValueError, match=r"edm cannot take delayed gossip: .*unstable"):
        make("edm", gossip="delayed(1)")
    assert make("edm", gossip="delayed(0)").name == "edm+delayed"  # no delay: the rule


@pytest.mark.parametrize(("name", "switch"), pairs("delayed"))
def test_no_delay_is_the_undelayed_method_bit_for_bit(name, switch, random_W):
    hp = rule_hp(name, **switch)
    got, comm = trajectory(make(name, gossip="delayed(0)", **hp), random_W)
    want, plain = trajectory(make(name, **hp), random_W)
    np.testing.assert_array_equal(got[-1], want[-1])
    assert comm.stats.rounds == plain.stats.rounds


@pytest.mark.parametrize(("name", "switch"), pairs("push_sum"))
def test_no_delay_around_push_sum_is_push_sum_bit_for_bit(name, switch):
    if "sum" in (make(name, **rule_hp(name, **switch)).sends or ()):
        pytest.skip("a sum-tracker is not delayed")
    graph = dopt.topology.random_directed(7, 0.3, seed=4)
    hp = rule_hp(name, **switch)
    got, _ = trajectory(make(name, gossip="delayed(0, push_sum)", **hp), graph)
    want, _ = trajectory(make(name, gossip="push_sum", **hp), graph)
    np.testing.assert_array_equal(got[-1], want[-1])


@pytest.mark.parametrize("tau", [1, 3])
def test_delayed_dsgd_against_a_per_agent_loop(tau, random_W):
    """x_i(t+1) = w_ii z_i(t) + sum_j w_ij z_j(t - tau), z = x - alpha g, z(s < 0) = x(0)."""
    W, n, d, steps, alpha = random_W, random_W.shape[0], 3, 9, 0.05
    oracle = LinearOracle(n, d, steps, seed=2)
    x0 = np.random.default_rng(5).standard_normal((n, d))
    got, comm = run_vectorised(
        make("dsgd", lr=alpha, gossip=f"delayed({tau})"), W, x0, oracle, steps
    )
    assert comm.stats.rounds == steps
    x, sent = x0.copy(), []
    for t in range(steps):
        z = np.stack([x[i] - alpha * oracle.agent(t, i, x[i]) for i in range(n)])
        sent.append(z)
        late = sent[t - tau] if t >= tau else x0
        x = np.stack(
            [W[i, i] * z[i] + sum(W[i, j] * late[j] for j in range(n) if j != i) for i in range(n)]
        )
        np.testing.assert_allclose(got[t], x, rtol=1e-12, atol=1e-13)


def test_delayed_gossip_over_a_time_varying_graph_uses_each_rounds_weights():
    """Over W_t the late values are combined with the current round's weights and self-weight."""
    graph = dopt.topology.random_matchings(6, seed=2)
    n, d, steps, alpha, tau = graph.n, 2, 8, 0.05, 2
    oracle = LinearOracle(n, d, steps, seed=3)
    x0 = np.random.default_rng(4).standard_normal((n, d))
    alg = make("dsgd", lr=alpha, gossip=f"delayed({tau})")
    comm = dopt.comm.SimulatedCommunicator(graph)
    state, x, sent = alg.init(torch.from_numpy(x0)), x0.copy(), []
    for t in range(steps):
        state = alg.step(state, oracle.stacked(t, state.x), comm)
        W = graph.at(t).matrix()
        z = np.stack([x[i] - alpha * oracle.agent(t, i, x[i]) for i in range(n)])
        sent.append(z)
        late = sent[t - tau] if t >= tau else x0
        x = W @ late + np.diag(W)[:, None] * (z - late)
        np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-12, atol=1e-13)
    assert not np.allclose(graph.at(0).matrix(), graph.at(1).matrix())  # W_t did change


def in_flight(state, W: np.ndarray, tau: int, slot: int = 0, field: str = "x") -> np.ndarray:
    """``1^T X + sum over the tau messages in flight of c^T Z``, ``c_j = 1 - w_jj``."""
    c = torch.from_numpy(1 - np.diag(W)).view(-1, *[1] * (getattr(state, field).ndim - 1))
    late = sum((c * getattr(state, f"z{slot}_lag{lag}")).sum(0) for lag in range(1, tau + 1))
    return (getattr(state, field).sum(0) + late).numpy()


@pytest.mark.parametrize("name", ["dsgd", "dmsgd"])
@pytest.mark.parametrize("tau", [1, 2])
def test_the_mass_in_flight_follows_the_centralized_method(name, tau, random_W):
    """With the messages still travelling counted, the network's average is centralized SGD
    (momentum SGD for DmSGD) on the mean gradient, exactly, under any symmetric W (non-uniform
    self-weights included); the plain average is not."""
    W, n, d, steps = random_W, random_W.shape[0], 3, 10
    oracle = LinearOracle(n, d, steps, seed=6)
    hp = rule_hp(name)
    alg = make(name, gossip=f"delayed({tau})", **hp)
    comm = dopt.comm.SimulatedCommunicator(dopt.topology.from_matrix(W))
    state = alg.init(torch.from_numpy(np.random.default_rng(7).standard_normal((n, d))))
    mass = in_flight(state, W, tau)
    m, beta = np.zeros(d), hp.get("beta", 0.0)
    for t in range(steps):
        grads = oracle.stacked(t, state.x)
        m = beta * m + (1 - beta) * grads.numpy().sum(0)
        mass = mass - hp["lr"] * (m if beta else grads.numpy().sum(0))
        state = alg.step(state, grads, comm)
        np.testing.assert_allclose(in_flight(state, W, tau), mass, rtol=1e-10, atol=1e-11)
    plain = state.x.sum(0).numpy()
    assert np.abs(plain - mass).max() > 1e-6  # the plain average lags by the mass in flight


def test_delayed_push_sum_keeps_its_weights_in_flight():
    """Around push-sum the weights travel late with the numerators: over a column-stochastic
    graph ``sum w`` plus the weights in flight stays what it was at the start."""
    graph = dopt.topology.random_directed(7, 0.3, seed=4)
    P = graph.W.numpy()
    n, d, steps, tau = graph.n, 3, 12, 2
    oracle = LinearOracle(n, d, steps, seed=6)
    alg = make("dmsgd", gossip=f"delayed({tau}, push_sum)", lr=0.05, beta=0.8)
    comm = dopt.comm.SimulatedCommunicator(graph)
    state = alg.init(torch.from_numpy(np.random.default_rng(7).standard_normal((n, d))))
    start = in_flight(state, P, tau, slot=1, field="w")
    np.testing.assert_allclose(start, n + tau * (n - np.trace(P)), rtol=1e-12)
    for t in range(steps):
        state = alg.step(state, oracle.stacked(t, state.x), comm)
        np.testing.assert_allclose(in_flight(state, P, tau, slot=1, field="w"), start, rtol=1e-12)
    assert not np.allclose(state.w.numpy(), 1.0)  # the weights did move


def test_delayed_push_sum_on_a_symmetric_graph_is_delayed_exact_mixing(random_W):
    hp = rule_hp("dmsgd")
    got, _ = trajectory(make("dmsgd", gossip="delayed(2, push_sum)", **hp), random_W)
    want, _ = trajectory(make("dmsgd", gossip="delayed(2)", **hp), random_W)
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-12, atol=1e-13)


def test_delayed_dsgd_and_dmsgd_converge_where_the_undelayed_do():
    prob = dopt.problems.Quadratic.paper(n=8, d=10, p=20, c=0.5, sigma2=0.0, repetitions=1, seed=1)
    ring = dopt.topology.ring(8)
    for name in ("dsgd", "dmsgd"):
        base = dopt.simulate(make(name, lr=0.02), prob, ring, 1500, seed=0)
        late = dopt.simulate(make(name, lr=0.02, gossip="delayed(2)"), prob, ring, 1500, seed=0)
        np.testing.assert_allclose(late.final("dist_to_opt"), base.final("dist_to_opt"), rtol=1e-3)


def test_delayed_text_parses_and_prints_back():
    assert parse("delayed(2)") == Delayed(2)
    assert parse("delayed(1, push_sum)") == Delayed(1, PushSum())
    assert parse("delayed(tau=3, inner='push_sum')").label() == "delayed(3, push_sum)"
    assert parse(Delayed(2, "push_sum").label()) == Delayed(2, "push_sum")
    assert parse("choco(sign, 0.5)").gamma == 0.5  # positional arguments after the first
    assert make("dmsgd", gossip="delayed(1, push_sum)").name == "dmsgd+delayed"
    bounded = parse("delayed(1, staleness=3)")
    assert bounded == Delayed(1, "exact", 3) and bounded.label() == "delayed(1, staleness=3)"
    assert parse(bounded.label()) == bounded


def test_a_staleness_bound_simulates_as_the_delay_and_needs_a_static_graph(random_W):
    """All agents in one process keep pace: the messages used are exactly tau rounds old."""
    hp = rule_hp("dmsgd")
    got, _ = trajectory(make("dmsgd", gossip="delayed(2, staleness=5)", **hp), random_W)
    want, _ = trajectory(make("dmsgd", gossip="delayed(2)", **hp), random_W)
    np.testing.assert_array_equal(got[-1], want[-1])
    assert "static" in make("dsgd", gossip="delayed(1, staleness=2)").needs
    assert "static" not in make("dsgd", gossip="delayed(1)").needs


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: make("dsgd", gossip="delayed(-1)"), r"tau must be >= 0; got -1"),
        (lambda: make("dsgd", gossip="delayed(1.5)"), r"tau must be a whole number; got float 1.5"),
        (lambda: make("dsgd", gossip="delayed(true)"), r"tau must be a whole number"),
        (lambda: make("dsgd", gossip="delayed(1, choco(sign))"), r"choco gossip cannot be delayed"),
        (lambda: make("dsgd", gossip="delayed(1, pushsum)"), r"did you mean 'push_sum'"),
        (lambda: make("dsgt", atc=False, gossip="delayed(1)"), r"dsgt cannot take delayed.*sum-tr"),
        (lambda: make("mt", gossip="delayed(1)"), r"mt cannot take delayed.*sum-tracker"),
        (lambda: make("edm", gossip="delayed(1, push_sum)"), r"edm cannot take delayed.*symmetric"),
        (lambda: make("relaysgd", gossip="delayed(1)"), r"relaysgd cannot take delayed"),
        (lambda: make("dsgd", gossip="delayed(2, staleness=1)"), r"bound \(1\) is below .*>= 2"),
        (lambda: make("dsgd", gossip="delayed(1, staleness=-1)"), r"staleness bound must be"),
        (lambda: make("dsgd", gossip="delayed(0, staleness=2)"), r"needs a delay tau >= 1"),
        (lambda: make("ed", gossip="delayed(1, staleness=2)"), r"ed cannot take delayed.*stale"),
        (lambda: make("edm", gossip="delayed(1, staleness=2)"), r"edm cannot take delayed"),
        (lambda: make("dsgt", atc=False, gossip="delayed(1, staleness=2)"), r"sum-tracker"),
        (
            lambda: make("dmsgd", gossip="delayed(1, push_sum, staleness=2)"),
            r"dmsgd cannot take delayed.*weights must arrive exactly once",
        ),
    ],
)
def test_bad_delays_are_refused_in_one_line(call, message):
    with pytest.raises((TypeError, ValueError), match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_over_a_time_varying_graph_the_own_value_takes_each_rounds_self_weight():
    """A sequence whose self-weights change from round to round (ring, complete, star): the
    own current value is weighted by W_t's diagonal of that round, per agent, as in the
    definition D_t Z(t) + (W_t - D_t) Z(t - tau)."""
    n, d, steps, alpha, tau = 5, 2, 7, 0.05, 1
    rounds = [dopt.topology.ring(n).W, dopt.topology.complete(n).W, dopt.topology.star(n).W]
    graph = dopt.topology.sequence(rounds)
    diagonals = {tuple(np.diag(graph.at(t).matrix()).round(6)) for t in range(3)}
    assert len(diagonals) == 3  # the self-weights do change, and differ between agents
    oracle = LinearOracle(n, d, steps, seed=3)
    x0 = np.random.default_rng(4).standard_normal((n, d))
    alg = make("dsgd", lr=alpha, gossip=f"delayed({tau})")
    comm = dopt.comm.SimulatedCommunicator(graph)
    state, x, sent = alg.init(torch.from_numpy(x0)), x0.copy(), []
    for t in range(steps):
        state = alg.step(state, oracle.stacked(t, state.x), comm)
        W = rounds[t % 3].numpy()
        z = np.stack([x[i] - alpha * oracle.agent(t, i, x[i]) for i in range(n)])
        sent.append(z)
        late = sent[t - tau] if t >= tau else x0
        x = np.stack(
            [W[i, i] * z[i] + sum(W[i, j] * late[j] for j in range(n) if j != i) for i in range(n)]
        )
        np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-12, atol=1e-13)
