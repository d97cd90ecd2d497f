"""The C kernels (every instruction-set variant this CPU runs) equal the Python updates."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

import decentopt as dopt
from decentopt import native
from decentopt.comm import SimulatedCommunicator
from decentopt.comm.base import map_then_mix
from decentopt.comm.mixers import NativeMixer
from decentopt.comm.mixers import native as native_mixer
from decentopt.topology.circulant import CirculantTopology
from decentopt.updates import KINDS, FusedUpdate

LIB = native.library()[0]
needs_library = pytest.mark.skipif(LIB is None, reason=f"no native kernels: {native.library()[1]}")
VARIANTS = LIB.variants if LIB is not None else ()


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks narrow enough that a small state has several."""
    monkeypatch.setattr(native_mixer, "ROW_BYTES", 48 * 8)


ALGORITHMS = [
    ("dsgd", {}),
    ("dmsgd", {"beta": 0.8}),
    ("dmsgd", {"beta": 0.8, "nesterov": True, "dampening": False}),
    ("ed", {}),
    ("edm", {"beta": 0.9}),
    ("edm", {"beta": 0.7, "nesterov": True}),
    ("edm", {"beta": 0.7, "dampening": False}),
    ("edm", {"beta": 0.5, "nesterov": True, "dampening": False}),
]


class Counting(SimulatedCommunicator):
    """The native mixer of a given variant, counting the fused steps it takes."""

    def __init__(self, topology, isa):
        super().__init__(topology, kernel="native")
        self.mixers = (NativeMixer(topology, isa=isa),)
        self.fused = 0

    def mix_map(self, fn, tensors, scalars=()):
        before = self.stats.rounds
        result = super().mix_map(fn, tensors, scalars)
        self.fused += isinstance(fn, FusedUpdate) and self.stats.rounds == before + 1
        return result


@needs_library
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("graph", ["ring", "exponential"])
@pytest.mark.parametrize(("name", "options"), ALGORITHMS)
def test_the_native_kernel_of_every_update_equals_update_then_mix(
    small_blocks, name, options, graph, dtype, isa
):
    topo = getattr(dopt.topology, graph)(64)
    alg = dopt.algorithms.make(name, lr=0.05, **options)
    fused = Counting(topo, isa)
    plain = SimulatedCommunicator(topo, kernel="shift")
    gen = torch.Generator().manual_seed(0)
    # 1024 columns: aligned rows (vector path); 1000: unaligned rows and a narrow last block
    for cols in (1024, 1000):
        x0 = torch.randn(64, cols, generator=gen, dtype=dtype)
        a = b = alg.init(x0)
        for _ in range(3):
            g = torch.randn(64, cols, generator=gen, dtype=dtype)
            a, b = alg.step(a, g, fused), alg.step(b, g, plain)
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        torch.testing.assert_close(a.tensors(), b.tensors(), rtol=tol, atol=tol)
    assert fused.stats == plain.stats
    assert fused.fused == 6  # every step through the C kernel


def test_updates_are_declared_by_the_rules_and_their_kinds_are_the_librarys():
    # every kind is one the library implements, in its order (api.c's list)
    api = (native.build.HERE / "api.c").read_text()
    assert " ".join(KINDS) in api
    assert native.UPDATE_KINDS == tuple(KINDS)
    edm = dopt.algorithms.make("edm", lr=0.1, nesterov=True, dampening=False)
    assert edm.fused == FusedUpdate("edm", ("psi", "m"), ("lr", "beta"), True, False)
    assert dopt.algorithms.make("nids", lr=0.1, c=0.5).fused is None  # W~ is not W
    assert dopt.algorithms.make("nids", lr=0.1, c=1.0).fused.kind == "correct"
    assert dopt.algorithms.make("dsgd", lr=0.1, gossip="push_sum").fused is None
    with pytest.raises(ValueError, match="takes 2 scalar"):
        FusedUpdate("edm", ("psi", "m"), ("lr",))
    with pytest.warns(DeprecationWarning, match="declares its update"):
        from decentopt.updates import fused_update
    from decentopt.updates import edm_update

    found = fused_update(functools.partial(edm_update, nesterov=True, dampening=False))
    assert found is not None and found[0].kind == "edm" and found[1:] == (True, False)
    assert fused_update(torch.add) is None


@needs_library
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("graph", ["ring", "exponential"])
@pytest.mark.parametrize("cols", [1024, 1000])
def test_the_native_mix_equals_the_shift_kernel(graph, dtype, cols, isa):
    topo = getattr(dopt.topology, graph)(64)
    z = torch.randn(64, cols, dtype=dtype)
    mixer = NativeMixer(topo, isa=isa)
    want = SimulatedCommunicator(topo, kernel="shift").mix(z)
    torch.testing.assert_close(mixer.mix(z, None, 0), want, rtol=1e-6, atol=1e-6)
    # a non-contiguous state is mixed too (through a contiguous copy)
    wide = torch.randn(64, 2 * cols, dtype=dtype)
    torch.testing.assert_close(
        mixer.mix(wide[:, ::2], None, 0),
        SimulatedCommunicator(topo, kernel="shift").mix(wide[:, ::2]),
    )


@needs_library
def test_the_fused_step_is_the_same_at_any_thread_count():
    """A narrow state splits its rows among threads (each recomputes a halo of rows):
    the numbers must not depend on how many threads there are."""
    topo = dopt.topology.ring(64)
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    x0, g = torch.randn(64, 40), torch.randn(64, 40)
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(alg.step(alg.init(x0), g, SimulatedCommunicator(topo, "native")))
    finally:
        torch.set_num_threads(before)
    for other in results[1:]:
        for key, value in results[0].tensors().items():
            assert torch.equal(value, other.tensors()[key])
    want = alg.step(alg.init(x0), g, SimulatedCommunicator(topo, kernel="shift"))
    torch.testing.assert_close(results[0].x, want.x, rtol=1e-5, atol=1e-5)


@needs_library
def test_a_small_ring_stored_dense_takes_the_kernels_for_large_states_only(monkeypatch):
    """ring(16) is stored as a dense W (circulant from 64 agents): found circulant, its
    large states are fused; a graph that is not circulant is left to the GEMM."""
    ring = dopt.topology.ring(16)
    assert not isinstance(ring, CirculantTopology)
    comm = SimulatedCommunicator(ring)
    assert [m.name for m in comm.mixers] == ["cuda", "native", "dense"]
    assert comm.mixers[1].stencil == ((0, 0.5), (1, 0.25), (15, 0.25))
    assert comm.mixer_for(torch.empty(16, 300)).name == "dense"
    monkeypatch.setattr(native_mixer, "MIN_BYTES", 0)
    assert comm.mixer_for(torch.empty(16, 300)).name == "native"
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    x0, g = torch.randn(16, 300, dtype=torch.float64), torch.randn(16, 300, dtype=torch.float64)
    got = alg.step(alg.init(x0), g, comm)
    want = alg.step(alg.init(x0), g, SimulatedCommunicator(ring, kernel="dense"))
    for a, b in zip(got[:-1], want[:-1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    z = torch.randn(16, 300, dtype=torch.float64)
    torch.testing.assert_close(comm.mix(z), ring.W @ z, rtol=1e-12, atol=1e-12)
    assert [m.name for m in SimulatedCommunicator(dopt.topology.star(16)).mixers] == ["dense"]


def test_without_the_library_auto_mixes_with_torch_and_native_says_why(monkeypatch):
    monkeypatch.setattr(native, "library", lambda: (None, "no C compiler ('cc' is not on PATH)"))
    monkeypatch.setattr(native_mixer, "MIN_BYTES", 0)
    topo = dopt.topology.ring(64)
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    x0, g = torch.randn(64, 100), torch.randn(64, 100)
    auto = SimulatedCommunicator(topo)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "auto" falls back without a word
        got = alg.step(alg.init(x0), g, auto)
    assert auto.mixer_for(x0).name == "shift"
    want = alg.step(alg.init(x0), g, SimulatedCommunicator(topo, kernel="shift"))
    for key, value in got.tensors().items():
        assert torch.equal(value, want.tensors()[key])
    asked = SimulatedCommunicator(topo, kernel="native")
    with pytest.raises(ValueError, match="kernel='native' cannot mix this state: no C compiler"):
        asked.mix(x0)


def test_the_native_mixer_refuses_what_it_cannot_take():
    mixer = NativeMixer(dopt.topology.ring(64))
    assert "float32/float64" in mixer.supports(torch.zeros(64, 3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="needs a circulant topology"):
        NativeMixer(dopt.topology.star(16))


def scaled_difference(x, y, a):
    """An update with no C kernel: mixed after it is computed."""
    return x - a * y, x * y


@needs_library
def test_an_update_without_a_kernel_is_updated_then_mixed_natively():
    topo = dopt.topology.ring(64)
    comm = SimulatedCommunicator(topo, kernel="native")
    x, y = torch.randn(64, 50), torch.randn(64, 50)
    got = comm.mix_map(scaled_difference, (x, y), (0.3,))
    want = map_then_mix(SimulatedCommunicator(topo, "shift"), scaled_difference, (x, y), (0.3,))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    assert comm.stats.rounds == 1
