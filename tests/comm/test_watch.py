"""A method that never gossips is said to, once, after its first steps: in the simulator's
loop and in the optimizer; a method that gossips is not."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

import decentopt as dopt
from decentopt.algorithms.dsgd import DSGD, DSGDState
from decentopt.comm import SimulatedCommunicator
from decentopt.comm.watch import FIRST_STEPS
from decentopt.distributed import DecentralizedOptimizer
from decentopt.driver import RunOptions, run_loop
from decentopt.plan import Plan


@dataclass(frozen=True)
class Alone(DSGD):
    """DSGD that forgets to mix: each agent steps along its own gradient only."""

    name: ClassVar[str] = "alone"

    def step(self, state: DSGDState, grad: torch.Tensor, comm: object) -> DSGDState:
        return DSGDState(x=state.x - self.lr * grad, t=state.t + 1)


def quiet(_: str) -> None:
    pass


def simulate(alg: object, steps: int) -> list[warnings.WarningMessage]:
    prob = dopt.problems.Quadratic.paper(n=4, d=3, p=4, sigma2=0.0, repetitions=1, seed=0)
    comm = SimulatedCommunicator(dopt.topology.ring(4))
    grad = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run_loop(alg, prob, comm, Plan(steps, (0, steps)), RunOptions(log=quiet), gradient=grad)
    return [w for w in seen if "gossip round" in str(w.message)]


def test_a_method_that_never_mixes_is_warned_about_once():
    seen = simulate(Alone(lr=0.05), 3 * FIRST_STEPS)
    assert len(seen) == 1 and seen[0].category is RuntimeWarning
    text = str(seen[0].message)
    assert text.startswith(f"alone made no gossip round in its first {FIRST_STEPS} steps")
    assert "training alone" in text


@pytest.mark.parametrize("name", ["dsgd", "edm", "ad_psgd"])
def test_a_method_that_gossips_is_not(name):
    assert simulate(dopt.algorithms.make(name, lr=0.05), 3 * FIRST_STEPS) == []


def test_a_run_shorter_than_the_first_steps_says_nothing():
    assert simulate(Alone(lr=0.05), FIRST_STEPS - 1) == []


def test_the_optimizer_warns_once_too():
    model = torch.nn.Linear(3, 1)
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    for alg, count in ((Alone(lr=0.05), 1), (dopt.algorithms.make("dsgd", lr=0.05), 0)):
        opt = DecentralizedOptimizer(model.parameters(), alg, comm)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for _ in range(2 * FIRST_STEPS):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        assert len([w for w in seen if "no gossip round" in str(w.message)]) == count


def test_bounded_staleness_without_a_time_model_says_it_is_the_plain_delay():
    """One line at the start names what the simulator assumes; the iterates are delayed(1)'s
    bit for bit."""
    prob = dopt.problems.Quadratic.paper(n=4, d=3, p=4, sigma2=0.0, repetitions=1, seed=0)
    grad = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731
    finals, lines = [], []
    for gossip in ("delayed(1, staleness=4)", "delayed(1)"):
        said: list[str] = []
        alg = dopt.algorithms.make("dsgd", lr=0.05, gossip=gossip)
        comm = SimulatedCommunicator(dopt.topology.ring(4))
        options = RunOptions(log=said.append)
        run = run_loop(alg, prob, comm, Plan(20, (0, 20)), options, gradient=grad)
        finals.append(run.final_state.x)
        lines.append(said)
    assert torch.equal(finals[0], finals[1])
    assert lines[1] == []
    [line] = lines[0]
    assert "each neighbour's message is exactly tau = 1 rounds old" in line
    assert "without a [timing] model the simulator runs every agent at one pace" in line
    assert "to simulate the ages up to staleness = 4" in line
