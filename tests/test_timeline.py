"""The time model: when each agent finishes each step, against a per-agent loop of its
definition; the pace of synchronous, delayed and asynchronous methods; same seed, same
timeline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

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
        (lambda: TimeModel(factor=0.5), r"factor must be >= 1 and <= 1e\+09"),
        (lambda: TimeModel(compute=0), r"compute must be > 0"),
        (lambda: TimeModel(slow=(-1,)), r"slow names agents by index >= 0; got -1"),
        (lambda: TimeModel(bandwidth=0), r"bandwidth must be >= 0.001 and"),
        (lambda: TimeModel(compute=float("inf")), r"compute must be >= 0 and <= 1e\+09 seconds"),
        (lambda: TimeModel(noise=float("nan")), r"noise must be a number; got nan"),
        (lambda: TimeModel(noise=1e308), r"noise must be >= 0 and <= 10 .*; got 1e\+308"),
        (lambda: TimeModel(latency=1e308), r"latency must be >= 0 and <= 1e\+09 seconds"),
        (lambda: TimeModel(bandwidth=5e-324), r"bandwidth must be >= 0.001 .*; got 5e-324"),
        (lambda: TimeModel(seed=2**64), r"seed must be <= 2\*\*63 - 1"),
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


def test_the_clock_stays_finite_at_every_limit_of_the_time_model():
    """The largest times the model takes (30 years a step, a billion times slower, sigma 10,
    a message of a kilobyte at 1e-3 bytes/s) give a finite clock, without a warning."""
    from decentopt.driver.timeline import LIMITS

    worst = {
        "compute": LIMITS["compute"][1],
        "noise": LIMITS["noise"][1],
        "factor": LIMITS["factor"][1],
        "latency": LIMITS["latency"][1],
        "bandwidth": LIMITS["bandwidth"][0],
    }
    model = TimeModel(**worst, slow=(0,), seed=2**63 - 1)
    graph = dopt.topology.ring(8)
    with np.errstate(all="raise"):  # an overflow anywhere raises
        for lag, asynchronous in ((0, False), (2, False), (0, True)):
            seconds = clock(model, graph, 200, 1024.0, lag, asynchronous)
            assert np.isfinite(seconds).all() and (np.diff(seconds) >= 0).all()
            assert seconds[-1] > 200 * 1024 / 1e-3  # each step sends a kilobyte at least


def test_a_simulated_run_is_clocked_as_worked_out_by_hand_on_a_star():
    """star(4), compute 1 s, latency 0, bandwidth 240 B/s; a message carries one column's
    row of the problem (d = 3 float64: 24 bytes, 0.1 s), however many repetitions travel
    together. The hub sends 3 messages a round (0.3 s), a leaf 1 (0.1 s):
    step 1: the leaves wait for the hub, 1 + 0.3 = 1.3; the hub is done at 1.1;
    step 2: leaves ready at 2.3, hub at 2.1 (+0.3 = 2.4 at the leaves; 2.3 + 0.1 at the
    hub): 2.4; step 3: 3.4 + 0.3 = 3.7; step 4: leaves 4.7, hub 4.5 + 0.3: 4.8."""
    prob = dopt.problems.Quadratic.paper(n=4, d=3, p=4, sigma2=0.0, repetitions=2, seed=0)
    model = TimeModel(compute=1.0, latency=0.0, bandwidth=240.0)
    star = dopt.topology.star(4)
    rows = dopt.simulate(make("dsgd", lr=0.01), prob, star, 4, record="all", timing=model).rows
    times = sorted({(r["step"], r["sim_time"]) for r in rows})
    np.testing.assert_allclose([t for _, t in times], [0.0, 1.3, 2.4, 3.7, 4.8], rtol=1e-12)


def test_delayed_gossip_is_clocked_as_worked_out_by_hand_on_a_ring():
    """ring(4), compute 1 s, messages of 1 s (latency), two a round: s_j = 2 s. Synchronous:
    3 s a step. delayed(1): no message is awaited at step 0 (the neighbours' initial values
    are known), so T(1) = 1; then T(t+1) = max(T(t) + 1, T(t-1) + 1 + 2):
    1, 3, 4, 6, 7, 9 (1.5 s a step)."""
    prob = dopt.problems.Quadratic.paper(n=4, d=3, p=4, sigma2=0.0, repetitions=1, seed=0)
    model = TimeModel(compute=1.0, latency=1.0, bandwidth=1e300)
    ring = dopt.topology.ring(4)
    want = {"exact": [0, 3, 6, 9, 12, 15, 18], "delayed(1)": [0, 1, 3, 4, 6, 7, 9]}
    for gossip, seconds in want.items():
        alg = make("dsgd", lr=0.01, gossip=gossip)
        rows = dopt.simulate(alg, prob, ring, 6, record="all", timing=model).rows
        got = [t for _, t in sorted({(r["step"], r["sim_time"]) for r in rows})]
        np.testing.assert_allclose(got, seconds, rtol=1e-12, atol=1e-12)


def test_compute_noise_has_mean_one_and_the_given_spread():
    """exp(sigma N - sigma^2 / 2) with N standard normal: mean one, log-spread sigma."""
    model = TimeModel(compute=2.0, noise=0.5, seed=1)
    times = compute_times(model, 50, 400)  # 20,000 draws: standard error 0.4 % of the mean
    assert times.mean() == pytest.approx(2.0, rel=0.02)
    assert np.log(times / 2.0).std() == pytest.approx(0.5, rel=0.03)


class Reads:
    """A graph given by who reads whom (``W[i, j] != 0``: agent i reads agent j)."""

    def __init__(self, W: list[list[float]]) -> None:
        self.W, self.n = torch.tensor(W), len(W)

    def at(self, t: int) -> Reads:  # the same W every round, as a static graph
        return self

    def matrix(self) -> np.ndarray:
        return self.W.numpy()


def test_an_agent_is_charged_the_messages_it_sends_not_those_it_receives():
    """Agent 0 sends to agents 1, 2 and 3 (3 messages: 0.3 s) and reads only agent 1 (which
    sends 1 message: 0.1 s); agents 2 and 3 send nothing. Compute 1 s: the readers of agent 0
    finish step 1 at 1 + 0.3 = 1.3, then 2.4, 3.7, 4.8 as on a star (worked out above); a
    clock charging received messages would give 1.1, 2.2, 3.3, 4.4."""
    graph = Reads([[0.5, 0.5, 0, 0], [0.5, 0.5, 0, 0], [0.5, 0, 0.5, 0], [0.5, 0, 0, 0.5]])
    model = TimeModel(compute=1.0, latency=0.1, bandwidth=1e300)
    np.testing.assert_allclose(clock(model, graph, 4, 0.0), [0, 1.3, 2.4, 3.7, 4.8], rtol=1e-12)
