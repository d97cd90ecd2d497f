"""Agents and processes not one to one, on 4 gloo processes: 2 agents of 2 processes each
against the simulator of 2 agents whose gradient is the mean of the two processes'
gradients; and 16 agents, 4 on each process, against the simulator of 16."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from tests.distributed import group_worker, worker
from tests.distributed.test_distributed import ROOT, free_port, rank_env, wait_all

pytestmark = pytest.mark.slow  # four processes

WORKER = Path(__file__).with_name("group_worker.py")


def start(out: Path, world: int = 4) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in range(world):
        env = rank_env(rank, world, port)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    return procs


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("groups")
    procs = start(out)
    codes = wait_all(procs, timeout=300)
    logs = [p.stdout.read().decode()[-3000:] for p in procs]
    assert codes == [0, 0, 0, 0], "\n".join(logs)
    return [torch.load(out / f"group-rank{r}.pt") for r in range(4)]


def simulated(variant: str) -> torch.Tensor:
    """2 agents on the simulator; agent a's gradient is the mean of processes 2a and 2a+1's
    (the tiny network's 4 shares, evaluated at the agent's row twice)."""
    name, extra = worker.VARIANTS[variant]
    comm = SimulatedCommunicator(dopt.topology.from_matrix(group_worker.W2))
    alg = dopt.algorithms.make(name, **worker.hyper(name), **extra)
    net = worker.tiny_net(range(4))
    state = alg.init(net.initial_point()[:2])
    for _ in range(worker.STEPS):
        grads, _ = net.gradient_and_loss(state.x.repeat_interleave(2, dim=0))
        state = alg.step(state, grads.view(2, 2, -1).mean(dim=1), comm)
    return state.x


def refused(variant: str) -> bool:
    """Delayed gossip (OSGP is DSGD's push-sum, delayed) keeps rows in flight per process."""
    name, extra = worker.VARIANTS[variant]
    return name == "osgp" or "delayed" in str(extra.get("gossip", ""))


@pytest.mark.parametrize("variant", list(worker.VARIANTS))
def test_two_agents_of_two_processes_equal_the_simulator_of_the_mean_gradient(ranks, variant):
    torch.set_default_dtype(torch.float64)
    if refused(variant):
        for r in ranks:  # delayed gossip: one line naming what it needs
            said = r[f"refused/{variant}"]
            assert "\n" not in said and "one agent per process" in said
        return
    want = simulated(variant)
    for r in ranks:
        got = r[variant]
        np.testing.assert_allclose(got.numpy(), want[r["agent"]].numpy(), rtol=1e-5, atol=1e-8)
    assert torch.equal(ranks[0][variant], ranks[1][variant])  # one agent, one row
    if not worker.on_tree(variant):  # (relaying over two agents is their exact average)
        assert not torch.allclose(want[0], want[1])  # the agents disagree: a real check


@pytest.mark.parametrize("variant", group_worker.OVERLAPPED)
def test_overlapped_buckets_equal_the_blocking_path_in_the_group_form(ranks, variant):
    for r in ranks:  # the same buckets (random operators key on the round: one per bucket)
        assert torch.equal(r[f"overlap/{variant}"], r[f"buckets/{variant}"])


def test_each_link_between_agents_carries_half_the_row(ranks):
    """DSGD on 2 agents: each process sends its half (of a row padded to an even length) to
    the process at its position in the other agent, once per round."""
    D = sum(p.numel() for p in worker.tiny_net([0]).model.parameters())
    for r in ranks:
        rounds = r["rounds/dsgd"]
        assert rounds == worker.STEPS
        assert r["bytes/dsgd"] == rounds * math.ceil(D / 2) * 8  # one neighbour, float64
    # compressed: each process sends its half of the encoded message
    for variant in ("choco_dsgd/top_k", "choco_edm/qsgd"):
        assert 0 < ranks[0][f"bytes/{variant}"] < ranks[0]["bytes/dsgd"]


def test_wrapped_sgd_steps_on_the_agents_mean_gradient(ranks):
    want = simulated("dsgd")
    for r in ranks:
        np.testing.assert_allclose(
            r["wrap/sgd-dsgd"].numpy(), want[r["agent"]].numpy(), rtol=1e-5, atol=1e-8
        )


def test_the_processes_of_an_agent_start_from_its_first_processs_point(ranks):
    assert torch.equal(ranks[0]["start"], ranks[1]["start"])
    assert torch.equal(ranks[2]["start"], ranks[3]["start"])
    assert not torch.equal(ranks[0]["start"], ranks[2]["start"])


def test_torchrun_two_nodes_of_two_processes_train_the_example(tmp_path):
    """Two torchrun agents on localhost, as on two machines (node ranks 0 and 1): 2 agents of
    2 processes each train the example for an epoch and agree on its report."""
    port = str(free_port())
    script = str(ROOT / "examples" / "train_dirichlet.py")
    env = os.environ | {
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
    command += ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port]
    example = [script, "--epochs", "1", "--procs-per-agent", "2"]
    example += ["--checkpoints", str(tmp_path / "ck")]
    nodes = [
        subprocess.Popen(
            [*command, "--node-rank", str(node), *example],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    head = outputs[0]
    assert "epoch   1  train loss" in head and "test acc (avg model)" in head, head[-2000:]
    loss = float(head.split("train loss ")[1].split()[0])
    assert 0 < loss < 2.5, head[-2000:]  # cross-entropy of 10 classes, from about log 10
    assert "done: 45 gossip rounds" in head  # 2 agents' shares, batches of 16: 45 steps
    step = next((tmp_path / "ck").iterdir()) / "step-00000001"
    assert sorted(f.name for f in step.glob("rank*.pt")) == [f"rank{r}.pt" for r in range(4)]


@pytest.mark.parametrize("variant", list(worker.VARIANTS))
def test_sixteen_agents_on_four_processes_equal_the_simulator(ranks, variant):
    torch.set_default_dtype(torch.float64)
    for label in group_worker.many_graphs(variant):
        if refused(variant):  # one line naming what it needs
            for r in ranks:
                said = r[f"many-refused/{label}/{variant}"]
                assert "\n" not in said and "one agent per process" in said
            continue
        prob = group_worker.quadratic16()
        comm = SimulatedCommunicator(group_worker.MANY[label]())
        alg = worker.method(variant)
        gen = torch.Generator().manual_seed(7)
        state = alg.init(prob.initial_point())
        for _ in range(worker.STEPS):
            state = alg.step(state, prob.gradient(state.x, gen), comm)
        got = torch.cat([r[f"many/{label}/{variant}"] for r in ranks])
        np.testing.assert_allclose(got.numpy(), state.x.numpy(), rtol=1e-5, atol=1e-8)
        assert not torch.allclose(state.x[0], state.x[1])  # the agents disagree


def test_rows_on_the_same_process_cost_no_bytes(ranks):
    """On the ring of 16 with 4 consecutive agents per process, only the two end agents'
    rows leave a process: 2 of the 8 messages, d x R = 6 float64 each, per round."""
    for r in ranks:
        assert r["many-bytes/ring/dsgd"] == worker.STEPS * 2 * 6 * 8
