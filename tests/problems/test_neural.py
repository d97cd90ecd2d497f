from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.data import Dataset, dirichlet_split
from decentopt.problems.neural import NeuralProblem
from tests.algorithms.reference import run_reference
from tests.algorithms.test_common import hyper


def toy_data(samples: int = 120, seed: int = 0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 1, 4, 4, generator=g)
    y = (x.sum((1, 2, 3)) > 0).long() + 2 * (x[:, 0, 0, 0] > 0).long()
    return Dataset("toy", x[:90], y[:90], x[90:], y[90:], 4)


def tiny_cnn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(48, 4))


def full_batch_problem(n: int = 3, backend: str = "loop") -> NeuralProblem:
    data = toy_data()
    chunks = np.array_split(np.arange(90), n)  # equal shares, one full batch each
    return NeuralProblem(tiny_cnn(), data, tuple(chunks), batch_size=30, backend=backend)


def agent_gradient(problem: NeuralProblem, i: int, row: np.ndarray) -> np.ndarray:
    """Autograd on a fresh single model: the hand-computed gradient of agent i."""
    model = tiny_cnn()
    with torch.no_grad():
        for p, v in zip(model.parameters(), problem.views(torch.from_numpy(row)), strict=True):
            p.copy_(v)
    ix = torch.from_numpy(problem.sampler.indices[i])
    loss = F.cross_entropy(model(problem.data.x_train[ix]), problem.data.y_train[ix])
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([g.reshape(-1) for g in grads]).numpy().astype(np.float64)


@pytest.mark.parametrize("name", dopt.algorithms.names())
def test_steps_on_a_tiny_model_equal_the_hand_computed_update(name):
    torch.set_default_dtype(torch.float32)
    try:
        problem = full_batch_problem()
        topo = dopt.topology.ring(3, weights="metropolis")
        hp = hyper(name, lr=0.1)
        alg = dopt.algorithms.make(name, **hp)
        comm = SimulatedCommunicator(topo)
        state = alg.init(problem.initial_point())
        x0 = [row.numpy().astype(np.float64) for row in state.x]
        steps = 3
        got = []
        for _ in range(steps):
            grads, _ = problem.gradient_and_loss(state.x)
            state = alg.step(state, grads, comm)
            got.append(state.x.numpy().copy())
        ref = run_reference(
            name,
            hp,
            topo.W.numpy(),
            x0,
            lambda t, i, x: agent_gradient(problem, i, x.astype(np.float32)),
            steps,
        )
        for t in range(steps):
            np.testing.assert_allclose(got[t], np.stack(ref[t]), rtol=1e-4, atol=1e-5)
    finally:
        torch.set_default_dtype(torch.float64)


def test_loop_and_vmap_backends_agree():
    torch.set_default_dtype(torch.float32)
    try:
        data = toy_data()
        split = dirichlet_split(data.y_train.numpy(), 4, 1.0, seed=0, min_share=8)
        a = NeuralProblem(tiny_cnn(), data, split.indices, batch_size=8, backend="loop", seed=1)
        b = NeuralProblem(tiny_cnn(), data, split.indices, batch_size=8, backend="vmap", seed=1)
        x = a.initial_point() + 0.05 * torch.randn(4, a.dim)
        for _ in range(3):
            ga, la = a.gradient_and_loss(x)
            gb, lb = b.gradient_and_loss(x)
            torch.testing.assert_close(ga, gb, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(la, lb, rtol=1e-5, atol=1e-5)
        auto = NeuralProblem(tiny_cnn(), data, split.indices, batch_size=8, backend="auto")
        assert auto.backend == "vmap"  # a small model on the CPU, by rule
    finally:
        torch.set_default_dtype(torch.float64)


def test_parameters_are_views_of_the_flat_rows():
    torch.set_default_dtype(torch.float32)
    try:
        problem = full_batch_problem(n=2)
        x = problem.initial_point()
        problem.gradient_and_loss(x)
        first = next(problem.engine.replicas[1].parameters())
        assert first.data_ptr() == x[1].data_ptr()
        x[1, 0] = 123.0
        assert first.reshape(-1)[0] == 123.0
    finally:
        torch.set_default_dtype(torch.float64)


def test_errors():
    data = toy_data()
    with pytest.raises(ValueError, match="fewer samples than the batch size"):
        NeuralProblem(tiny_cnn(), data, (np.arange(5), np.arange(5, 90)), batch_size=8)
    with pytest.raises(ValueError, match="backend"):
        NeuralProblem(tiny_cnn(), data, (np.arange(90),), batch_size=8, backend="jit")
    bn = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 4))
    with pytest.raises(ValueError, match="without buffers"):
        NeuralProblem(bn, data, (np.arange(90),), batch_size=8, backend="vmap")
    assert NeuralProblem(bn, data, (np.arange(90),), batch_size=8).backend == "grouped"
    with pytest.raises(ValueError, match="backend 'grouped' cannot run Sequential: its Tanh"):
        NeuralProblem(tiny_cnn(), data, (np.arange(90),), batch_size=8, backend="grouped")
    assert NeuralProblem(tiny_cnn(), data, (np.arange(90),), batch_size=8).backend == "vmap"
