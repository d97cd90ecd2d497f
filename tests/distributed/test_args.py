"""Arguments ``DecentralizedOptimizer`` and ``wrap`` cannot use are refused when built."""

from __future__ import annotations

import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.distributed import DecentralizedOptimizer, wrap


def _setup():
    model = torch.nn.Linear(3, 1)
    return model, SimulatedCommunicator(dopt.topology.complete(1))


def test_wrap_refuses_an_optimizer_class():
    _, comm = _setup()
    with pytest.raises(TypeError, match=r"not its class: wrap\(AdamW\(model.parameters"):
        wrap(torch.optim.AdamW, "edm", comm)


def test_wrap_refuses_parameters():
    model, comm = _setup()
    with pytest.raises(TypeError, match="torch optimizer built on the parameters, got generator"):
        wrap(model.parameters(), "edm", comm)


@pytest.mark.parametrize("bad", [None, "topology"])
def test_a_communicator_is_required(bad):
    model, comm = _setup()
    bad = comm.topology if bad == "topology" else None
    with pytest.raises(TypeError, match=r"comm must be a communicator.*DistributedCommunicator"):
        wrap(torch.optim.SGD(model.parameters(), lr=0.1), "dsgd", bad)
    with pytest.raises(TypeError, match="comm must be a communicator"):
        DecentralizedOptimizer(model.parameters(), "edm", bad, lr=0.1)


def test_wrapping_twice_is_refused():
    model, comm = _setup()
    once = wrap(torch.optim.SGD(model.parameters(), lr=0.1), "dsgd", comm)
    with pytest.raises(TypeError, match="already gossips"):
        wrap(once, "dsgd", comm)
    decentralized = DecentralizedOptimizer(model.parameters(), "dsgd", comm, lr=0.1)
    with pytest.raises(TypeError, match="already gossips"):
        wrap(decentralized, "ed", comm)
    with pytest.raises(TypeError, match="not an optimizer"):
        DecentralizedOptimizer(decentralized, "dsgd", comm, lr=0.1)


def test_beta_and_momentum_together_are_refused():
    model, comm = _setup()
    with pytest.raises(ValueError, match="name the same thing; give one of them"):
        DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, beta=0.9, momentum=0.5)
    opt = DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, momentum=0.5)
    assert opt.param_groups[0]["beta"] == 0.5


def test_a_module_is_not_its_parameters():
    model, comm = _setup()
    with pytest.raises(TypeError, match=r"model.parameters\(\), not the module"):
        DecentralizedOptimizer(model, "edm", comm, lr=0.1)
