"""Checks every registered algorithm must pass (the shared suite)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.algorithms import names, resolve
from decentopt.comm import SimulatedCommunicator
from decentopt.schedules import MultiStep
from tests.algorithms.reference import run_reference

ALL = names()
MOMENTUM = [name for name in ALL if resolve(name).uses_momentum]
#: the compressed methods run the suite with compression on (each its own operator)
COMPRESSED = {
    "choco_dsgd": {"compression": "top_k(0.5)", "gamma": 0.7},
    "choco_ed": {"compression": "qsgd(3)", "gamma": 0.6},
    "choco_edm": {"compression": "random_k(0.5)", "gamma": 0.6},
}
TREE = [name for name in ALL if "tree" in resolve(name).requires]
#: the rules that take local steps of their own between rounds (K-GT, LED)
LOCAL_STEPS = [name for name in ALL if resolve(name).takes_local_steps]


def hyper(name: str, **extra) -> dict:
    hp = {"lr": 0.05} | COMPRESSED.get(name, {})
    if resolve(name).uses_momentum:
        hp["beta"] = 0.8
    hp.update(extra)
    return hp


#: the methods that run on directed graphs (push-sum)
PUSH_SUM = [
    name for name in ALL if "symmetric" not in dopt.algorithms.make(name, **hyper(name)).needs
]


def graph_for(name: str, W: np.ndarray) -> dopt.topology.Topology:
    """The graph of ``W``, or its breadth-first spanning tree for the relaying methods."""
    topo = dopt.topology.from_matrix(W)
    return dopt.topology.spanning_tree(topo) if name in TREE else topo


class LinearOracle:
    """g_i(x, t) = H_i x - b_i + noise[t, i]: a deterministic 'stochastic' oracle."""

    def __init__(self, n: int, d: int, steps: int, seed: int = 0, noise: float = 0.3):
        rng = np.random.default_rng(seed)
        A = rng.standard_normal((n, 2 * d, d))
        self.H = A.transpose(0, 2, 1) @ A / (2 * d)
        self.b = rng.standard_normal((n, d))
        self.noise = noise * rng.standard_normal((steps, n, d))

    def agent(self, t: int, i: int, x: np.ndarray) -> np.ndarray:
        return self.H[i] @ x - self.b[i] + self.noise[t, i]

    def stacked(self, t: int, X: torch.Tensor) -> torch.Tensor:
        H = torch.from_numpy(self.H)
        g = (H @ X.unsqueeze(-1)).squeeze(-1) - torch.from_numpy(self.b)
        return g + torch.from_numpy(self.noise[t])

    def mean(self, t: int, x: np.ndarray) -> np.ndarray:
        return np.mean([self.agent(t, i, x) for i in range(len(self.b))], axis=0)


def run_vectorised(alg, W, x0: np.ndarray, oracle: LinearOracle, steps: int):
    """``W``: a mixing matrix (checked against Assumption 1) or a topology."""
    topo = W if isinstance(W, dopt.topology.Graph) else dopt.topology.from_matrix(W)
    comm = SimulatedCommunicator(topo)
    state = alg.init(torch.from_numpy(x0))
    xs = []
    for t in range(steps):
        state = alg.step(state, oracle.stacked(t, state.x), comm)
        xs.append(state.x.numpy().copy())
    return xs, comm


@pytest.fixture(scope="module")
def random_W() -> np.ndarray:
    return dopt.topology.erdos_renyi(7, 0.4, seed=3).W.numpy()


VARIANTS = [{}, {"nesterov": True}, {"dampening": False}, {"nesterov": True, "dampening": False}]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_vectorised_step_equals_per_agent_loop(name, variant, random_W):
    if variant and name not in MOMENTUM:
        pytest.skip("switches apply to momentum methods only")
    n, d, steps = random_W.shape[0], 3, 12
    oracle = LinearOracle(n, d, steps, seed=1)
    x0 = np.random.default_rng(2).standard_normal((n, d))
    hp = hyper(name, **VARIANTS[variant])
    topo = graph_for(name, random_W)
    ref = run_reference(name, hp, topo.W.numpy(), list(x0), oracle.agent, steps)
    got, _ = run_vectorised(dopt.algorithms.make(name, **hp), topo, x0, oracle, steps)
    for t in range(steps):
        np.testing.assert_allclose(got[t], np.stack(ref[t]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", PUSH_SUM)
def test_push_sum_step_equals_per_agent_loop_on_a_directed_graph(name):
    """Over a column- but not row-stochastic W the weights move, and still agree."""
    topo = dopt.topology.random_directed(7, 0.3, seed=4)
    assert not topo.doubly_stochastic
    n, d, steps = topo.n, 3, 12
    oracle = LinearOracle(n, d, steps, seed=1)
    x0 = np.random.default_rng(2).standard_normal((n, d))
    hp = hyper(name)
    ref = run_reference(name, hp, topo.W.numpy(), list(x0), oracle.agent, steps)
    got, _ = run_vectorised(dopt.algorithms.make(name, **hp), topo, x0, oracle, steps)
    for t in range(steps):
        np.testing.assert_allclose(got[t], np.stack(ref[t]), rtol=1e-12, atol=1e-12)


def centralized(name: str, hp: dict, x0: np.ndarray, oracle: LinearOracle, steps: int):
    """What each method reduces to when W = 11^T / n and all agents start equal."""
    alpha, beta = hp["lr"], hp.get("beta", 0.0)
    x, m = x0.copy(), np.zeros_like(x0)
    out = []
    for t in range(steps):
        g = oracle.mean(t, x)
        if name in ("dsgd", "dsgt", "ed"):
            x = x - alpha * g
        elif name == "qg_dsgdm":
            direction = beta * m + (1 - beta) * g
            x = x - alpha * direction
            m = beta * m + (1 - beta) * direction
        else:
            m = beta * m + (1 - beta) * g
            x = x - alpha * m
        out.append(x.copy())
    return out


#: Methods whose gradient step is not mixed in the same round (EXTRA, NIDS with c < 1,
#: Momentum Tracking) do not move in lockstep on the complete graph; their average
#: dynamics are checked instead (test_average_follows_the_centralized_method), as for
#: the compressed methods (exact mixing only without compression: test_compressed.py).
#: Relaying needs a tree, which the complete graph is not. OSGP mixes late messages and
#: AD-PSGD averages in pairs: neither is in lockstep either (test_delayed.py, test_ad_psgd.py).
LOCKSTEP = [
    name
    for name in ALL
    if name not in ("extra", "nids", "mt", "osgp", "ad_psgd", *COMPRESSED, *LOCAL_STEPS)
    and name not in TREE
]


@pytest.mark.parametrize("name", LOCKSTEP)
def test_complete_graph_is_centralized(name):
    n, d, steps = 5, 4, 25
    oracle = LinearOracle(n, d, steps, seed=4)
    x0 = np.tile(np.random.default_rng(5).standard_normal(d), (n, 1))
    hp = hyper(name)
    W = dopt.topology.complete(n).W.numpy()
    got, _ = run_vectorised(dopt.algorithms.make(name, **hp), W, x0, oracle, steps)
    want = centralized(name, hp, x0[0], oracle, steps)
    for t in range(steps):
        np.testing.assert_allclose(got[t], np.tile(want[t], (n, 1)), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["extra", "nids", "mt", "ed", "edm", "sgp", *COMPRESSED])
def test_average_follows_the_centralized_method(name, random_W):
    """xbar+ = xbar - alpha * (mean gradient, or mean momentum), on any doubly stochastic W."""
    n, d, steps = random_W.shape[0], 3, 12
    oracle = LinearOracle(n, d, steps, seed=6)
    hp = hyper(name)
    alpha, beta = hp["lr"], hp.get("beta", 0.0)
    x0 = np.random.default_rng(7).standard_normal((n, d))
    got, _ = run_vectorised(dopt.algorithms.make(name, **hp), random_W, x0, oracle, steps)
    xbar, m = x0.mean(0), np.zeros(d)
    xs = [x0, *got]
    for t in range(steps):
        gbar = np.mean([oracle.agent(t, i, xs[t][i]) for i in range(n)], axis=0)
        m = beta * m + (1 - beta) * gbar
        xbar = xbar - alpha * (m if resolve(name).uses_momentum else gbar)
        np.testing.assert_allclose(got[t].mean(0), xbar, rtol=1e-10, atol=1e-12)


def test_nids_with_c_one_is_exact_diffusion(random_W):
    n, d, steps = random_W.shape[0], 3, 10
    oracle = LinearOracle(n, d, steps, seed=8)
    x0 = np.random.default_rng(9).standard_normal((n, d))
    ed, _ = run_vectorised(dopt.algorithms.make("ed", lr=0.05), random_W, x0, oracle, steps)
    nids, _ = run_vectorised(
        dopt.algorithms.make("nids", lr=0.05, c=1.0), random_W, x0, oracle, steps
    )
    np.testing.assert_allclose(nids[-1], ed[-1], rtol=1e-13, atol=1e-14)
    other, _ = run_vectorised(dopt.algorithms.make("nids", lr=0.05), random_W, x0, oracle, steps)
    assert np.abs(other[-1] - ed[-1]).max() > 1e-6
    with pytest.raises(ValueError, match=r"c must be in \(0, 1\]"):
        dopt.algorithms.make("nids", lr=0.05, c=1.5)


def home(name: str, n: int) -> dopt.topology.Topology:
    """The ring, or the chain for the relaying methods."""
    return dopt.topology.chain(n) if name in TREE else dopt.topology.ring(n)


@pytest.mark.parametrize("name", ALL)
def test_rounds_per_step_counted(name):
    n, d, steps = 6, 2, 5
    oracle = LinearOracle(n, d, steps)
    plain = {"compression": "none"} if name in COMPRESSED else {}
    alg = dopt.algorithms.make(name, **hyper(name, **plain))
    topo = home(name, n)
    _, comm = run_vectorised(alg, topo, np.zeros((n, d)), oracle, steps)
    # gradient trackers skip the tracker's gossip at t = 0 (Y0 = G0); K-GT and LED talk
    # on every local_steps-th step only
    talking = sum(alg.talks(t) != "none" for t in range(steps))
    assert talking == (steps // 4 if name in LOCAL_STEPS else steps)
    expected = alg.rounds_per_step * talking - (alg.rounds_per_step - 1)
    assert comm.stats.rounds == expected
    # entries per message: Momentum Tracking packs X and D after the first round, push-sum
    # adds the weight (Push-DIGing the tracker too), relaying the count
    entries = {"sgp": d + 1, "osgp": d + 1, "push_diging": 2 * d + 1, "relaysgd": d + 1}
    entries |= {"k_gt": 2 * d}
    entries = entries.get(name, d)
    sent = expected * entries + (steps - 1) * d * (name == "mt")
    links = int(topo.degrees.sum())
    assert comm.stats.bytes_sent == sent * links * 8


@pytest.mark.parametrize("name", ALL)
def test_schedule_is_followed(name):
    """A schedule equal to a constant gives the constant-step iterates; a decay differs."""
    n, d, steps = 5, 3, 8
    oracle = LinearOracle(n, d, steps)
    W = home(name, n)
    x0 = np.ones((n, d))
    const, _ = run_vectorised(dopt.algorithms.make(name, **hyper(name)), W, x0, oracle, steps)
    sched = hyper(name, lr=MultiStep(0.05, milestones=[100]))
    same, _ = run_vectorised(dopt.algorithms.make(name, **sched), W, x0, oracle, steps)
    np.testing.assert_allclose(same[-1], const[-1], rtol=1e-13)
    decayed = hyper(name, lr=MultiStep(0.05, milestones=[3], gamma=0.1))
    other, _ = run_vectorised(dopt.algorithms.make(name, **decayed), W, x0, oracle, steps)
    np.testing.assert_allclose(other[2], const[2], rtol=1e-13)
    assert np.abs(other[-1] - const[-1]).max() > 1e-6


@pytest.mark.parametrize("name", ALL)
def test_bad_hyperparameters_and_initial_point(name):
    with pytest.raises(ValueError, match="step size"):
        dopt.algorithms.make(name, lr=-0.1)
    with pytest.raises(ValueError, match="positive finite"):
        dopt.algorithms.make(name, lr=float("nan"))
    alg = dopt.algorithms.make(name, **hyper(name))
    bad = torch.zeros(4, 3)
    bad[1, 2] = float("inf")
    with pytest.raises(ValueError, match="NaN or inf"):
        alg.init(bad)
    with pytest.raises(TypeError, match="floating point"):
        alg.init(torch.zeros(4, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match="unknown hyper-parameter"):
        dopt.algorithms.make(name, lr=0.1, momentum=0.9)


@pytest.mark.parametrize("name", MOMENTUM)
def test_beta_out_of_range(name):
    for beta in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="beta"):
            dopt.algorithms.make(name, lr=0.1, beta=beta)


def test_unknown_algorithm():
    with pytest.raises(ValueError, match=r"unknown algorithm 'adam'.*edm"):
        dopt.algorithms.make("adam")


@pytest.mark.parametrize(
    ("name", "base", "extra"),
    [
        ("choco_dsgd", "dsgd", {}),
        ("choco_ed", "ed", {}),
        ("choco_edm", "edm", {}),
        ("sgp", "dmsgd", {}),
        ("push_diging", "dsgt", {"atc": False}),
    ],
)
def test_reduces_to_its_base_method(name, base, extra, random_W):
    """No compression with gamma = 1 is the uncompressed method; push-sum on a doubly
    stochastic W (weights stay 1) is DmSGD, and Push-DIGing is DSGT in its one-round form."""
    n, d, steps = random_W.shape[0], 3, 15
    oracle = LinearOracle(n, d, steps, seed=11)
    x0 = np.random.default_rng(12).standard_normal((n, d))
    hp = hyper(name, compression="none", gamma=1.0) if name in COMPRESSED else hyper(name)
    got, _ = run_vectorised(dopt.algorithms.make(name, **hp), random_W, x0, oracle, steps)
    hp_base = {k: v for k, v in hp.items() if k not in ("compression", "gamma")} | extra
    want, _ = run_vectorised(dopt.algorithms.make(base, **hp_base), random_W, x0, oracle, steps)
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-12, atol=1e-13)


def test_names_follow_paper_order():
    assert names()[:8] == ["dsgd", "dmsgd", "decentlam", "qg_dsgdm", "dsgt", "dsgt_hb", "ed", "edm"]
    assert {"extra", "nids", "mt"} <= set(names()[8:])
