"""The Triton kernels equal the Python updates: on a GPU, or in Triton's interpreter on the
CPU (``TRITON_INTERPRET=1``) where Triton is installed; skipped otherwise."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.comm.base import map_then_mix
from decentopt.comm.mixers import CudaMixer, cuda
from tests.comm.mixers.test_native import ALGORITHMS

HAS_TRITON = importlib.util.find_spec("triton") is not None
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")


@pytest.fixture
def kernels(monkeypatch):
    """The kernels built afresh: in the interpreter unless a GPU is there."""
    if DEVICE == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    sys.modules.pop("decentopt.comm.mixers._triton", None)  # decorated under this setting
    cuda.triton_kernel.cache_clear()
    yield
    sys.modules.pop("decentopt.comm.mixers._triton", None)
    cuda.triton_kernel.cache_clear()


class Triton(SimulatedCommunicator):
    def __init__(self, topology):
        super().__init__(topology, kernel="cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("graph", ["ring16", "ring", "exponential"])
@pytest.mark.parametrize(("name", "options"), ALGORITHMS)
def test_the_triton_kernel_of_every_update_equals_update_then_mix(
    kernels, name, options, graph, dtype
):
    topo = dopt.topology.ring(16) if graph == "ring16" else getattr(dopt.topology, graph)(64)
    alg = dopt.algorithms.make(name, lr=0.05, **options)
    fused, plain = (
        Triton(topo),
        SimulatedCommunicator(topo, kernel="shift" if graph != "ring16" else "dense"),
    )
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(topo.n, 300, generator=gen, dtype=dtype).to(DEVICE)
    a = b = alg.init(x0)
    for _ in range(2):
        g = torch.randn(topo.n, 300, generator=gen, dtype=dtype).to(DEVICE)
        a, b = alg.step(a, g, fused), alg.step(b, g, plain)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for got, want in zip(a[:-1], b[:-1], strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    assert fused.stats == plain.stats


def test_the_triton_mix_equals_the_shift_kernel(kernels):
    topo = dopt.topology.exponential(64)
    z = torch.randn(64, 3000, dtype=torch.float32).to(DEVICE)
    mixer = CudaMixer(topo)
    torch.testing.assert_close(
        mixer.mix(z, None, 0),
        SimulatedCommunicator(topo, kernel="shift").mix(z),
        rtol=1e-5,
        atol=1e-5,
    )


def scaled_difference(x, y, a):
    return x - a * y, x * y


def test_an_update_without_a_triton_kernel_is_updated_then_mixed(kernels):
    topo = dopt.topology.ring(64)
    x, y = torch.randn(64, 50).to(DEVICE), torch.randn(64, 50).to(DEVICE)
    got = Triton(topo).mix_map(scaled_difference, (x, y), (0.3,))
    want = map_then_mix(SimulatedCommunicator(topo, "shift"), scaled_difference, (x, y), (0.3,))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
