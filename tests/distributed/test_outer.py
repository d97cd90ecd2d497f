"""Outer optimizers in the torch.optim-style optimizer and in wrap(): DiLoCo's recipe."""

from __future__ import annotations

import copy

import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.distributed import DecentralizedOptimizer, wrap
from tests.distributed.test_optimizer import model_and_data, run

OUTER = "nesterov(lr=0.7, beta=0.9, every=3)"


def one_agent() -> SimulatedCommunicator:
    return SimulatedCommunicator(dopt.topology.complete(1))


def test_wrapped_adamw_under_outer_nesterov_is_diloco_on_one_agent():
    """wrap(AdamW, "dsgd", outer=...) with n = 1 against DiLoCo written out: AdamW for H
    steps, then torch's SGD with Nesterov momentum on x_sync - x, and a restart at x_sync."""
    model, x, y = model_and_data()
    opt = wrap(torch.optim.AdamW(model.parameters(), lr=0.01), "dsgd", one_agent(), outer=OUTER)
    run(opt, model, x, y, 10)
    ref, _, _ = model_and_data()
    inner = torch.optim.AdamW(ref.parameters(), lr=0.01)
    sync = [p.detach().clone().requires_grad_(True) for p in ref.parameters()]
    outer = torch.optim.SGD(sync, lr=0.7, momentum=0.9, nesterov=True)
    for t in range(10):
        inner.zero_grad()
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        inner.step()
        if (t + 1) % 3 == 0:
            with torch.no_grad():
                for s, p in zip(sync, ref.parameters(), strict=True):
                    s.grad = s.detach() - p.detach()
                outer.step()
                for s, p in zip(sync, ref.parameters(), strict=True):
                    p.copy_(s)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        eps = torch.finfo(p.dtype).eps
        torch.testing.assert_close(p, q, rtol=64 * eps, atol=64 * eps)
    plain, _, _ = model_and_data()
    run(wrap(torch.optim.AdamW(plain.parameters(), lr=0.01), "dsgd", one_agent()), plain, x, y, 10)
    assert not torch.allclose(next(plain.parameters()), next(model.parameters()))
    state = opt.state_dict()["gossip"]["state"][0]
    assert set(state) >= {"outer_x", "outer_m", "step"} and state["step"] == 10


@pytest.mark.parametrize("make", ["optimizer", "wrap"])
def test_state_dict_round_trip_resumes_bit_equal(make):
    """Saved mid-period (step 4 of outer steps every 3), loaded by a fresh optimizer over a
    fresh model: the next 5 steps equal the uninterrupted run's bit for bit."""

    def build(model):
        if make == "optimizer":
            return DecentralizedOptimizer(
                model.parameters(), "dmsgd", one_agent(), lr=0.05, beta=0.5, outer=OUTER
            )
        base = torch.optim.AdamW(model.parameters(), lr=0.01)
        return wrap(base, "dsgd", one_agent(), outer=OUTER)

    model, x, y = model_and_data()
    opt = build(model)
    run(opt, model, x, y, 4)
    saved = {"model": {k: v.clone() for k, v in model.state_dict().items()}}
    saved["opt"] = copy.deepcopy(opt.state_dict())  # as on disk: AdamW's moments change in place
    run(opt, model, x, y, 5)
    fresh, _, _ = model_and_data(seed=5)
    fresh.load_state_dict(saved["model"])
    again = build(fresh)
    again.load_state_dict(saved["opt"])
    run(again, fresh, x, y, 5)
    for p, q in zip(fresh.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    inner = again if make == "optimizer" else again.gossip
    assert inner.algorithm_state.t == 9 and "outer_m" in inner.algorithm_state.outer


def test_a_checkpoint_without_the_outer_optimizer_is_refused():
    model, x, y = model_and_data()
    opt = DecentralizedOptimizer(model.parameters(), "dsgd", one_agent(), lr=0.05, outer=OUTER)
    run(opt, model, x, y, 2)
    plain = DecentralizedOptimizer(model.parameters(), "dsgd", one_agent(), lr=0.05)
    with pytest.raises(ValueError, match="checkpoint is for 'dsgd\\+nesterov'"):
        plain.load_state_dict(opt.state_dict())


def test_bad_outer_text_is_one_line():
    model, _, _ = model_and_data()
    with pytest.raises(ValueError, match=r"^dsgd: nesterov: every must be >= 1") as caught:
        DecentralizedOptimizer(model.parameters(), "dsgd", one_agent(), outer="nesterov(every=0)")
    assert "\n" not in str(caught.value)
    with pytest.raises(TypeError, match="give every=H"):
        wrap(torch.optim.SGD(model.parameters(), lr=0.1), "dsgd", one_agent(), outer="nesterov")
