"""Methods as update rules composed with gossips: every pair runs or is refused in one line,
the published pairs are their composed forms, and each composition keeps the mathematics it
should (identities with exact mixing, average dynamics, exactness with exact gradients)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.algorithms import ALIASES, REGISTRY, gossips_for, make, resolve
from decentopt.algorithms.gossips import Choco, MultiRound, PushSum, parse
from tests.algorithms.reference import combine
from tests.algorithms.test_common import LinearOracle, run_vectorised

RULES = [name for name in dopt.algorithms.names() if name in REGISTRY]


def rule_hp(name: str, **extra) -> dict:
    hp = {"lr": 0.05} | ({"beta": 0.8} if resolve(name).uses_momentum else {})
    return hp | extra


def pairs(gossip: str) -> list[tuple[str, dict]]:
    """Every rule that takes ``gossip``, with the switches it needs for it."""
    out = []
    for name in RULES:
        for entry in gossips_for(name):
            if entry.split(" ")[0] == gossip:
                switch = {"atc": False} if "(atc=False)" in entry else {}
                out.append((name, switch))
    return out


@pytest.fixture(scope="module")
def random_W() -> np.ndarray:
    return dopt.topology.erdos_renyi(7, 0.4, seed=3).W.numpy()


def trajectory(alg, W, steps=15, seed=11):
    n, d = (W.n if isinstance(W, dopt.topology.Graph) else W.shape[0]), 3
    oracle = LinearOracle(n, d, steps, seed=seed)
    x0 = np.random.default_rng(seed + 1).standard_normal((n, d))
    return run_vectorised(alg, W, x0, oracle, steps)


def test_every_gossip_is_offered_to_the_rules_it_suits():
    assert {name for name, _ in pairs("choco")} >= {"dsgd", "dmsgd", "ed", "edm", "nids", "mt"}
    assert {name for name, _ in pairs("push_sum")} == {
        "dsgd",
        "dmsgd",
        "qg_dsgdm",
        "dsgt",
        "dsgt_hb",
    }
    assert len(pairs("multi_round")) == len(RULES) - 2  # all but relaying and AD-PSGD
    assert gossips_for("relaysgd") == gossips_for("ad_psgd") == ["exact"]
    assert gossips_for("sgp") == ["push_sum"]


@pytest.mark.parametrize(("name", "switch"), pairs("choco"))
def test_choco_without_compression_is_exact_mixing(name, switch, random_W):
    """``choco(none, gamma=1)`` mixes with W itself: the rule's own iterates (to rounding)."""
    hp = rule_hp(name, **switch)
    got, _ = trajectory(make(name, gossip="choco(none, gamma=1)", **hp), random_W)
    want, _ = trajectory(make(name, **hp), random_W)
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize(("name", "switch"), pairs("push_sum"))
def test_push_sum_on_a_doubly_stochastic_graph_is_exact_mixing(name, switch, random_W):
    """Over a symmetric W the push-sum weights stay 1: the rule's own iterates."""
    hp = rule_hp(name, **switch)
    got, _ = trajectory(make(name, gossip="push_sum", **hp), random_W)
    want, _ = trajectory(make(name, **hp), random_W)
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize(("name", "switch"), pairs("multi_round"))
def test_multi_round_is_the_rule_over_the_matrix_power(name, switch, random_W):
    """``multi_round(3, acceleration="none")`` is the rule over W^3; one round is the rule."""
    hp = rule_hp(name, **switch)
    cube = dopt.topology.from_matrix(np.linalg.matrix_power(random_W, 3))
    got, comm = trajectory(make(name, gossip="multi_round(3, acceleration=none)", **hp), random_W)
    want, plain = trajectory(make(name, **hp), cube)
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-10, atol=1e-12)
    assert comm.stats.rounds == 3 * plain.stats.rounds
    one, _ = trajectory(make(name, gossip="multi_round(1)", **hp), random_W)
    base, _ = trajectory(make(name, **hp), random_W)
    np.testing.assert_array_equal(one[-1], base[-1])


@pytest.mark.parametrize("alias", list(ALIASES))
def test_each_published_pair_is_its_composed_form_bit_for_bit(alias):
    """``sgp`` is DmSGD with push-sum, ``choco_edm`` EDM with CHOCO-gossip, ...: the alias
    builds exactly the composed method (bit-identical iterates, compression on)."""
    entry = ALIASES[alias]
    extra = {"compression": "qsgd(3)", "gamma": 0.6} if entry.gossip is Choco else {}
    graph = (
        dopt.topology.random_directed(7, 0.3, seed=4)
        if entry.gossip is PushSum
        else dopt.topology.ring(7)
    )
    hp = rule_hp(entry.rule)
    named, _ = trajectory(make(alias, **hp, **extra), graph)
    composed = make(entry.rule, gossip=entry.gossip(**extra), **hp, **entry.fixed)
    named_alg = make(alias, **hp, **extra)
    assert (named_alg.rule, named_alg.gossip) == (composed.rule, composed.gossip)
    got, _ = trajectory(composed, graph)
    np.testing.assert_array_equal(named[-1], got[-1])


def deterministic(n: int = 12):
    return dopt.problems.Quadratic.paper(n=n, d=10, p=20, c=0.5, sigma2=0.0, repetitions=1, seed=1)


@pytest.mark.parametrize(
    ("name", "switch"),
    [("ed", {}), ("edm", {}), ("nids", {}), ("extra", {}), ("dsgt", {"atc": False})],
)
def test_exact_rules_stay_exact_under_compressed_gossip(name, switch):
    """With exact gradients the bias-corrected rules reach x* itself through CHOCO-gossip
    at 5 bits per entry (ED/EDM/NIDS/EXTRA, and gradient tracking whose tracker travels
    compressed in the same message): the compression error vanishes as X_hat catches up."""
    prob = deterministic()
    alg = make(name, gossip="choco(qsgd(4), gamma=0.4)", **rule_hp(name, **switch))
    iterations = 6000 if name == "dsgt" else 2500
    res = dopt.simulate(alg, prob, dopt.topology.ring(prob.n), iterations, seed=0)
    assert np.all(res.final("dist_to_opt") < 1e-12)


def test_gradient_tracking_with_momentum_is_exact_over_a_directed_graph():
    """DSGT-HB in one round, composed with push-sum (a pairing of this library): with exact
    gradients it reaches x* over a column- but not row-stochastic graph, as Push-DIGing
    does; push-sum DSGD keeps a heterogeneity bias there."""
    prob = deterministic()
    graph = dopt.topology.random_directed(prob.n, 0.2, seed=2)
    assert not graph.doubly_stochastic
    hb = make("dsgt_hb", gossip="push_sum", lr=0.05, beta=0.8, atc=False)
    res = dopt.simulate(hb, prob, graph, 2500, seed=0)
    assert np.all(res.final("dist_to_opt") < 1e-20)
    dsgd = dopt.simulate(make("dsgd", gossip="push_sum", lr=0.05), prob, graph, 2500, seed=0)
    assert np.all(dsgd.final("dist_to_opt") > 1e-3)


@pytest.mark.parametrize(("name", "switch"), pairs("push_sum"))
def test_the_push_sum_average_follows_the_centralized_method(name, switch):
    """Over a column-stochastic graph the de-biased average ``sum U / sum w`` of a push-sum
    rule moves as the rule's average does under a doubly stochastic W: centralized SGD
    (momentum SGD) on the mean gradient, for the rules that mix their iterate."""
    if name in ("dsgt", "dsgt_hb", "qg_dsgdm"):
        pytest.skip("a tracker or a momentum of differences: not a plain average recursion")
    graph = dopt.topology.random_directed(7, 0.3, seed=4)
    n, d, steps = graph.n, 3, 12
    oracle = LinearOracle(n, d, steps, seed=6)
    hp = rule_hp(name, **switch)
    alg = make(name, gossip="push_sum", **hp)
    comm = dopt.comm.SimulatedCommunicator(graph)
    state = alg.init(torch.from_numpy(np.random.default_rng(7).standard_normal((n, d))))
    xbar = state.x.numpy().mean(0)
    m = np.zeros(d)
    beta = hp.get("beta", 0.0)
    for t in range(steps):
        grads = oracle.stacked(t, state.x)
        m = beta * m + (1 - beta) * grads.numpy().mean(0)
        xbar = xbar - hp["lr"] * (m if beta else grads.numpy().mean(0))
        state = alg.step(state, grads, comm)
        u = (state.x * state.w).numpy()
        np.testing.assert_allclose(u.sum(0) / state.w.numpy().sum(), xbar, rtol=1e-10, atol=1e-12)


def test_a_tracker_travels_with_the_iterate_in_one_compressed_message():
    """DSGT without ATC sends [X - alpha Y, Y] in one round; under CHOCO each keeps its own
    public copies, against a per-agent loop of CHOCO-gossip on both channels."""
    W = dopt.topology.ring(5).W.numpy()
    n, d, steps, alpha, spec, gamma = 5, 4, 6, 0.05, "top_k(0.5)", 0.6
    oracle = LinearOracle(n, d, steps, seed=3)
    x0 = np.random.default_rng(4).standard_normal((n, d))
    alg = make("dsgt", lr=alpha, atc=False, gossip=f"choco({spec}, gamma={gamma})")
    got, comm = run_vectorised(alg, W, x0, oracle, steps)
    assert comm.stats.rounds == steps  # one message a step for both tensors
    codec = dopt.compression.parse(spec)

    def compress_both(a, b, i, t):  # both channels are rows of one message
        rows = torch.from_numpy(np.stack([a, b]))
        data = codec.encode(rows, i, t)
        out = codec.decode(data, i, t, 2, d, rows.dtype).numpy()
        return out[0], out[1]

    x = [v.copy() for v in x0]
    hats = [[np.zeros(d) for _ in range(n)] for _ in range(2)]
    sums = [[np.zeros(d) for _ in range(n)] for _ in range(2)]
    wy = [np.zeros(d) for _ in range(n)]
    y, g_prev = None, None
    for t in range(steps):
        g = [oracle.agent(t, i, x[i]) for i in range(n)]
        y = g if t == 0 else [wy[i] + g[i] - g_prev[i] for i in range(n)]
        sent = [[x[i] - alpha * y[i] for i in range(n)], y]
        q = [[None] * n, [None] * n]
        for i in range(n):
            q[0][i], q[1][i] = compress_both(sent[0][i] - hats[0][i], sent[1][i] - hats[1][i], i, t)
        mixed = []
        for c in range(2):
            hats[c] = [hats[c][i] + q[c][i] for i in range(n)]
            sums[c] = [sums[c][i] + combine(W, q[c], i) for i in range(n)]
            mixed.append([sent[c][i] + gamma * (sums[c][i] - hats[c][i]) for i in range(n)])
        x, wy, g_prev = mixed[0], mixed[1], g
        np.testing.assert_allclose(got[t], np.stack(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: make("edm", gossip="push_sum"), r"edm cannot take push_sum gossip: .*symmetric W"),
        (lambda: make("dsgt", gossip="choco(sign)"), r"dsgt cannot take choco.*atc=False"),
        (lambda: make("relaysgd", gossip="choco(sign)"), r"relaysgd cannot take choco.*its own"),
        (lambda: make("sgp", gossip="choco(sign)"), r"sgp is dmsgd with push_sum gossip"),
        (lambda: make("edm", gossip="chocoo"), r"unknown gossip 'chocoo'; did you mean 'choco'"),
        (lambda: make("edm", gossip="choco(sign, gama=0.5)"), r"did you mean 'gamma'"),
        (lambda: make("edm", gossip="choco(sign, gamma=2)"), r"gamma must be in \(0, 1\]"),
        (lambda: make("edm", gossip="multi_round(0)"), r"rounds must be a whole number"),
        (lambda: make("edm", gossip=3), r"gossip must be text"),
    ],
)
def test_pairs_that_cannot_work_are_refused_in_one_line(call, message):
    with pytest.raises((TypeError, ValueError), match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_a_gossip_that_needs_a_static_graph_is_refused_on_a_time_varying_one():
    prob = deterministic(8)
    alg = make("edm", gossip="choco(qsgd(4), gamma=0.4)")
    with pytest.raises(ValueError, match=r"edm\+choco runs on one fixed W.*static graph"):
        dopt.simulate(alg, prob, dopt.topology.one_peer_exponential(8), 10)
    # and on a directed graph: it needs a symmetric W, which its gossip cannot undo
    with pytest.raises(ValueError, match=r"edm\+choco runs on a symmetric.*undirected graph"):
        dopt.simulate(alg, prob, dopt.topology.directed_ring(8), 10)


def test_gossips_parse_from_text_and_print_back():
    g = parse("choco(top_k(0.1), gamma=0.4)")
    assert isinstance(g, Choco) and g.gamma == 0.4 and g.compression.ratio == 0.1
    assert parse(g.label()) == g
    assert parse("multi_round(4, acceleration='none')") == MultiRound(4, "none")
    assert parse(" push_sum ") == PushSum()
    alg = make("choco_edm", compression="qsgd(4)", gamma=0.3, lr=0.05)
    assert alg.name == "choco_edm" and alg.gamma == 0.3 and alg.beta == 0.9
    assert make("edm", gossip="choco(sign, gamma=0.05)").name == "edm+choco"
    assert make("edm", gossip="exact") == make("edm")  # exact mixing is the bare rule


@pytest.mark.parametrize(
    ("name", "gossip"),
    [
        ("dsgd", None),
        ("dsgt", None),
        ("dsgd", "multi_round(3)"),
        ("dsgt", "multi_round(3, acceleration='none')"),
        ("edm", "multi_round(2)"),
        ("dsgd", "delayed(2)"),
        ("dmsgd", "push_sum"),
    ],
)
def test_rounds_per_step_is_what_a_step_sends(name, gossip):
    """A method's declared rounds per step equal the rounds its communicator counts in a step
    after the first (DSGT mixes the iterate and the tracker in two rounds, its first step
    only the iterate; multi_round(k) makes k rounds of each)."""
    alg = make(name, gossip=gossip, **rule_hp(name))
    W = dopt.topology.ring(6)
    _, first = trajectory(alg, W, steps=1)
    _, comm = trajectory(alg, W, steps=4)
    assert comm.stats.rounds - first.stats.rounds == 3 * alg.rounds_per_step
    rounds = {"dsgt": 2}.get(name, 1) * {"multi_round(2)": 2}.get(str(gossip), 1)
    assert alg.rounds_per_step == rounds * (3 if "(3" in str(gossip) else 1)


@pytest.mark.parametrize(
    ("gossip", "changes", "expected"),
    [
        ("choco(qsgd(4), gamma=0.3)", {"gamma": 0.5}, "choco(qsgd(4), gamma=0.5)"),
        ("multi_round(2)", {"rounds": 3}, "multi_round(3)"),
        ("delayed(1)", {"tau": 2, "lr": 0.02}, "delayed(2)"),
    ],
)
def test_with_hyperparams_changes_the_gossips_part_too(gossip, changes, expected):
    """``with_hyperparams`` hands the gossip its own keys and the rule the rest: the result
    runs as the method made with those settings from the start, bit for bit."""
    alg = make("dmsgd", lr=0.05, beta=0.8, gossip=gossip)
    changed = alg.with_hyperparams(**changes)
    rule = {"lr": changes.get("lr", 0.05), "beta": 0.8}
    made = make("dmsgd", gossip=expected, **rule)
    assert changed.hyperparams() == made.hyperparams()
    assert alg.hyperparams() != changed.hyperparams()
    W = dopt.topology.ring(6)
    got, _ = trajectory(changed, W, steps=6)
    want, _ = trajectory(made, W, steps=6)
    np.testing.assert_array_equal(got[-1], want[-1])
