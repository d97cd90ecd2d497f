"""The time model: when each agent finishes each step, against a per-agent loop of its
definition; the pace of synchronous, delayed and asynchronous methods; same seed, same
timeline."""

from __future__ import annotations

import numpy as np
import pytest

import decentopt as dopt
from decentopt.algorithms import make
from decentopt.driver.timeline import TimeModel, clock, compute_times, pace


def per_agent(model: TimeModel, graph, steps: int, payload: float, lag: int) -> np.ndarray:
    """T_i(t+1) = max(r_i(t), max_{j in N_i} r_j(t - lag) + s_j), agent by agent."""
    n = graph.n
    c = compute_times(model, n, steps)
    one = model.latency + payload / model.bandwidth
    T, ready, out = [0.0] * n, [], [0.0]
    for t in range(steps):
        W = graph.at(t).matrix() if hasattr(graph, "at") else graph.W.numpy()
        readers = [[j for j in range(n) if j != i and W[i, j] != 0] for i in range(n)]
        send = [one * sum(W[k, j] != 0 for k in range(n) if k != j) for j in range(n)]
        ready.append([T[i] + c[t, i] for i in range(n)])
        new = []
        for i in range(n):
            late = [ready[t - lag][j] + send[j] for j in readers[i]] if t >= lag else [0.0]
            new.append(max([ready[t][i], *late]))
        T = new
        out.append(max(T))
    return np.array(out)


GRAPHS = {
    "erdos_renyi": lambda: dopt.topology.erdos_renyi(9, 0.4, seed=2),
    "random_matchings": lambda: dopt.topology.random_matchings(9, seed=1),  # never repeats
    "directed_exponential": lambda: dopt.topology.directed_exponential(9),
}


@pytest.mark.parametrize("graph", list(GRAPHS))
@pytest.mark.parametrize("lag", [0, 1, 3])
def test_the_clock_follows_its_definition_agent_by_agent(lag, graph):
    graph = GRAPHS[graph]()
    model = TimeModel(compute=0.01, noise=0.6, slow=(4,), factor=3.0, latency=1e-3, seed=5)
    np.testing.assert_array_equal(
        clock(model, graph, 40, 800.0, lag), per_agent(model, graph, 40, 800.0, lag)
    )


def test_a_synchronous_step_costs_compute_and_the_messages_one_after_the_other():
    model = TimeModel(compute=1.0, latency=0.01, bandwidth=1e4)
    seconds = clock(model, dopt.topology.ring(8), 5, payload=100.0)
    np.testing.assert_allclose(np.diff(seconds), 1.0 + 2 * (0.01 + 100.0 / 1e4))


def test_a_straggler_sets_the_pace_of_synchronous_and_delayed_methods_not_asynchronous():
    """One agent 4x slower: synchronous and delayed methods advance at its pace (a bounded
    delay cannot outrun it for long); the asynchronous clock charges the agents' throughput,
    7 + 1/4 updates a second for 8 agents."""
    model = TimeModel(compute=1.0, slow=(0,), factor=4.0, latency=0.0)
    ring = dopt.topology.ring(8)
    for lag in (0, 2):
        np.testing.assert_allclose(clock(model, ring, 20, 0.0, lag), 4.0 * np.arange(21))
    fast = clock(model, ring, 200, 0.0, asynchronous=True)
    np.testing.assert_allclose(fast[-1] / 200, 8 / 7.25, rtol=0.01)


def test_delay_lets_computation_overlap_noisy_compute_times():
    model = TimeModel(compute=1.0, noise=0.5, latency=0.0, seed=3)
    ring = dopt.topology.ring(8)
    sync, late = clock(model, ring, 100, 0.0, 0), clock(model, ring, 100, 0.0, 2)
    assert np.all(late <= sync) and late[-1] < 0.9 * sync[-1]


def test_a_slow_agent_that_moves_on():
    model = TimeModel(compute=1.0, slow=(1,), factor=5.0, moves_every=3)
    c = compute_times(model, 4, 9)
    slow = np.argmax(c, axis=1)
    np.testing.assert_array_equal(slow, [1, 1, 1, 2, 2, 2, 3, 3, 3])
    assert set(np.unique(c)) == {1.0, 5.0}


def test_the_pace_of_a_method():
    assert pace(make("edm")) == (0, False)
    assert pace(make("dmsgd", gossip="delayed(2)")) == (2, False)
    assert pace(make("dmsgd", gossip="delayed(1, push_sum)")) == (1, False)
    assert pace(make("dsgd", gossip="delayed(1, staleness=4)")) == (4, False)  # waits for 4


def test_same_seed_same_timeline_in_every_row():
    prob = dopt.problems.Quadratic.paper(n=8, d=5, p=10, c=0.5, sigma2=0.05, repetitions=2)
    model = TimeModel(compute=0.01, noise=0.5, slow=(0,), factor=4.0, seed=7)
    runs = [
        dopt.simulate(make("dsgd", gossip="delayed(1)"), prob, dopt.topology.ring(8), 50,
                      timing=model).rows
        for _ in range(2)
    ]  # fmt: skip
    times = [[row["sim_time"] for row in rows] for rows in runs]
    assert times[0] == times[1] and times[0][-1] > 0
    other = dopt.simulate(
        make("dsgd", gossip="delayed(1)"), prob, dopt.topology.ring(8), 50,
        timing=TimeModel(compute=0.01, noise=0.5, slow=(0,), factor=4.0, seed=8),
    ).rows  # fmt: skip
    assert other[-1]["sim_time"] != times[0][-1]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: TimeModel(factor=0.5), r"factor >= 1"),
        (lambda: TimeModel(compute=0), r"compute must be > 0"),
        (lambda: TimeModel(slow=(-1,)), r"slow names agents by index >= 0; got -1"),
        (lambda: TimeModel(bandwidth=0), r"bandwidth must be > 0"),
        (lambda: compute_times(TimeModel(slow=(9,)), 8, 3), r"slow agent 9 does not exist"),
    ],
)
def test_bad_time_models_are_refused_in_one_line(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_a_specification_with_a_time_model_clocks_every_row(tmp_path):
    """``[timing]`` is presentation, like ``[network]``: every row gets ``sim_time`` (and
    ``model_time`` becomes it), and a changed model reclocks stored rows without rerunning."""
    from decentopt.experiments import load_spec, run_spec
    from tests.experiments.test_spec import BASE, write

    text = (
        BASE
        + "\n[timing]\ncompute = 1.0\nslow = [0]\nfactor = 4.0\nlatency = 0.0\nbandwidth = 1e300\n"
    )
    rows = run_spec(load_spec(write(tmp_path, text)), tmp_path / "out", progress=False,
                    log=lambda _: None).rows  # fmt: skip
    assert all(r["sim_time"] == r["model_time"] == 4.0 * r["step"] for r in rows)
    faster = load_spec(write(tmp_path, text.replace("factor = 4.0", "factor = 2.0")))
    again = run_spec(faster, tmp_path / "out", progress=False, log=lambda _: None)
    assert again.ran == [] and all(r["sim_time"] == 2.0 * r["step"] for r in again.rows)
