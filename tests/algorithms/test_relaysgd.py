"""RelaySGD: each agent holds the uniform average of delayed models, exactly, on any tree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.communicator import CommStats, Shared


def distances(topo: dopt.topology.Topology) -> np.ndarray:
    import scipy.sparse.csgraph as cg

    return cg.shortest_path((topo.W.numpy() != 0).astype(float), unweighted=True).astype(int)


@pytest.mark.parametrize(
    "tree",
    [
        lambda: dopt.topology.chain(7),
        lambda: dopt.topology.binary_tree(9),
        lambda: dopt.topology.star(6),
        lambda: dopt.topology.spanning_tree(dopt.topology.erdos_renyi(10, 0.3, seed=2)),
    ],
)
def test_every_agent_holds_the_average_of_delayed_half_steps(tree):
    """x_i(t+1) = (1/n) sum_j x_j(t - delay + 1/2) with delay = max(d(i, j) - 1, 0): a
    neighbour's half step arrives in the same round, each further hop costs a round; x(0)
    stands in for agents not reached yet."""
    topo = tree()
    n, d = topo.n, 3
    dist = distances(topo)
    alg = dopt.algorithms.make("relaysgd", lr=0.1, beta=0.5)
    comm = SimulatedCommunicator(topo)
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(1, d, dtype=torch.float64, generator=gen).expand(n, d).clone()
    state = alg.init(x0)
    halves = []
    for t in range(2 * n):
        grad = torch.randn(n, d, dtype=torch.float64, generator=gen)
        m = 0.5 * state.rule.m + 0.5 * grad
        halves.append(state.x - 0.1 * m)
        state = alg.step(state, grad, comm)
        want = torch.stack(
            [
                sum(
                    halves[t - max(dist[i, j] - 1, 0)][j] if dist[i, j] <= t + 1 else x0[j]
                    for j in range(n)
                )
                / n
                for i in range(n)
            ]
        )
        torch.testing.assert_close(state.x, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(
        state.rule.counts.sum(1).squeeze(-1), torch.full((n,), n - 1.0, dtype=torch.float64)
    )


def test_relaysgd_reaches_the_optimum_with_exact_gradients():
    prob = dopt.problems.Quadratic.paper(
        n=16, d=5, p=10, c=[1.0, 0.25], sigma2=0.0, repetitions=2, seed=1
    )
    res = dopt.simulate(
        dopt.algorithms.make("relaysgd", lr=0.05, beta=0.0), prob, dopt.topology.chain(16), 4000
    )
    assert np.all(res.final("dist_to_opt") < 1e-10)
    # gossip on the same chain keeps DSGD's bias
    dsgd = dopt.simulate(dopt.algorithms.make("dsgd", lr=0.05), prob, dopt.topology.chain(16), 4000)
    assert np.all(dsgd.final("dist_to_opt") > 1e-3)


def test_exchange_delivers_each_neighbour_its_own_message():
    topo = dopt.topology.binary_tree(5)  # 0: 1, 2; 1: 0, 3, 4; 2: 0; 3: 1; 4: 1
    comm = SimulatedCommunicator(topo)
    assert comm.slots == 3
    out = torch.zeros(5, 3, 2, dtype=torch.float32)
    for i, peers in enumerate(topo.neighbors):
        for s, j in enumerate(peers):
            out[i, s] = torch.tensor([i, j])  # "from i to j"
    (got,) = comm.exchange([out])
    for i, peers in enumerate(topo.neighbors):
        for s, j in enumerate(peers):
            assert got[i, s].tolist() == [j, i]  # slot s of i: what its s-th neighbour sent it
        assert torch.equal(got[i, len(peers) :], torch.zeros(3 - len(peers), 2))
    assert comm.stats.rounds == 1
    assert comm.stats.bytes_sent == 2 * 4 * 2 * 4  # 4 edges, both ways, 2 floats
    with pytest.raises(ValueError, match="static undirected graph"):
        SimulatedCommunicator(dopt.topology.directed_ring(4)).exchange([torch.zeros(4, 1, 1)])
    with pytest.raises(ValueError, match=r"\(n, slots, ...\) = \(5, 3, ...\)"):
        comm.exchange([torch.zeros(5, 2, 1)])


def test_a_checkpointed_run_resumes_to_the_uninterrupted_run(tmp_path):
    """A checkpoint holds the relayed messages; a fresh state takes them back, and the
    resumed run goes on bit for bit (a relay buffer is as wide as the graph's degree)."""
    from decentopt.driver import RunOptions, run_loop
    from decentopt.plan import Plan

    prob = dopt.problems.Quadratic.paper(n=7, d=3, p=4, sigma2=0.1, repetitions=2, seed=1)
    topo = dopt.topology.binary_tree(7)

    def run(**options):
        alg = dopt.algorithms.make("relaysgd", lr=0.05, beta=0.5)
        plan = Plan(40, tuple(range(0, 41, 10)), period=10)
        opts = RunOptions(seed=3, log=lambda _: None, **options)
        return run_loop(alg, prob, SimulatedCommunicator(topo), plan, opts)

    full = run()
    run(checkpoint_dir=tmp_path, stop_after=20)
    resumed = run(checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 20
    assert torch.equal(resumed.final_state.x, full.final_state.x)
    for name, value in full.final_state.tensors().items():
        assert torch.equal(resumed.final_state.tensors()[name], value), name


class Mirrored(Shared):
    """Agent 0 of a chain of two whose other agent is its mirror image (same start, same
    data): every message it receives is the one it sends, every mix leaves a row as it is."""

    topology = dopt.topology.chain(2)

    def __init__(self) -> None:
        self.stats = CommStats()

    @property
    def slots(self) -> int:
        return self._check_exchange()

    def exchange(self, tensors):
        self._check_exchange(tensors, rows=1)
        self.stats.add_round(1.0, 1, 0, 0)
        return [t.clone() for t in tensors]

    def mix(self, z, out=None):
        self.stats.add_round(1.0, 1, 0, 0)
        return z.clone() if out is None else out.copy_(z)

    def mix_compressed(self, z, compression):
        raise NotImplementedError

    def mean(self, z):
        return z.clone()

    def barrier(self, stage):
        pass


def test_an_optimizer_state_dict_round_trip_resumes_exactly():
    from decentopt.distributed import DecentralizedOptimizer

    def model_and_data(seed):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
        return model, torch.randn(16, 4), torch.randint(0, 2, (16,))

    def run(opt, model, x, y, steps):
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    model, x, y = model_and_data(0)
    opt = DecentralizedOptimizer(model.parameters(), "relaysgd", Mirrored(), lr=0.1, beta=0.5)
    run(opt, model, x, y, 3)
    saved = {"model": {k: v.clone() for k, v in model.state_dict().items()}}
    saved["opt"] = opt.state_dict()
    run(opt, model, x, y, 3)
    uninterrupted = [p.detach().clone() for p in model.parameters()]

    fresh, _, _ = model_and_data(5)
    fresh.load_state_dict(saved["model"])
    opt2 = DecentralizedOptimizer(fresh.parameters(), "relaysgd", Mirrored(), lr=0.1, beta=0.5)
    opt2.load_state_dict(saved["opt"])
    run(opt2, fresh, x, y, 3)
    for p, q in zip(fresh.parameters(), uninterrupted, strict=True):
        assert torch.equal(p.detach(), q)
