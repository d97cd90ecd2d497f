"""The group form's set-up, in one process: how many processes an agent takes, and the
one-line refusals of a layout that does not fit (the multi-process checks are in
tests/distributed/test_groups.py)."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist

import decentopt as dopt
from decentopt.cli import main
from decentopt.comm.grouped import GroupCommunicator, agent_size


def test_procs_per_agent_given_then_launchs_then_the_nodes(monkeypatch):
    monkeypatch.delenv("DECENTOPT_PROCS_PER_AGENT", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert agent_size() == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # torchrun --nproc-per-node 8: one node
    assert agent_size() == 8
    monkeypatch.setenv("DECENTOPT_PROCS_PER_AGENT", "2")  # decentopt launch --procs-per-agent
    assert agent_size() == 2
    assert agent_size(4) == 4
    monkeypatch.setenv("DECENTOPT_PROCS_PER_AGENT", "two")
    with pytest.raises(ValueError, match="'two' is not a whole number"):
        agent_size()


def test_launch_refuses_agents_of_unequal_size_before_starting_anything(capsys, tmp_path):
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit(5)\n")
    assert main(["launch", "-n", "3", "--procs-per-agent", "2", str(script)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--procs-per-agent 2 does not divide -n 3" in err
    assert "launch:" not in err  # no process was started


@pytest.fixture
def one_process():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_layout_that_does_not_fit_is_refused_in_one_line(one_process):
    with pytest.raises(ValueError, match="procs_per_agent = 2 does not divide the job's 1"):
        GroupCommunicator(dopt.topology.ring(1), procs_per_agent=2)
    with pytest.raises(ValueError) as caught:
        GroupCommunicator(dopt.topology.ring(2), procs_per_agent=1)
    said = str(caught.value)
    assert "\n" not in said and "torchrun --nnodes 2 --nproc-per-node 1" in said


def test_one_process_per_agent_mixes_as_the_plain_communicator(one_process):
    comm = GroupCommunicator(dopt.topology.ring(1), procs_per_agent=1)
    z = torch.randn(1, 7, dtype=torch.float64)
    assert torch.equal(comm.mix(z), z)  # one agent: W = [1]
    assert comm.stats.rounds == 1 and comm.stats.bytes_sent == 0
    assert torch.equal(comm.average_gradients(z), z)


@pytest.mark.parametrize(
    ("method", "graph"),
    [
        ("edm", "ring"),
        ("dsgt", "one_peer_exponential"),
        ("sgp", "directed_one_peer_exponential"),
        ("choco_edm", "ring"),
        ("relaysgd", "chain"),
        ("ad_psgd", "ring"),
    ],
)
def test_every_agent_on_one_process_equals_the_simulator(one_process, method, graph):
    """All 8 agents on the one process: each row mixes in memory, as in the simulator."""
    from decentopt.comm import ManyAgentCommunicator, SimulatedCommunicator

    topo = getattr(dopt.topology, graph)(8)
    prob = dopt.problems.Quadratic.paper(n=8, d=3, p=5, c=0.5, sigma2=0.05, seed=0)
    hp = {"beta": 0.8} if dopt.algorithms.resolve(method).uses_momentum else {}
    finals, rounds = [], []
    for comm in (ManyAgentCommunicator(topo), SimulatedCommunicator(topo)):
        alg = dopt.algorithms.make(method, lr=0.05, **hp)
        gen = torch.Generator().manual_seed(7)
        state = alg.init(prob.initial_point())
        for _ in range(10):
            state = alg.step(state, prob.gradient(state.x, gen), comm)
        finals.append(state.x)
        rounds.append(comm.stats.rounds)
    torch.testing.assert_close(finals[0], finals[1], rtol=1e-10, atol=1e-12)
    assert rounds[0] == rounds[1] >= 10  # W_t picked by the same round
    assert not torch.allclose(finals[1][0], finals[1][1])
