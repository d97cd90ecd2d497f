"""CHOCO's compressed round in the C kernels (every variant this CPU runs) equals a plain
reference: the operator's own ``compress``, then the public copies updated term by term."""

from __future__ import annotations

import pytest
import torch

import decentopt as dopt
from decentopt import native
from decentopt.comm import SimulatedCommunicator
from decentopt.comm.mixers import NativeMixer
from decentopt.compression import parse
from decentopt.compression._bits import kept_count

LIB = native.library()[0]
needs_library = pytest.mark.skipif(LIB is None, reason=f"no native kernels: {native.library()[1]}")
VARIANTS = LIB.variants if LIB is not None else ()
OPERATORS = [
    "top_k(0.3)",
    "top_k(0.01)",
    "top_k(1)",
    "qsgd(4)",
    "qsgd(1, seed=3)",
    "qsgd(7)",
    "sign",
]


def reference(codec, stencil, z, hat, s, gamma, round_=0):
    """``q = Q(z - hat)``, ``hat + q``, ``s = W hat`` afresh (float64 terms in stencil
    order; the ``s`` given is not read), ``z + gamma (s - hat)``: the kernel's
    arithmetic."""
    k = z.shape[-1]
    rows = (z - hat).to(z.dtype).reshape(z.shape[0], -1, k)
    q = codec.compress(rows, 0, round_).reshape(z.shape)
    hat = hat + q
    s = sum(weight * hat.roll(-offset, 0) for offset, weight in stencil)
    return z + gamma * (s - hat).to(z.dtype), hat, s


def dyadic(shape, dtype, gen, scale):
    """Values with few significant bits: every sum of squares is exact, in any order."""
    return (torch.randint(-300, 300, shape, generator=gen) / scale).to(dtype)


@needs_library
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("spec", OPERATORS)
@pytest.mark.parametrize(
    ("graph", "shape"),
    [
        ("ring", (5, 3)),  # rows shorter than a vector
        ("ring", (7, 1)),
        ("ring", (6, 2, 37)),  # several rows per agent, odd lengths
        ("ring", (4, 1500)),  # more than one chunk of 1024 columns
        ("exponential", (8, 3, 29)),
    ],
)
def test_the_fused_round_equals_the_reference(isa, dtype, spec, graph, shape):
    gen = torch.Generator().manual_seed(sum(shape))
    topo = getattr(dopt.topology, graph)(shape[0])
    mixer = NativeMixer(topo, isa=isa)
    codec = parse(spec)
    z = dyadic(shape, dtype, gen, 64.0)
    hat = dyadic(shape, torch.float64, gen, 256.0)
    s = dyadic(shape, torch.float64, gen, 32.0)
    want = reference(codec, mixer.stencil, z, hat, s, 0.3, round_=4)
    n = shape[0]
    got = mixer.choco(
        codec, z.reshape(n, -1), hat.reshape(n, -1).clone(), s.reshape(n, -1).clone(), shape[-1],
        0.3, 4,
    )  # fmt: skip
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.reshape(b.shape), b), (spec, dtype)


@needs_library
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("spec", ["top_k(0.1)", "qsgd(4)", "sign"])
def test_random_states_agree_to_rounding(dtype, spec):
    """Any values: the norm's sum in another order moves float64's last bits only."""
    gen = torch.Generator().manual_seed(1)
    topo = dopt.topology.ring(9)
    mixer = NativeMixer(topo)
    z = torch.randn(9, 333, dtype=dtype, generator=gen)
    hat = torch.randn(9, 333, dtype=torch.float64, generator=gen)
    s = torch.randn(9, 333, dtype=torch.float64, generator=gen)
    want = reference(parse(spec), mixer.stencil, z, hat, s, 0.5)
    got = mixer.choco(parse(spec), z, hat.clone(), s.clone(), 333, 0.5, 0)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-13 if dtype == torch.float64 else 0, atol=1e-13)


@needs_library
def test_ties_keep_the_lowest_indices_in_the_kernel_and_in_torch():
    row = torch.tensor([1.0, -1.0, 1.0, 2.0, -1.0, 1.0, 0.5])
    codec = parse("top_k(0.4)")  # 3 of 7: the 2, then the first two of the five 1s
    want = torch.tensor([1.0, -1.0, 0.0, 2.0, 0.0, 0.0, 0.0])
    assert torch.equal(codec.compress(row.view(1, 1, -1), 0, 0).view(-1), want)
    z = torch.stack([row, row.flip(0), -row, torch.zeros(7)])
    zeros = torch.zeros(4, 7, dtype=torch.float64)
    _, hat, _ = NativeMixer(dopt.topology.ring(4)).choco(codec, z, zeros.clone(), zeros, 7, 1.0, 0)
    assert torch.equal(hat[0].float(), want)
    assert torch.equal(hat[1].float(), torch.tensor([0.0, 1.0, -1.0, 2.0, 0.0, 0.0, 0.0]))
    assert torch.equal(hat[2].float(), -want)
    assert torch.equal(hat[3], zeros[3])  # all tied at zero: the first three, all zero


def test_top_k_selects_what_sorting_selects():
    """Without ties the set is ``topk``'s (the earlier definition); with ties, a stable sort's
    by descending magnitude (the lowest indices first)."""
    gen = torch.Generator().manual_seed(5)
    codec = parse("top_k(0.25)")
    for x in (
        torch.randn(6, 2, 41, generator=gen),
        torch.randint(-3, 4, (6, 2, 41), generator=gen),
    ):
        x = x.float()
        kept = (codec.compress(x, 0, 0) != 0) | ((x == 0) & codec.mask(x))
        order = x.abs().sort(dim=-1, descending=True, stable=True).indices[..., :11]
        assert torch.equal(kept, torch.zeros_like(kept).scatter_(-1, order, True))
    x = torch.randn(6, 2, 41, generator=gen)
    old = x.abs().topk(11, dim=-1).indices
    assert torch.equal(codec.mask(x), torch.zeros_like(x, dtype=torch.bool).scatter_(-1, old, True))


@needs_library
def test_the_path_taken_is_visible():
    x = torch.zeros(6, 10, dtype=torch.float32)
    hat, s = torch.zeros(6, 10, dtype=torch.float64), torch.zeros(6, 10, dtype=torch.float64)
    comm = SimulatedCommunicator(dopt.topology.ring(6), kernel="native")
    assert comm.choco_round(x, hat, s, "sign", 0.5) is not None
    assert comm.compressed_kernel == "native"
    why = comm.choco_round(x, hat, s, "random_k(0.5)", 0.5)
    assert why == comm.compressed_kernel and "not random_k" in why
    mixer, sign = NativeMixer(dopt.topology.ring(6)), parse("sign")
    assert "not torch.float16" in mixer.choco(sign, x.half(), hat, s, 10, 0.5, 0)
    assert "in float64, not torch.float32" in mixer.choco(sign, x, x, x, 10, 0.5, 0)
    shift = SimulatedCommunicator(dopt.topology.ring(6), kernel="shift")
    assert "shift mixer has no fused" in shift.choco_round(x, hat, s, "sign", 0.5)
    small = SimulatedCommunicator(dopt.topology.ring(6))  # auto: small states go to torch
    alg = dopt.algorithms.make("choco_dsgd", lr=0.1, compression="sign", gamma=0.5)
    alg.step(alg.init(x), torch.ones(6, 10), small)
    assert small.compressed_kernel.endswith("mixer has no fused compressed round")


def test_without_the_library_the_torch_path_runs(monkeypatch):
    """``DECENTOPT_NATIVE=0``: a state the C kernels would take is compressed, then mixed."""
    x, grad = torch.zeros(32, 1 << 16), torch.ones(32, 1 << 16)  # 8 MB: native under "auto"
    alg = dopt.algorithms.make("choco_dsgd", lr=0.1, compression="qsgd(4)", gamma=0.5)
    monkeypatch.setenv("DECENTOPT_NATIVE", "0")
    native.library.cache_clear()
    try:
        comm = SimulatedCommunicator(dopt.topology.ring(32))
        got = alg.step(alg.init(x), grad, comm).x
        assert comm.compressed_kernel.endswith("mixer has no fused compressed round")
    finally:
        monkeypatch.undo()
        native.library.cache_clear()
    plain = SimulatedCommunicator(dopt.topology.ring(32), kernel="shift")
    assert torch.equal(got, alg.step(alg.init(x), grad, plain).x)


@needs_library
@pytest.mark.parametrize("spec", ["top_k(0.1)", "qsgd(4)", "sign"])
def test_fused_runs_follow_the_plain_path_and_rerun_bit_identically(spec):
    target = torch.randn(8, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    runs = []
    for kernel in ("native", "native", "shift"):
        alg = dopt.algorithms.make("choco_edm", lr=0.05, compression=spec, gamma=0.2)
        comm = SimulatedCommunicator(dopt.topology.ring(8), kernel=kernel)
        state = alg.init(torch.zeros(8, 30, dtype=torch.float64))
        for _ in range(60):
            state = alg.step(state, state.x - target, comm)
        runs.append(state.x)
        assert (comm.compressed_kernel == "native") == (kernel == "native")
    assert torch.equal(runs[0], runs[1])  # the same seed, the same bits
    torch.testing.assert_close(runs[0], runs[2], rtol=1e-9, atol=1e-9)


@needs_library
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("spec", OPERATORS)
@pytest.mark.parametrize("shape", [(5, 3), (7, 1), (6, 2, 37), (4, 2500), (3, 1031)])
def test_the_round_of_dsgds_update_equals_the_round_of_its_output(isa, dtype, spec, shape):
    """``descent=(g, alpha)``: the kernel computes ``x - alpha g`` where it reads z (no
    contraction: ``x - (alpha g)`` rounded twice, as torch's separate multiply and
    subtract) and gives the round of that z bit for bit, on random (not dyadic) values."""
    gen = torch.Generator().manual_seed(sum(shape) + len(spec))
    n, k = shape[0], shape[-1]
    mixer = NativeMixer(dopt.topology.ring(n), isa=isa)
    codec = parse(spec)
    x = torch.randn(shape, dtype=dtype, generator=gen).reshape(n, -1)
    g = torch.randn(shape, dtype=dtype, generator=gen).reshape(n, -1)
    hat = torch.randn(x.shape, dtype=torch.float64, generator=gen)
    s = torch.randn(x.shape, dtype=torch.float64, generator=gen)
    alpha = 0.037
    z = x - g * torch.tensor(alpha, dtype=dtype)
    want = mixer.choco(codec, z, hat.clone(), s.clone(), k, 0.3, 3)
    got = mixer.choco(codec, x, hat.clone(), s.clone(), k, 0.3, 3, descent=(g, alpha))
    assert not isinstance(got, str)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b), (spec, dtype)


def _separate(x, g, alpha):
    """DSGD's update, not declared to the kernels: the update runs, then the round."""
    return dopt.updates.descend(x, g, alpha)


def _separate_step(self, state, grad, comm):
    """DSGD's step through :func:`_separate` instead of its declared update."""
    (x,) = comm.mix_map(_separate, (state.x, grad), (self.lr_at(state.t),))
    return state._replace(x=x, t=state.t + 1)


@needs_library
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("spec", ["top_k(0.1)", "top_k(0.01)", "qsgd(4)", "sign"])
def test_dsgd_steps_fused_with_the_round_equal_the_update_then_the_round(monkeypatch, dtype, spec):
    """CHOCO-SGD's step through the fused kernel (update and round in one) against the
    same step with the update run first, and against the torch path (``kernel="shift"``):
    dyadic iterates and gradients and a step of 1/4 make ``x - alpha g`` exact in every
    path, so 20 steps agree bit for bit with the separate update; with torch's
    compression and mixing to rounding."""
    from decentopt.algorithms import dsgd

    gen = torch.Generator().manual_seed(3)
    x0 = dyadic((8, 2, 45), dtype, gen, 64.0)
    grads = [dyadic((8, 2, 45), dtype, gen, 16.0) for _ in range(4)]
    runs, kernels = [], []
    for kernel, step in (("native", None), ("native", _separate_step), ("shift", None)):
        if step is not None:
            monkeypatch.setattr(dsgd.DSGD, "step", step)
        alg = dopt.algorithms.make("choco_dsgd", lr=0.25, compression=spec, gamma=0.4)
        comm = SimulatedCommunicator(dopt.topology.ring(8), kernel=kernel)
        state = alg.init(x0)
        for t in range(20):
            state = alg.step(state, grads[t % 4], comm)
        runs.append(state)
        kernels.append(comm.compressed_kernel)
        monkeypatch.undo()
    assert kernels[:2] == ["native", "native"] and kernels[2] != "native"
    for key, value in runs[0].tensors().items():
        assert torch.equal(value, runs[1].tensors()[key]), key
    assert runs[0].t == runs[1].t
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(runs[0].x, runs[2].x, rtol=tol, atol=tol)


@needs_library
def test_the_fused_update_falls_back_where_the_kernel_cannot_take_it():
    """random_k has no kernel: DSGD's update runs, then the torch round, the same numbers;
    a rule that mixes twice in one step is still refused."""
    gen = torch.Generator().manual_seed(4)
    x, g = torch.randn(6, 10, generator=gen), torch.randn(6, 10, generator=gen)
    alg = dopt.algorithms.make("choco_dsgd", lr=0.1, compression="random_k(0.5)", gamma=0.5)
    comm = SimulatedCommunicator(dopt.topology.ring(6), kernel="native")
    got = alg.step(alg.init(x), g, comm).x
    assert "not random_k" in comm.compressed_kernel
    plain = SimulatedCommunicator(dopt.topology.ring(6), kernel="shift")
    assert torch.equal(got, alg.step(alg.init(x), g, plain).x)
    channel = dopt.algorithms.make("choco_dsgd", lr=0.1, compression="sign").gossip.bind(
        alg.gossip.init(x, ("value",)), comm, x, ("value",)
    )
    channel.mix_map(alg.fused or alg.rule.fused, (x, g), (0.1,))
    with pytest.raises(ValueError, match="mixed twice in one step"):
        channel.mix_map(alg.rule.fused, (x, g), (0.1,))


@needs_library
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ratio", [0.05, 0.3, 0.77])
def test_top_k_cuts_through_ties_spread_over_many_vectors(isa, dtype, ratio):
    """Rows of 203 entries of four magnitudes (zeros of both signs among them): the kept
    count falls inside a run of ties that spans many blocks of 8 entries, which the kernel
    lists 8 at a time (AVX2) and refines; the lowest indices among the ties are kept, as
    ``compress`` keeps them, in every variant."""
    gen = torch.Generator().manual_seed(int(ratio * 100))
    n, k = 4, 203
    levels = torch.tensor([0.0, -0.0, 0.25, -0.5, 0.5, 1.0], dtype=dtype)
    z = levels[torch.randint(0, 6, (n, 2 * k), generator=gen)]
    hat = torch.zeros(n, 2 * k, dtype=torch.float64)
    mixer = NativeMixer(dopt.topology.ring(n), isa=isa)
    codec = parse(f"top_k({ratio})")
    want = reference(
        codec, mixer.stencil, z.view(n, 2, k), hat.view(n, 2, k), hat.view(n, 2, k), 0.5
    )
    got = mixer.choco(codec, z, hat.clone(), hat.clone(), k, 0.5, 0)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.reshape(b.shape), b)
    kept = (got[1].view(n, 2, k) != 0).sum(-1)
    assert (kept <= kept_count(ratio, k)).all() and (kept > 0).all()


@needs_library
@pytest.mark.parametrize("spec", ["top_k(0.2)", "qsgd(4)", "sign"])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(("graph", "n"), [("ring", 9), ("ring", 2), ("exponential", 8)])
def test_the_phases_in_either_order_at_any_thread_count(spec, threads, graph, n):
    """An agent's second phase runs as soon as its neighbours' first has run, within each
    thread's range of agents, and the others' after all first phases: every split of the
    agents into ranges gives the reference's numbers."""
    gen = torch.Generator().manual_seed(n + threads)
    topo = getattr(dopt.topology, graph)(n)
    mixer = NativeMixer(topo)
    codec = parse(spec)
    # few significant bits: the norms' sums are exact in any order, also torch's
    z, hat, s = (dyadic((n, 2, 300), torch.float64, gen, scale) for scale in (64.0, 256.0, 32.0))
    want = reference(codec, mixer.stencil, z.float(), hat, s, 0.3, round_=2)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = mixer.choco(
            codec, z.float().reshape(n, -1), hat.reshape(n, -1).clone(),
            s.reshape(n, -1).clone(), 300, 0.3, 2,
        )  # fmt: skip
    finally:
        torch.set_num_threads(before)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.reshape(b.shape), b)
