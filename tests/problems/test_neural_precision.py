"""Mixed precision, channels-last and compile options of the neural problem (CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.problems.neural import NeuralProblem


def tiny(precision: str = "float32", backend: str = "vmap", **kw) -> NeuralProblem:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 8 * 8, 10),
    ).float()  # other tests may have set float64 as the default dtype
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 1, 8, 8, generator=g, dtype=torch.float32)
    y = torch.randint(0, 10, (64,), generator=g)
    data = dopt.data.Dataset("toy", x, y, x[:8], y[:8], 10)
    shares = tuple(np.array_split(np.arange(64), 4))
    return NeuralProblem(
        model, data, shares, batch_size=8, backend=backend, precision=precision, **kw
    )


@pytest.mark.parametrize("backend", ["loop", "vmap"])
def test_bf16_autocast_keeps_float32_gradients_close_to_float32(backend):
    full = tiny("float32", backend)
    x = full.initial_point()
    g32, l32 = full.gradient_and_loss(x)
    half = tiny("bf16", backend)
    g16, l16 = half.gradient_and_loss(x)
    assert half.bf16 and not full.bf16 and g16.dtype == torch.float32
    rel = (g16 - g32).norm() / g32.norm()
    assert 1e-6 < rel < 5e-2  # bf16 changes the numbers (a real check), by a few per cent
    torch.testing.assert_close(l16, l32, rtol=3e-2, atol=3e-2)


def test_auto_precision_is_float32_on_the_cpu_and_channels_last_changes_nothing():
    assert not tiny("auto").bf16
    plain, last = tiny(), tiny(channels_last=True)
    x = plain.initial_point()
    torch.testing.assert_close(
        last.gradient_and_loss(x)[0], plain.gradient_and_loss(x)[0], rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ValueError, match="precision must be 'auto', 'float32' or 'bf16'"):
        tiny("fp16")


def test_a_failing_compile_warns_and_runs_eagerly(monkeypatch):
    def broken(fn):
        def call(*args):
            raise RuntimeError("no compiler here")

        return call

    monkeypatch.setattr(torch, "compile", broken)
    eager, compiled = tiny(), tiny(compile=True)
    x = eager.initial_point()
    with pytest.warns(RuntimeWarning, match="torch.compile of the gradient failed"):
        got = compiled.gradient_and_loss(x)[0]
    torch.testing.assert_close(got, eager.gradient_and_loss(x)[0])
    assert compiled.engine._compiled["failed"]  # eager from then on


@pytest.mark.parametrize("backend", ["loop", "vmap", "grouped"])
def test_agents_are_evaluated_in_one_call_per_batch_as_one_by_one(backend):
    problem = tiny(backend=backend)
    x = problem.initial_point()
    x = x + 0.1 * torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=x.dtype)
    batched = problem.evaluate_replicas(problem.engine, x, batch=5)
    one_by_one = []
    for row in x:
        model = tiny(backend="loop").model
        with torch.no_grad():
            for p, v in zip(model.parameters(), problem.views(row), strict=True):
                p.copy_(v)
        one_by_one.append(problem.evaluate(model))
    np.testing.assert_allclose(batched[0], [r[0] for r in one_by_one], rtol=1e-5)
    np.testing.assert_allclose(batched[1], [r[1] for r in one_by_one], rtol=0)
    assert len(set(np.round(batched[0], 6))) == problem.n  # the agents differ
