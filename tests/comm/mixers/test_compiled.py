"""``kernel="compiled"``: any elementwise update fused with the mix through torch.compile."""

from __future__ import annotations

import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.comm.base import map_then_mix
from decentopt.comm.mixers import compiled


def scaled_difference(x, y, a):
    """An update the library has no C kernel for: ``(x - a y, x * y)``."""
    return x - a * y, x * y


def test_any_elementwise_update_is_fused_through_torch_compile(monkeypatch):
    monkeypatch.setattr(compiled, "ROW_BYTES", 48 * 8)  # several blocks and a narrow last one
    topo = dopt.topology.ring(64)
    fused = SimulatedCommunicator(topo, kernel="compiled")
    plain = SimulatedCommunicator(topo, kernel="shift")
    x, y = torch.randn(64, 200), torch.randn(64, 200)
    for a in (0.1, 0.3):  # a new scalar must not change the answer (nor recompile)
        got = fused.mix_map(scaled_difference, (x, y), (a,))
        want = map_then_mix(plain, scaled_difference, (x, y), (a,))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    assert len(fused.mixers[0]._fused) == 1
    assert fused.stats.rounds == plain.stats.rounds == 2


def test_a_failing_compile_of_the_fused_step_falls_back_with_a_warning(monkeypatch):
    def broken(fn, **kw):
        def call(*args):
            raise RuntimeError("no compiler here")

        return call

    monkeypatch.setattr(torch, "compile", broken)
    topo = dopt.topology.ring(64)
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    comm = SimulatedCommunicator(topo, kernel="compiled")
    x0, g = torch.randn(64, 100), torch.randn(64, 100)
    with pytest.warns(RuntimeWarning, match="torch.compile of the update and mix failed"):
        got = alg.step(alg.init(x0), g, comm)
    want = alg.step(alg.init(x0), g, SimulatedCommunicator(topo, kernel="shift"))
    for a, b in zip(got[:-1], want[:-1], strict=True):
        torch.testing.assert_close(a, b)
    assert comm.mixers[0].failed and comm.stats.rounds == 1
