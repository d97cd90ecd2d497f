"""The three gradient backends: every option with every backend, the grouped backend against
the loop backend (dropout and BatchNorm included), and the rule that picks one."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from torch import nn

import decentopt as dopt
from decentopt.models import SmallCNN, vgg11
from decentopt.problems.neural import BatchedRuns, NeuralProblem, choose_backend


def data(samples: int = 96):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(samples, 1, 8, 8, generator=g, dtype=torch.float32)
    y = torch.randint(0, 10, (samples,), generator=g)
    return dopt.data.Dataset("toy", x, y, x[:16], y[:16], 10)


def net(batch_norm: bool = True, dropout: float = 0.3, seed: int = 0) -> nn.Module:
    """Convolutions, BatchNorm, pooling, dropout in both layouts, linear layers."""
    torch.manual_seed(seed)
    layers = [nn.Conv2d(1, 4, 3, padding=1)]
    layers += [nn.BatchNorm2d(4)] if batch_norm else []
    layers += [nn.ReLU(), nn.Dropout(dropout), nn.MaxPool2d(2), nn.Conv2d(4, 6, 3, stride=1)]
    layers += [nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Dropout(dropout)]
    layers += [nn.Linear(24, 16), nn.ReLU(), nn.Linear(16, 10)]
    return nn.Sequential(*layers).float()


def problem(backend: str, model: nn.Module | None = None, n: int = 4, seed: int = 0, **kw):
    shares = tuple(np.array_split(np.arange(96), n))
    return NeuralProblem(
        model or net(), data(), shares, batch_size=8, backend=backend, seed=seed, **kw
    )


def test_the_grouped_backend_equals_the_loop_backend_mask_for_mask():
    """float32 on the CPU, three steps: the same gradients, losses, BatchNorm statistics and
    per-agent evaluations (dropout drawn from each agent's generator by both)."""
    loop, grouped = problem("loop"), problem("grouped")
    g = torch.Generator().manual_seed(2)
    x = loop.initial_point() + 0.05 * torch.randn(4, loop.dim, generator=g, dtype=torch.float32)
    noise = torch.Generator().manual_seed(11)
    for _ in range(3):
        ga, la = loop.gradient_and_loss(x, noise)
        gb, lb = grouped.gradient_and_loss(x, noise)
        torch.testing.assert_close(gb, ga, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lb, la, rtol=1e-5, atol=1e-5)
        x = x - 0.1 * ga
    for a, b in zip(loop.engine.buffers(), grouped.engine.buffers(), strict=True):
        for u, v in zip(a, b, strict=True):
            torch.testing.assert_close(v.float(), u.float(), rtol=1e-5, atol=1e-6)
    la, aa = loop.evaluate_agents(x)
    lb, ab = grouped.evaluate_agents(x)
    np.testing.assert_allclose(lb, la, rtol=1e-5)
    np.testing.assert_allclose(ab, aa)
    # the averaged model carries the agents' mean BatchNorm statistics
    assert loop.metrics(x)["test_loss"] == pytest.approx(grouped.metrics(x)["test_loss"], 1e-5)


def test_dropout_differs_between_agents_and_steps():
    grouped = problem("grouped", net(batch_norm=False, dropout=0.5))
    x = grouped.initial_point()
    noise = torch.Generator().manual_seed(0)
    first = grouped.gradient_and_loss(x, noise)[0]
    second = grouped.gradient_and_loss(x, noise)[0]
    assert not torch.equal(first, second)


def test_the_grouped_backend_refuses_other_layers_and_names_vmap():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.GELU(), nn.Flatten(), nn.Linear(72, 10))
    with pytest.raises(ValueError, match=r"its GELU layer .* use backend 'vmap'"):
        problem("grouped", model.float())


OPTIONS = list(
    itertools.product(
        ("loop", "vmap", "grouped"), (False, True), ("float32", "bf16"), (False, True)
    )
)


@pytest.mark.parametrize(("backend", "channels_last", "precision", "compile"), OPTIONS)
def test_every_option_works_with_every_backend_or_is_refused_in_one_line(
    backend, channels_last, precision, compile, monkeypatch
):
    """All 24 combinations, each alone and with two runs stepped together. torch.compile is
    replaced by the identity here (its own test compiles for real): what is tested is that
    each path runs, equals the plain float32 gradient (roughly in bf16), or is refused
    up front."""
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    model = net(batch_norm=backend != "vmap")
    options = {"channels_last": channels_last, "precision": precision, "compile": compile}
    if backend == "loop" and compile:
        with pytest.raises(ValueError, match="compile = true needs backend 'vmap' or 'grouped'"):
            problem(backend, model, **options)
        return
    plain = problem("loop", model)
    x = plain.initial_point()
    want, _ = plain.gradient_and_loss(x, torch.Generator().manual_seed(5))
    this = problem(backend, model, **options)
    got, losses = this.gradient_and_loss(x, torch.Generator().manual_seed(5))
    assert got.shape == x.shape and got.dtype == torch.float32 and torch.isfinite(got).all()
    if backend != "vmap":  # vmap draws dropout from torch's generator
        tol = 0.2 if precision == "bf16" else 1e-5  # bf16: the same gradient, roughly
        assert ((got - want).norm() / want.norm()) < tol
    runs = [problem(backend, model, seed=r, **options) for r in range(2)]
    batched = BatchedRuns(runs)
    grads, losses = batched.gradient_and_loss(batched.initial_point(), torch.Generator())
    assert grads.shape == (4, 2, x.shape[1]) and losses.shape == (4, 2)


def test_grouped_runs_stepped_together_equal_runs_alone():
    """Two runs as one grouped model of eight replicas: each run's gradients and metrics are
    those it has alone (its own data, initialisation, dropout streams and statistics)."""
    runs = [problem("grouped", net(seed=r), seed=r) for r in range(2)]
    alone = [problem("grouped", net(seed=r), seed=r) for r in range(2)]
    batched = BatchedRuns(runs)
    x = batched.initial_point()
    base = torch.Generator().manual_seed(40)
    grads, _ = batched.gradient_and_loss(x, base)
    for r, single in enumerate(alone):
        own, _ = single.gradient_and_loss(x[:, r], torch.Generator().manual_seed(40 + r))
        torch.testing.assert_close(grads[:, r], own, rtol=1e-5, atol=1e-5)
    metrics = batched.metrics(x)
    for r, single in enumerate(alone):
        assert metrics["agent_test_loss"][r] == pytest.approx(
            single.metrics(x[:, r])["agent_test_loss"], 1e-5
        )


def _noise(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return images + torch.randn(images.shape, generator=generator, dtype=images.dtype)


def test_batched_runs_resumed_from_their_state_go_on_as_the_runs_that_were_saved():
    """Each run's augmentation and dropout streams, its sampler and its buffers are restored:
    the next step after a resume is the step the saved runs take next."""
    saved = BatchedRuns([problem("loop", net(seed=r), seed=r, augment=_noise) for r in range(2)])
    x = saved.initial_point()
    saved.gradient_and_loss(x, torch.Generator().manual_seed(3))
    state = saved.state_dict()
    want, _ = saved.gradient_and_loss(x, torch.Generator().manual_seed(3))
    resumed = BatchedRuns([problem("loop", net(seed=r), seed=r, augment=_noise) for r in range(2)])
    resumed.load_state_dict(state)
    got, _ = resumed.gradient_and_loss(x, torch.Generator().manual_seed(99))  # seed unused
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_backend_is_chosen_by_a_rule_and_resumed_as_saved():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert choose_backend(SmallCNN(), cpu) == "vmap"  # small: batched is faster on the CPU
    assert choose_backend(vgg11(), cpu) == "loop"  # large: one at a time is faster
    assert choose_backend(net(), cpu) == "grouped"  # buffers: vmap cannot
    assert choose_backend(SmallCNN(), cuda) == choose_backend(vgg11(), cuda) == "grouped"
    gelu = nn.Sequential(nn.Flatten(), nn.Linear(64, 10), nn.GELU())
    assert choose_backend(gelu, cuda) == "vmap"
    # the same command picks the same backend every time; a checkpoint keeps it
    a = problem("auto", net(batch_norm=False))
    state = a.state_dict()
    assert state["backend"] == a.backend == "vmap"
    state["backend"] = "loop"  # as if saved by a run that used the loop backend
    b = problem("auto", net(batch_norm=False))
    b.load_state_dict(state)
    assert b.backend == "loop" and b.engine.name == "loop"


@pytest.mark.slow
def test_the_grouped_gradient_compiles_for_real():
    eager, compiled = problem("grouped"), problem("grouped", compile=True)
    x = eager.initial_point()
    a, _ = eager.gradient_and_loss(x, torch.Generator().manual_seed(1))
    b, _ = compiled.gradient_and_loss(x, torch.Generator().manual_seed(1))
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    assert not compiled.engine._compiled.get("failed")


def test_the_digits_study_trains_alike_with_its_grouped_and_the_loop_backend(tmp_path):
    """The methods study's digits part (16 agents, dropout) runs the grouped backend: over
    two epochs of EDM its recorded metrics are the loop backend's to float32 rounding, the
    same dropout masks and batches (12 quick epochs: see the preset's comment)."""
    from decentopt.experiments import load_spec, run_spec

    quick = ["problem_params.epochs=2", "problem_params.milestones=[]"]
    quick += ["problem_params.warmup_epochs=0", "problem_params.eval_every=1"]
    torch.set_default_dtype(torch.float32)
    try:
        spec = load_spec("methods_digits", quick=True, overrides=quick).select(["edm(lr=0.2)"])
        assert spec.params.backend == "grouped"
        loop = dataclasses.replace(spec, params=dataclasses.replace(spec.params, backend="loop"))
        rows = {}
        for name, each in (("grouped", spec), ("loop", loop)):
            rows[name] = run_spec(each, tmp_path / name, progress=False, log=lambda _: None).rows
    finally:
        torch.set_default_dtype(torch.float64)
    assert [r["step"] for r in rows["grouped"]] == [r["step"] for r in rows["loop"]] == [6, 12]
    for grouped, loop in zip(rows["grouped"], rows["loop"], strict=True):
        for key in ("test_loss", "agent_test_loss", "train_loss", "consensus"):
            assert grouped[key] == pytest.approx(loop[key], rel=1e-5), key
        for key in ("test_acc", "agent_test_acc"):  # of 359 test images: the same answers
            assert grouped[key] == pytest.approx(loop[key], abs=1e-6), key
