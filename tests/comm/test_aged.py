"""The simulator under bounded staleness with a time model (decentopt.comm.aged): the
iterates mix each neighbour's message of the age the time model gives (against a NumPy
loop of the update), reduce to the plain delay bit for bit where every age is tau, and the
run's clock is the ranks' with their waits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.comm import AgedCommunicator, SimulatedCommunicator
from decentopt.driver import RunOptions, run_loop
from decentopt.driver.timeline import TimeModel, simulated_communicator, stale_timeline
from decentopt.plan import Plan

SLOW = TimeModel(compute=0.1, noise=0.3, slow=(0,), factor=6.0, latency=0.01, seed=1)


def quadratic(n: int, repetitions: int = 2) -> dopt.problems.Quadratic:
    return dopt.problems.Quadratic.paper(
        n=n, d=3, p=5, c=0.5, sigma2=0.0, repetitions=repetitions, seed=0
    )


def dsgd_by_hand(prob, topo, steps: int, lr: float, ages: np.ndarray) -> np.ndarray:
    """x_i(t+1) = w_ii z_i(t) + sum_j w_ij z_j(t - delta_ij(t)), z = x - lr grad, with
    z(s) = x(0) for s < 0; NumPy, agent by agent."""
    W = topo.W.numpy()
    x = prob.initial_point().numpy().copy()
    sent = {}
    for t in range(steps):
        g = prob.gradient(torch.from_numpy(x), torch.Generator().manual_seed(0)).numpy()
        sent[t] = x - lr * g
        new = np.empty_like(x)
        for i in range(topo.n):
            new[i] = W[i, i] * sent[t][i]
            for k, j in enumerate(topo.neighbors[i]):
                s = t - ages[t, i, k]
                new[i] += W[i, j] * (sent[s][j] if s >= 0 else x0_of(prob)[j])
        x = new
    return x


def x0_of(prob) -> np.ndarray:
    return prob.initial_point().numpy()


@pytest.mark.parametrize(("tau", "bound"), [(1, 3), (2, 4)])
def test_the_iterates_mix_each_neighbours_message_of_the_age_the_time_model_gives(tau, bound):
    topo = dopt.topology.erdos_renyi(6, 0.6, seed=2)
    prob = quadratic(6)
    alg = dopt.algorithms.make("dsgd", lr=0.05, gossip=f"delayed({tau}, staleness={bound})")
    run = dopt.simulate(alg, prob, topo, 40, timing=SLOW, record="all")
    payload = 3 * 8.0  # a column's row: d = 3 doubles
    ages = stale_timeline(SLOW, topo, 40, payload, tau, bound).ages
    assert len(np.unique(ages)) > 2  # ages from tau to the bound occur
    want = dsgd_by_hand(prob, topo, 40, 0.05, ages)
    np.testing.assert_allclose(run.final_state.x.numpy(), want, rtol=0, atol=1e-13)
    plain_alg = dopt.algorithms.make("dsgd", lr=0.05, gossip=f"delayed({tau})")
    plain = dopt.simulate(plain_alg, prob, topo, 40)
    assert not torch.allclose(plain.final_state.x, run.final_state.x, atol=1e-6)


def test_a_bound_equal_to_the_delay_is_the_plain_delay_bit_for_bit():
    """S = tau under a time model, and S > tau where every agent keeps pace (ages all tau):
    the iterates of delayed(tau), bit for bit."""
    topo = dopt.topology.ring(5)
    prob = quadratic(5)
    even = TimeModel(compute=0.1, latency=0.001)
    for gossip, model in (("delayed(2, staleness=2)", SLOW), ("delayed(1, staleness=4)", even)):
        tau = gossip.split("(")[1][0]
        stale = dopt.algorithms.make("dmsgd", lr=0.05, beta=0.8, gossip=gossip)
        plain = dopt.algorithms.make("dmsgd", lr=0.05, beta=0.8, gossip=f"delayed({tau})")
        a = dopt.simulate(stale, prob, topo, 30, timing=model)
        b = dopt.simulate(plain, prob, topo, 30, timing=model)
        assert torch.equal(a.final_state.x, b.final_state.x), gossip


def test_the_clock_is_the_ranks_with_their_waits():
    topo = dopt.topology.ring(4)
    alg = dopt.algorithms.make("dsgd", lr=0.05, gossip="delayed(1, staleness=2)")
    run = dopt.simulate(alg, quadratic(4), topo, 25, timing=SLOW, record="all")
    want = stale_timeline(SLOW, topo, 25, 3 * 8.0, 1, 2).clock
    np.testing.assert_array_equal(run.clock, want)


def test_with_a_time_model_the_run_says_nothing_of_the_plain_delay():
    prob = quadratic(4, repetitions=1)
    alg = dopt.algorithms.make("dsgd", lr=0.05, gossip="delayed(1, staleness=3)")
    comm = simulated_communicator(alg, dopt.topology.ring(4), SLOW, 10)
    assert isinstance(comm, AgedCommunicator)
    said: list[str] = []
    grad = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731
    run_loop(alg, prob, comm, Plan(10, (0, 10)), RunOptions(log=said.append), gradient=grad)
    assert said == []
    assert comm.ages is not None and comm.ages.shape == (10, 4, 2)
    plain = dopt.algorithms.make("dsgd", lr=0.05, gossip="delayed(1)")
    assert type(simulated_communicator(plain, dopt.topology.ring(4), SLOW, 10)) is (
        SimulatedCommunicator
    )
    assert type(simulated_communicator(alg, dopt.topology.ring(4), None, 10)) is (
        SimulatedCommunicator
    )


def test_a_run_longer_than_planned_extends_the_same_schedule():
    topo = dopt.topology.ring(4)
    alg = dopt.algorithms.make("dsgd", lr=0.05, gossip="delayed(1, staleness=3)")
    prob = quadratic(4, repetitions=1)
    grad = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731
    finals = []
    for planned in (3, 30):
        comm = simulated_communicator(alg, topo, SLOW, planned)
        run = run_loop(alg, prob, comm, Plan(30, (0, 30)), RunOptions(), gradient=grad)
        finals.append(run.final_state.x)
    assert torch.equal(finals[0], finals[1])


def test_a_time_varying_graph_is_refused_in_one_line():
    with pytest.raises(ValueError, match="bounded staleness needs a static graph"):
        AgedCommunicator(dopt.topology.one_peer_exponential(4), lambda p, s: None, 5)


def test_a_specification_with_a_time_model_mixes_the_ages_it_gives(tmp_path):
    """A [timing] table reaches a sweep's runs: there bounded staleness and the plain delay
    end apart; without one they end together (the one pace of the simulator). The model is
    part of a staleness unit's fingerprint (another model computes it again) and stays
    presentation for the others (reclocked, not rerun)."""
    from decentopt.experiments import load_spec, run_spec
    from tests.experiments.test_spec import BASE, write

    methods = (
        '[algorithms.stale]\nmethod = "dmsgd"\ngossip = "delayed(1, staleness=3)"\n'
        '[algorithms.plain]\nmethod = "dmsgd"\ngossip = "delayed(1)"\n'
    )
    text = BASE.replace("[algorithms.ed]\n[algorithms.edm]\n", methods)
    timing = "\n[timing]\ncompute = 0.1\nslow = [0]\nfactor = 6.0\nlatency = 0.01\n"
    final = {}
    for name, extra in (("timed", timing), ("untimed", "")):
        spec = load_spec(write(tmp_path, text + extra, f"{name}.toml"))
        rows = run_spec(spec, tmp_path / name, progress=False, log=lambda _: None).rows
        last = max(r["step"] for r in rows)
        final[name] = {
            (r["algorithm"], r["run"]): r["dist_to_opt"] for r in rows if r["step"] == last
        }
    faster = load_spec(write(tmp_path, text + timing.replace("6.0", "2.0"), "timed.toml"))
    again = run_spec(faster, tmp_path / "timed", progress=False, log=lambda _: None)
    assert sorted({unit.split("/")[0] for unit in map(str, again.ran)}) == ["stale"], again.ran
    for run in (0, 1):
        assert final["untimed"]["stale", run] == final["untimed"]["plain", run]
        assert final["timed"]["plain", run] == final["untimed"]["plain", run]
        assert final["timed"]["stale", run] != pytest.approx(final["timed"]["plain", run])
