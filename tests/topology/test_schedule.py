"""Time-varying topologies: every builder's rounds, the period's contraction, mixing by round."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.algorithms.gossips import RoundsChannel as MultiRound
from decentopt.comm import SimulatedCommunicator
from decentopt.comm.cost import NetworkModel
from decentopt.topology import (
    AssumptionError,
    GossipRound,
    base_graph,
    one_peer_exponential,
    one_peer_hypercube,
    random_matchings,
    sequence,
)

BUILDERS = {
    "one_peer_exponential": lambda n: one_peer_exponential(n),
    "one_peer_hypercube": lambda n: one_peer_hypercube(1 << (n.bit_length() - 1)),
    "base_2": lambda n: base_graph(n, base=2),
    "base_3": lambda n: base_graph(n, base=3),
    "random_matchings": lambda n: random_matchings(n, seed=4),
}


def product(matrices: list[np.ndarray]) -> np.ndarray:
    P = np.eye(len(matrices[0]))
    for W in matrices:
        P = W @ P
    return P


@pytest.mark.parametrize("n", [2, 5, 12, 16, 27, 33])
@pytest.mark.parametrize("builder", list(BUILDERS))
def test_every_round_is_symmetric_doubly_stochastic_with_positive_diagonal(builder, n):
    schedule = BUILDERS[builder](n)
    for W in schedule.matrices(count=2 * (schedule.period or 8)):
        np.testing.assert_allclose(W, W.T, atol=1e-15)
        np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-14)
        assert W.min() >= 0 and np.diag(W).min() > 0
    assert schedule.lam < 1


@pytest.mark.parametrize("base", [2, 3, 4])
def test_base_graph_averages_exactly_after_one_period_with_at_most_k_peers(base):
    for n in range(1, 70):
        schedule = base_graph(n, base=base)
        P = product(schedule.matrices())
        np.testing.assert_allclose(P, np.full((n, n), 1 / n), rtol=0, atol=1e-12, err_msg=str(n))
        assert schedule.max_degree <= base - 1
        assert schedule.period <= 2 * (np.log(n) / np.log(base) + 1) + 1  # O(log n) rounds


def base_graph_sizes(base: int, rng: np.random.Generator) -> list[int]:
    """Sizes where a digit range can be off by one: powers of the base, one either side,
    their doubles, and random sizes, up to 10^4."""
    sizes = {10_000, 9_999}
    power = base
    while power <= 10_000:
        sizes |= {power - 1, power, power + 1, 2 * power, 2 * power + 1}
        power *= base
    sizes |= set(rng.integers(70, 10_000, size=12).tolist())
    return sorted(s for s in sizes if 1 <= s <= 10_000)


@pytest.mark.slow
@pytest.mark.parametrize("base", range(2, 11))
def test_base_graph_averages_exactly_up_to_ten_thousand_agents(base):
    """Applying one period's rounds to random vectors gives their average, for every base
    2-10 (``base_graph(243, base=3)`` and ``base_graph(1000, base=10)`` among them)."""
    rng = np.random.default_rng(base)
    for n in base_graph_sizes(base, rng):
        schedule = base_graph(n, base=base)
        z = rng.standard_normal((n, 3))
        y = z
        for t in range(schedule.period):
            y = schedule.at(t).apply(y)
        np.testing.assert_allclose(y, np.broadcast_to(z.mean(0), z.shape), atol=1e-10, err_msg=n)
        assert schedule.max_degree <= base - 1


def test_base_graph_merge_rounds_are_not_positive_semi_definite_and_say_so():
    assert not base_graph(7, base=2).psd  # 7 = 4 + 2 + 1: merges needed
    assert base_graph(8, base=2).psd  # a power of the base: cliques only
    assert base_graph(7, base=2).lazy().psd


def test_one_peer_hypercube_is_exact_in_log2_n_rounds_and_refuses_other_n():
    schedule = one_peer_hypercube(32)
    assert schedule.period == 5 and schedule.max_degree == 1 and schedule.psd
    np.testing.assert_allclose(product(schedule.matrices()), 1 / 32, atol=1e-15)
    with pytest.raises(ValueError, match=r"power of two; got 12 .*use 8 or 16"):
        one_peer_hypercube(12)


def test_one_peer_exponential_rounds_and_contraction():
    schedule = one_peer_exponential(12)
    assert schedule.period == 4 and schedule.max_degree == 2 and schedule.psd
    first = schedule.matrices()[0]
    assert first[0, 1] == first[0, 11] == 0.25 and first[0, 0] == 0.5
    P = product(schedule.matrices())
    assert schedule.period_contraction == pytest.approx(np.linalg.norm(P - 1 / 12, 2), abs=1e-12)
    assert 0 < schedule.period_contraction < 1
    assert schedule.lam == pytest.approx(schedule.period_contraction ** (1 / 4))
    # a power of two averages exactly: some round has eigenvalue 0 for every k != 0
    assert one_peer_exponential(16).period_contraction < 1e-12


def test_random_matchings_are_seeded_by_round_and_odd_n_leaves_one_idle():
    a, b = random_matchings(9, seed=1), random_matchings(9, seed=1)
    for t in (0, 5, 1000):
        np.testing.assert_array_equal(a.at(t).matrix(), b.at(t).matrix())
        assert sorted(a.at(t).messages.tolist()) == [0] + [1] * 8
    assert not np.array_equal(a.at(0).matrix(), a.at(1).matrix())
    assert not np.array_equal(a.at(0).matrix(), random_matchings(9, seed=2).at(0).matrix())
    assert a.period is None and a.lam < 1


@pytest.mark.parametrize(
    "graph",
    [
        dopt.topology.ring(6),
        dopt.topology.ring(70),  # stored by its stencil
        dopt.topology.erdos_renyi(9, 0.4, seed=1),
        dopt.topology.directed_ring(7),
    ],
    ids=["ring", "circulant", "erdos_renyi", "directed"],
)
def test_a_static_graph_is_its_own_round_as_a_schedule_of_period_one_gives_it(graph):
    W = graph.W.numpy()
    rounds = [GossipRound.from_matrix(W)]
    directed = "symmetric" not in graph.offers
    one = dopt.topology.TopologySchedule(graph.n, "one", tuple(rounds), directed=directed)
    assert graph.period == one.period == 1
    for t in (0, 5):
        np.testing.assert_array_equal(graph.at(t).matrix(), one.at(t).matrix())
        np.testing.assert_array_equal(graph.at(t).self_weight, one.at(t).self_weight)
        for i in range(graph.n):
            assert graph.at(t).neighbours(i) == one.at(t).neighbours(i)
            assert graph.at(t).targets(i) == one.at(t).targets(i)


def test_sequence_checks_every_round_and_that_the_period_contracts():
    ring = dopt.topology.ring(6).W.numpy()
    assert sequence([ring]).lam == pytest.approx(dopt.topology.ring(6).lam)
    directed = np.eye(4) / 2 + np.roll(np.eye(4), 1, axis=1) / 2
    with pytest.raises(
        AssumptionError, match=r"round 0: Assumption 1.2. fails: W is not symmetric"
    ):
        sequence([directed])
    with pytest.raises(AssumptionError, match="never reach consensus"):
        sequence([np.eye(4), np.eye(4)])
    pair = np.kron(np.eye(2), np.full((2, 2), 0.5))  # {0,1} and {2,3}: never joined
    with pytest.raises(AssumptionError, match="does not contract"):
        sequence([pair])
    with pytest.raises(AssumptionError, match=r"round 1: Assumption 1.2. fails: W is not doubly"):
        sequence([ring, ring * 2])


def test_simulated_communicator_mixes_with_w_t_at_round_t_and_counts_messages():
    schedule = base_graph(13, base=3)
    comm = SimulatedCommunicator(schedule)
    z = torch.randn(13, 2, 3, dtype=torch.float64)
    out = z
    for t, W in enumerate(schedule.matrices(count=2 * schedule.period)):
        want = torch.einsum("ij,jab->iab", torch.from_numpy(W), out)
        out = comm.mix(out)
        torch.testing.assert_close(out, want, rtol=0, atol=1e-13)
        assert comm.stats.rounds == t + 1
    torch.testing.assert_close(out, z.mean(0, keepdim=True).expand_as(z), rtol=0, atol=1e-13)
    payload = 6 * 8
    sent = [schedule.at(t).messages for t in range(2 * schedule.period)]
    assert comm.stats.bytes_per_agent == pytest.approx(sum(m.mean() for m in sent) * payload)
    assert comm.stats.busiest_messages == sum(int(m.max()) for m in sent)
    assert comm.stats.bytes_sent == sum(int(m.sum()) for m in sent) * payload


def test_static_topology_counts_its_degrees_per_round():
    comm = SimulatedCommunicator(dopt.topology.star(5))
    comm.mix(torch.ones(5, 10, dtype=torch.float32))
    assert comm.stats.busiest_messages == 4  # the hub
    assert comm.stats.bytes_per_agent == pytest.approx(8 / 5 * 40)
    assert comm.stats.busiest_bytes == 4 * 40


def test_network_model_prices_the_busiest_agent():
    model = NetworkModel(bandwidth=1e9, latency=1e-5, compute=1e-3)
    assert model.seconds(10, 20, 4e6) == pytest.approx(10e-3 + 20e-5 + 4e-3)
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        NetworkModel(bandwidth=0.0)


def test_chebyshev_acceleration_refuses_a_changing_w():
    with pytest.raises(ValueError, match="Chebyshev acceleration needs one fixed W"):
        MultiRound(SimulatedCommunicator(one_peer_exponential(8)), 3, "chebyshev")
    plain = MultiRound(SimulatedCommunicator(one_peer_exponential(8)), 3, "none")
    plain.mix(torch.ones(8, 2))
    assert plain.stats.rounds == 3


def _final_error(name: str, network, iterations: int = 3000) -> tuple[float, bool]:
    prob = dopt.problems.Quadratic.paper(n=32, d=10, p=20, c=1.0, sigma2=0.0, repetitions=1)
    hp = {"beta": 0.9} if name == "edm" else {}
    res = dopt.simulate(dopt.algorithms.make(name, lr=0.05, **hp), prob, network, iterations)
    return float(res.final("dist_to_opt")[0]), bool(res.diverged[0])


def test_what_exact_diffusion_reaches_over_a_time_varying_graph():
    """Deterministic quadratic. On the ring (2 peers per round) ED and EDM reach the optimum;
    on the one-peer exponential graph (also 2 peers per round) their correction, built for one
    fixed W, is unstable: they diverge, whatever the step size, while gradient tracking reaches
    the optimum. The lazy rounds (W_t + I)/2 make ED and EDM exact again."""
    ring, one_peer = dopt.topology.ring(32), one_peer_exponential(32)
    for name in ("ed", "edm"):
        error, diverged = _final_error(name, ring)
        assert error < 1e-20 and not diverged
        _, diverged = _final_error(name, one_peer, 300)
        assert diverged
        error, diverged = _final_error(name, one_peer.lazy())
        assert error < 1e-20 and not diverged
    error, diverged = _final_error("dsgt", one_peer)
    assert error < 1e-20 and not diverged
    dsgd, _ = _final_error("dsgd", one_peer)
    assert dsgd > 1e-3  # DSGD keeps its heterogeneity bias on any graph


def test_a_method_that_needs_psd_is_warned_on_a_base_graph():
    prob = dopt.problems.Quadratic.paper(n=7, d=3, p=5, c=1.0, sigma2=0.0, repetitions=1)
    logged = []
    comm = SimulatedCommunicator(base_graph(7))
    from decentopt.driver import RunOptions, run_loop
    from decentopt.plan import Plan

    run_loop(
        dopt.algorithms.make("ed", lr=0.01),
        prob,
        comm,
        Plan(2, (2,)),
        RunOptions(log=logged.append),
    )
    assert "needs every W positive semi-definite" in logged[0] and "lazy()" in logged[0]
    logged.clear()
    run_loop(
        dopt.algorithms.make("dsgd", lr=0.01),
        prob,
        comm,
        Plan(2, (2,)),
        RunOptions(log=logged.append),
    )
    assert not logged


@pytest.mark.parametrize("build", [one_peer_exponential, dopt.topology.random_matchings])
def test_exact_diffusion_is_warned_on_positive_semi_definite_one_peer_rounds(build):
    """Every round of these is PSD (eigenvalues 0 and 1), yet ED, EDM and NIDS diverge on
    them (test above): they are warned before running, with lazy() as the fix."""
    prob = dopt.problems.Quadratic.paper(n=8, d=3, p=5, c=1.0, sigma2=0.0, repetitions=1)
    network = build(8)
    assert network.psd
    from decentopt.driver import RunOptions, run_loop
    from decentopt.plan import Plan

    for name, warned in [("ed", True), ("edm", True), ("nids", True), ("dsgd", False)]:
        logged: list[str] = []
        alg = dopt.algorithms.make(name, lr=0.01)
        run_loop(
            alg, prob, SimulatedCommunicator(network), Plan(2, (2,)), RunOptions(log=logged.append)
        )
        assert bool(logged) == warned
        assert not warned or ("lazy()" in logged[0] and "diverges" in logged[0])
        logged.clear()
        lazy = SimulatedCommunicator(network.lazy())
        run_loop(alg, prob, lazy, Plan(2, (2,)), RunOptions(log=logged.append))
        assert not logged


def test_cli_reports_a_schedule(capsys):
    from decentopt.cli import main

    assert main(["topology", "base_graph", "--n", "7", "--base", "2"]) == 0
    out = capsys.readouterr().out
    assert "period (rounds)" in out and "(exact average)" in out and "negative eigenvalue" in out
