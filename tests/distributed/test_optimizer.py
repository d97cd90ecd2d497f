from __future__ import annotations

import contextlib

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


def test_a_saved_piece_of_another_shape_is_refused_in_one_line():
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    model, x, y = model_and_data()
    opt = DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.05, beta=0.9)
    run(opt, model, x, y, 1)
    saved = opt.state_dict()
    saved["state"][0]["m"] = torch.zeros(5)  # the first weight's momentum, (8, 4) in the model
    fresh = DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.05, beta=0.9)
    with pytest.raises(RuntimeError, match=r"'m' state of a parameter of shape \(8, 4\) is \(5,\)"):
        fresh.load_state_dict(saved)


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


def sgd_pair(nesterov: bool = False):
    """Our DmSGD (undampened) and torch.optim.SGD on identical models and data."""
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    ours, x, y = model_and_data()
    ref, _, _ = model_and_data()
    opt = DecentralizedOptimizer(
        ours.parameters(), "dmsgd", comm, lr=0.1, beta=0.9, dampening=False, nesterov=nesterov
    )
    sgd = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, nesterov=nesterov)
    return (ours, opt), (ref, sgd), x, y


def both(pair_a, pair_b, x, y, steps=1):
    for model, o in (pair_a, pair_b):
        run(o, model, x, y, steps)


def same(a, b, **tol):
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert p.dtype == q.dtype
        torch.testing.assert_close(p, q, **(tol or {"rtol": 1e-6, "atol": 1e-7}))


def test_a_layer_frozen_after_the_optimizer_is_built_stays_bit_for_bit():
    (ours, opt), (ref, sgd), x, y = sgd_pair()
    both((ours, opt), (ref, sgd), x, y, 2)
    for m in (ours, ref):
        m[0].weight.requires_grad_(False)
    frozen = ours[0].weight.detach().clone()
    both((ours, opt), (ref, sgd), x, y, 5)
    assert torch.equal(ours[0].weight, frozen)  # no momentum, no decay, no gossip moves it
    same(ours, ref)


def test_a_layer_unfrozen_after_the_optimizer_is_built_trains():
    (ours, opt), (ref, sgd), x, y = sgd_pair()
    for m in (ours, ref):
        m[2].weight.requires_grad_(False)
    both((ours, opt), (ref, sgd), x, y, 3)
    before = ours[2].weight.detach().clone()
    for m in (ours, ref):
        m[2].weight.requires_grad_(True)
    both((ours, opt), (ref, sgd), x, y, 4)
    assert not torch.equal(ours[2].weight, before)
    same(ours, ref)
    assert opt.state_dict()["state"][0]["step"] == 7 and opt.state[ours[2].weight]["step"] == 4


def test_double_and_to_after_the_optimizer_is_built_are_kept():
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    ours, x, y = model_and_data()
    ref, _, _ = model_and_data()
    ours.float(), ref.float()
    x = x.float()
    opt = DecentralizedOptimizer(
        ours.parameters(), "dmsgd", comm, lr=0.1, beta=0.9, dampening=False
    )
    sgd = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    both((ours, opt), (ref, sgd), x, y, 2)
    ours.double()
    ref.double()
    both((ours, opt), (ref, sgd), x.double(), y, 3)
    assert all(p.dtype == torch.float64 for p in ours.parameters())  # not undone by step()
    assert opt.state[ours[0].weight]["m"].dtype == torch.float64  # the state followed
    same(ours, ref, rtol=1e-5, atol=1e-6)  # torch keeps its momentum buffers in float32
    ours.to(torch.float32)
    run(opt, ours, x, y, 1)
    assert all(p.dtype == torch.float32 for p in ours.parameters())


def test_load_state_dict_on_the_model_is_what_the_next_step_starts_from():
    (ours, opt), (ref, sgd), x, y = sgd_pair()
    both((ours, opt), (ref, sgd), x, y, 2)
    fresh, _, _ = model_and_data(seed=9)
    for m in (ours, ref):
        m.load_state_dict(fresh.state_dict())
    both((ours, opt), (ref, sgd), x, y, 2)
    same(ours, ref)


def test_a_grad_scaler_skips_the_step_that_overflowed_as_torch_does():
    (ours, opt), (ref, sgd), x, y = sgd_pair()
    scalers = [torch.amp.GradScaler("cpu", init_scale=2.0**10) for _ in range(2)]
    for step in range(4):
        for (model, o), scaler in zip(((ours, opt), (ref, sgd)), scalers, strict=True):
            o.zero_grad()
            scaler.scale(torch.nn.functional.cross_entropy(model(x), y)).backward()
            if step == 2:
                model[0].weight.grad[0, 0] = float("inf")
            scaler.step(o)
            scaler.update()
        same(ours, ref)
    assert scalers[0].get_scale() == scalers[1].get_scale() == 2.0**9


@pytest.mark.parametrize("name", dopt.algorithms.names())
def test_overlapped_buckets_equal_the_blocking_step_bit_for_bit(name):
    """Every parameter its own bucket, stepped during backward on the worker thread."""
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    hp = {"lr": 0.05} | ({"beta": 0.8} if dopt.algorithms.resolve(name).uses_momentum else {})
    models = [model_and_data()[0] for _ in range(2)]
    _, x, y = model_and_data()
    opts = [
        DecentralizedOptimizer(m.parameters(), name, comm, bucket_cap_mb=1e-5, overlap=o, **hp)
        for m, o in zip(models, (False, True), strict=True)
    ]
    for _ in range(4):
        for model, opt in zip(models, opts, strict=True):
            run(opt, model, x, y, 1)
    assert len(opts[1]._buckets) == 4
    for p, q in zip(*(m.parameters() for m in models), strict=True):
        assert torch.equal(p, q)


def test_no_sync_accumulates_gradients_before_an_overlapped_step():
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    models = [model_and_data()[0] for _ in range(2)]
    _, x, y = model_and_data()
    plain = DecentralizedOptimizer(models[0].parameters(), "edm", comm, lr=0.1, beta=0.9)
    lapped = DecentralizedOptimizer(
        models[1].parameters(), "edm", comm, lr=0.1, beta=0.9, overlap=True, bucket_cap_mb=1e-5
    )
    for _ in range(3):
        for model, opt in ((models[0], plain), (models[1], lapped)):
            opt.zero_grad()
            with opt.no_sync() if opt.overlap else contextlib.nullcontext():
                torch.nn.functional.cross_entropy(model(x[:16]), y[:16]).backward()
            torch.nn.functional.cross_entropy(model(x[16:]), y[16:]).backward()
            opt.step()
    for p, q in zip(*(m.parameters() for m in models), strict=True):
        assert torch.equal(p, q)


def test_a_grad_scaler_with_overlap_is_refused_in_one_line():
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    model, x, y = model_and_data()
    opt = DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, overlap=True)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.nn.functional.cross_entropy(model(x), y)).backward()
    with pytest.raises(RuntimeError, match="use overlap=False with a GradScaler"):
        scaler.step(opt)


def test_wrapping_sgd_as_dsgd_is_the_dsgd_optimizer():
    from decentopt.distributed import wrap

    comm = SimulatedCommunicator(dopt.topology.complete(1))
    a, x, y = model_and_data()
    b, _, _ = model_and_data()
    ours = DecentralizedOptimizer(a.parameters(), "dsgd", comm, lr=0.1)
    wrapped = wrap(torch.optim.SGD(b.parameters(), lr=0.1), "dsgd", comm)
    for model, opt in ((a, ours), (b, wrapped)):
        run(opt, model, x, y, 5)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        # x - (x - y) is y exactly unless a step crosses zero or more than halves a
        # parameter (Sterbenz); then within a unit in the last place
        eps = torch.finfo(p.dtype).eps
        torch.testing.assert_close(p, q, rtol=4 * eps, atol=4 * eps * float(p.detach().abs().max()))


@pytest.mark.parametrize("name", dopt.algorithms.names())
def test_every_method_takes_a_base_optimizers_step(name):
    """wrap(SGD(lr), M) is M's DecentralizedOptimizer at that lr with its momentum off, for
    every registered method (here on one agent: every graph is that agent alone, so push-sum
    and relaying run too); the base step travels as the method's direction."""
    from decentopt.distributed import wrap

    comm = SimulatedCommunicator(dopt.topology.complete(1))
    a, x, y = model_and_data()
    b, _, _ = model_and_data()
    off = {"beta": 0.0} if dopt.algorithms.resolve(name).uses_momentum else {}
    ours = DecentralizedOptimizer(a.parameters(), name, comm, lr=0.1, **off)
    wrapped = wrap(torch.optim.SGD(b.parameters(), lr=0.1), name, comm)
    for model, opt in ((a, ours), (b, wrapped)):
        run(opt, model, x, y, 5)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        eps = torch.finfo(p.dtype).eps
        torch.testing.assert_close(
            p, q, rtol=64 * eps, atol=64 * eps * float(p.detach().abs().max())
        )
    state = wrapped.state_dict()
    again = wrap(torch.optim.SGD(b.parameters(), lr=0.1), name, comm)
    again.load_state_dict(state)
    assert again.gossip.state_dict()["state"].keys() == state["gossip"]["state"].keys()


def test_compressed_public_copies_stay_float64_for_a_float32_model_and_survive_a_save():
    """CHOCO's X_hat and S accumulate in float64 (their rounding would drift ED/EDM);
    the optimizer keeps them so, through state_dict and load_state_dict."""
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    model, x, y = model_and_data()
    model.float()
    opt = DecentralizedOptimizer(
        model.parameters(), "choco_edm", comm, lr=0.1, beta=0.5, compression="qsgd(4)", gamma=0.5
    )
    run(opt, model, x.float(), y, 3)
    state = opt.state[model[0].weight]
    assert state["x_hat"].dtype == state["s"].dtype == torch.float64
    assert state["m"].dtype == model[0].weight.dtype == torch.float32
    again = DecentralizedOptimizer(
        model.parameters(), "choco_edm", comm, lr=0.1, beta=0.5, compression="qsgd(4)", gamma=0.5
    )
    again.load_state_dict(opt.state_dict())
    run(again, model, x.float(), y, 1)
    assert again.state[model[0].weight]["x_hat"].dtype == torch.float64


def test_a_composed_methods_momentum_follows_its_parameter_group():
    """A rule composed with a gossip tunes its rule's beta per group, as a bare rule does."""
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    a, x, y = model_and_data()
    b, _, _ = model_and_data()
    gossip = "choco(qsgd(4), gamma=0.5)"
    grouped = DecentralizedOptimizer(
        [{"params": a.parameters(), "beta": 0.5}], "edm", comm, lr=0.1, beta=0.9, gossip=gossip
    )
    direct = DecentralizedOptimizer(b.parameters(), "edm", comm, lr=0.1, beta=0.5, gossip=gossip)
    for model, opt in ((a, grouped), (b, direct)):
        run(opt, model, x, y, 4)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    assert grouped.state_dict()["algorithm"] == "edm+choco"
