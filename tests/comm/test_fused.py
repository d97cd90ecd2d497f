"""The fused update-and-mix paths of ``kernel="compiled"`` equal updating, then mixing."""

from __future__ import annotations

import functools
import shutil
import warnings

import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator, native
from decentopt.comm import simulated as simulated_module
from decentopt.comm.base import map_then_mix
from decentopt.topology.circulant import CirculantTopology

HAS_CC = shutil.which("cc") is not None
run = native.run


@pytest.fixture
def small_blocks(monkeypatch):
    """Fuse states of any size, in blocks narrow enough that a state has several."""
    monkeypatch.setattr(simulated_module, "_FUSED_MIN_BYTES", 0)
    monkeypatch.setattr(simulated_module, "_FUSED_ROW_BYTES", 48 * 8)


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


@pytest.mark.skipif(not HAS_CC, reason="no C compiler to build the native kernels")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("graph", "kernel"), [("ring", "auto"), ("exponential", "compiled")])
@pytest.mark.parametrize(("name", "options"), ALGORITHMS)
def test_the_native_kernel_of_every_update_equals_update_then_mix(
    small_blocks, name, options, graph, kernel, dtype, monkeypatch
):
    assert native.library()[0] is not None, native.library()[1]
    calls = []
    monkeypatch.setattr(native, "run", lambda *a: calls.append(1) or run(*a))
    topo = getattr(dopt.topology, graph)(64)
    alg = dopt.algorithms.make(name, lr=0.05, **options)
    fused = SimulatedCommunicator(topo, kernel=kernel)
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
        for got, want in zip(a[:-1], b[:-1], strict=True):
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    assert fused.stats == plain.stats
    assert len(calls) == 6 and fused.kernel == kernel  # every step native, nothing fell back


def test_native_updates_are_looked_up_by_function_and_constant_options():
    from decentopt.algorithms.edm import edm_update

    found = native.native_update(functools.partial(edm_update, nesterov=True, dampening=False))
    assert found is not None and found[0].kind == "edm" and found[1:] == (True, False)
    assert native.native_update(functools.partial(edm_update, 0.1)) is None
    assert native.native_update(torch.add) is None
    with pytest.raises(ValueError, match="no native update 'adam'"):
        native.implements("adam", inputs=1, scalars=0, outputs=1)


def scaled_difference(x: torch.Tensor, y: torch.Tensor, a) -> tuple[torch.Tensor, torch.Tensor]:
    """An update the library has no C kernel for: ``(x - a y, x * y)``."""
    return x - a * y, x * y


def test_any_elementwise_update_is_fused_through_torch_compile(small_blocks):
    topo = dopt.topology.ring(64)
    fused = SimulatedCommunicator(topo, kernel="compiled")
    plain = SimulatedCommunicator(topo, kernel="shift")
    x, y = torch.randn(64, 200), torch.randn(64, 200)
    for a in (0.1, 0.3):  # a new scalar must not change the answer (nor recompile)
        got = fused.mix_map(scaled_difference, (x, y), (a,))
        want = map_then_mix(plain, scaled_difference, (x, y), (a,))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    assert len(fused._fused) == 1
    assert fused.stats.rounds == plain.stats.rounds == 2


def test_without_a_compiler_the_fused_step_falls_back_with_warnings(small_blocks, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler")
    native.library.cache_clear()

    def broken(fn, **kw):
        def call(*args):
            raise RuntimeError("no compiler here")

        return call

    monkeypatch.setattr(torch, "compile", broken)
    try:
        topo = dopt.topology.ring(64)
        alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
        comm = SimulatedCommunicator(topo, kernel="compiled")
        x0, g = torch.randn(64, 100, dtype=torch.float64), torch.randn(64, 100, dtype=torch.float64)
        with (
            pytest.warns(RuntimeWarning, match="native fused kernels are not available .*no C"),
            pytest.warns(RuntimeWarning, match="torch.compile of the update and mix failed"),
        ):
            got = alg.step(alg.init(x0), g, comm)
        want = alg.step(alg.init(x0), g, SimulatedCommunicator(topo, kernel="shift"))
        for a, b in zip(got[:-1], want[:-1], strict=True):
            torch.testing.assert_close(a, b)
        assert comm.kernel == "shift" and comm.stats.rounds == 1
        # kernel="auto" asked for nothing compiled: it falls back without a word
        auto = SimulatedCommunicator(topo, kernel="auto")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            again = alg.step(alg.init(x0), g, auto)
        for a, b in zip(again[:-1], want[:-1], strict=True):
            torch.testing.assert_close(a, b)
    finally:
        monkeypatch.undo()
        native.library.cache_clear()


def test_mix_map_needs_a_tensor():
    with pytest.raises(ValueError, match="at least one tensor"):
        SimulatedCommunicator(dopt.topology.ring(8)).mix_map(scaled_difference, ())


@pytest.mark.skipif(not HAS_CC, reason="no C compiler to build the native kernels")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("graph", ["ring", "exponential"])
@pytest.mark.parametrize("cols", [1024, 1000])
def test_the_native_mix_equals_the_shift_kernel(small_blocks, graph, dtype, cols, monkeypatch):
    calls = []
    mix = native.mix
    monkeypatch.setattr(native, "mix", lambda *a: calls.append(1) or mix(*a))
    topo = getattr(dopt.topology, graph)(64)
    z = torch.randn(64, cols, dtype=dtype)
    got = SimulatedCommunicator(topo).mix(z)
    want = SimulatedCommunicator(topo, kernel="shift").mix(z)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert calls == [1]
    # a non-contiguous state is mixed too (through a contiguous copy)
    wide = torch.randn(64, 2 * cols, dtype=dtype)
    torch.testing.assert_close(
        SimulatedCommunicator(topo).mix(wide[:, ::2]),
        SimulatedCommunicator(topo, kernel="shift").mix(wide[:, ::2]),
    )


@pytest.mark.skipif(not HAS_CC, reason="no C compiler to build the native kernels")
def test_the_fused_step_is_the_same_at_any_thread_count(small_blocks):
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
            results.append(alg.step(alg.init(x0), g, SimulatedCommunicator(topo)))
    finally:
        torch.set_num_threads(before)
    for other in results[1:]:
        for a, b in zip(results[0][:-1], other[:-1], strict=True):
            assert torch.equal(a, b)
    want = alg.step(alg.init(x0), g, SimulatedCommunicator(topo, kernel="shift"))
    torch.testing.assert_close(results[0].x, want.x, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not HAS_CC, reason="no C compiler to build the native kernels")
def test_a_small_ring_stored_dense_takes_the_kernels_for_large_states_only(small_blocks):
    """ring(16) is stored as a dense W (circulant from 64 agents): found circulant, its
    large states are fused; a graph that is not circulant is left to the GEMM."""
    ring = dopt.topology.ring(16)
    assert not isinstance(ring, CirculantTopology)
    comm = SimulatedCommunicator(ring)
    assert comm._circulant == ((0, 0.5), (1, 0.25), (15, 0.25))
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    x0, g = torch.randn(16, 300, dtype=torch.float64), torch.randn(16, 300, dtype=torch.float64)
    got = alg.step(alg.init(x0), g, comm)
    want = alg.step(alg.init(x0), g, SimulatedCommunicator(ring, kernel="dense"))
    for a, b in zip(got[:-1], want[:-1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    z = torch.randn(16, 300, dtype=torch.float64)
    torch.testing.assert_close(comm.mix(z), ring.W @ z, rtol=1e-12, atol=1e-12)
    assert SimulatedCommunicator(dopt.topology.star(16))._circulant is None
