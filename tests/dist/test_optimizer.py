from __future__ import annotations

import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.dist import DecentralizedOptimizer


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
        grads = torch.autograd.grad(torch.nn.functional.cross_entropy(ref(x), y),
                                    list(ref.parameters()))
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
    saved = {"model": {k: v.clone() for k, v in model.state_dict().items()},
             "opt": opt.state_dict()}
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
        DecentralizedOptimizer(model.parameters(), "edm", comm,
                               lr=dopt.schedules.MultiStep(0.1, [5]))
    with pytest.raises(RuntimeError, match="torchrun"):
        dopt.comm.DistributedCommunicator(dopt.topology.ring(4))
