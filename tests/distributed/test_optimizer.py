from __future__ import annotations

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.distributed import DecentralizedOptimizer


def model_and_data(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x, y = torch.randn(32, 4), torch.randint(0, 2, (32,))
    return model, x, y


def run(opt, model, x, y, steps, scheduler=None):
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()


def test_single_agent_is_heavy_ball_sgd_with_schedulers():
    """n = 1: EDM is dampened heavy ball; a StepLR scheduler changes the step it uses."""
    model, x, y = model_and_data()
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    opt = DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, beta=0.5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    run(opt, model, x, y, 6, sched)
    ref, _, _ = model_and_data()
    buf = [torch.zeros_like(p) for p in ref.parameters()]
    for t in range(6):
        lr = 0.1 * 0.5 ** (t // 3)
        grads = torch.autograd.grad(
            torch.nn.functional.cross_entropy(ref(x), y), list(ref.parameters())
        )
        with torch.no_grad():
            for p, g, b in zip(ref.parameters(), grads, buf, strict=True):
                b.mul_(0.5).add_(g, alpha=0.5)
                p.sub_(lr * b)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.025)


def test_state_dict_round_trip_resumes_exactly():
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    model, x, y = model_and_data()
    opt = DecentralizedOptimizer(model.parameters(), "dsgt_hb", comm, lr=0.05, beta=0.9)
    run(opt, model, x, y, 4)
    saved = {
        "model": {k: v.clone() for k, v in model.state_dict().items()},
        "opt": opt.state_dict(),
    }
    run(opt, model, x, y, 3)
    uninterrupted = [p.detach().clone() for p in model.parameters()]

    fresh, _, _ = model_and_data(seed=5)
    fresh.load_state_dict(saved["model"])
    opt2 = DecentralizedOptimizer(fresh.parameters(), "dsgt_hb", comm, lr=0.05, beta=0.9)
    opt2.load_state_dict(saved["opt"])
    run(opt2, fresh, x, y, 3)
    for p, q in zip(fresh.parameters(), uninterrupted, strict=True):
        torch.testing.assert_close(p.detach(), q)
    with pytest.raises(ValueError, match="checkpoint is for 'dsgt_hb'"):
        DecentralizedOptimizer(fresh.parameters(), "edm", comm, lr=0.1).load_state_dict(
            saved["opt"]
        )


def test_errors():
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    model, _, _ = model_and_data()
    with pytest.raises(ValueError, match="empty parameter list"):
        DecentralizedOptimizer([], "edm", comm, lr=0.1)
    with pytest.raises(ValueError, match="lr_scheduler"):
        DecentralizedOptimizer(
            model.parameters(), "edm", comm, lr=dopt.schedules.MultiStep(0.1, [5])
        )
    with pytest.raises(RuntimeError, match="torchrun"):
        dopt.comm.DistributedCommunicator(dopt.topology.ring(4))


def groups_of(model):
    """Weights and biases in two groups with their own lr, weight decay and momentum."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [
        {"params": weights, "lr": 0.1, "weight_decay": 1e-2, "momentum": 0.9},
        {"params": biases, "lr": 0.03, "weight_decay": 0.0, "momentum": 0.5},
    ]


@pytest.mark.parametrize("nesterov", [False, True])
def test_one_agent_equals_torch_sgd_with_groups_decay_frozen_and_scheduler(nesterov):
    """DmSGD (PyTorch's undampened momentum) on one agent is torch.optim.SGD, step by step.

    Two parameter groups with their own lr / weight decay / momentum, a frozen
    layer, torch's default zero_grad(set_to_none=True) and a StepLR scheduler.
    """
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    ours, x, y = model_and_data()
    ref, _, _ = model_and_data()
    for m in (ours, ref):
        m[0].bias.requires_grad_(False)
    frozen = ours[0].bias.detach().clone()
    opt = DecentralizedOptimizer(
        groups_of(ours), "dmsgd", comm, lr=0.1, dampening=False, nesterov=nesterov
    )
    sgd = torch.optim.SGD(groups_of(ref), lr=0.1, momentum=0.9, nesterov=nesterov)
    scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.5) for o in (opt, sgd)]
    for _ in range(10):
        for model, o, s in ((ours, opt, scheds[0]), (ref, sgd, scheds[1])):
            o.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            o.step()
            s.step()
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    start = model_and_data()[0].parameters()
    moved = sum(
        float((p - q).detach().abs().sum()) for p, q in zip(ours.parameters(), start, strict=True)
    )
    assert moved > 0.1
    torch.testing.assert_close(ours[0].bias, frozen)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.025, 0.0075])


def test_zero_grad_set_to_none_is_honoured_and_training_moves():
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    model, x, y = model_and_data()
    before = [p.detach().clone() for p in model.parameters()]
    opt = DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, beta=0.9)
    model.zero_grad()  # torch's default: grads set to None
    assert all(p.grad is None for p in model.parameters())
    run(opt, model, x, y, 20)
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    moved = sum(
        float((p.detach() - q).abs().sum()) for p, q in zip(model.parameters(), before, strict=True)
    )
    assert moved > 0.1


def test_parameter_without_gradient_counts_as_zero_gradient():
    """An unused parameter gets g = 0: DSGD (no momentum, no decay) leaves it in place."""
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    model, x, y = model_and_data()
    unused = torch.nn.Parameter(torch.ones(3))
    opt = DecentralizedOptimizer([*model.parameters(), unused], "dsgd", comm, lr=0.1)
    run(opt, model, x, y, 3)
    torch.testing.assert_close(unused.detach(), torch.ones(3))


def test_state_dict_has_torch_format_and_scheduler_state_survives():
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    model, x, y = model_and_data()
    opt = DecentralizedOptimizer(groups_of(model), "edm", comm, lr=0.1, beta=0.9)
    run(opt, model, x, y, 2)
    sd = opt.state_dict()
    assert sorted(sd["state"]) == list(range(4))
    assert set(sd["state"][0]) == {"step", "psi", "m"} and sd["state"][0]["step"] == 2
    assert sd["state"][0]["psi"].shape == model[0].weight.shape
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2, 3]]
    assert [g["beta"] for g in sd["param_groups"]] == [0.9, 0.5]
    assert sd["algorithm"] == "edm"


def test_numbers_as_users_pass_them():
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    model, _, _ = model_and_data()
    opt = DecentralizedOptimizer(
        model.parameters(), "edm", comm, lr=torch.tensor(0.05), beta=np.float32(0.9)
    )
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="weight_decay must be >= 0"):
        DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, weight_decay=-1)
