"""The block path (decentopt.driver.block) against the step-by-step path.

Tolerance: the block paths compute the quadratic's gradient in another order (an
elementwise product and sum, or the C loop with fused multiply-adds) and mix a circulant
graph by its stencil, so results agree with the step path to rounding: relative 1e-9 on
these small, short runs (measured differences are near 1e-14). The logistic problem's block
path does the step path's arithmetic on the same noise: equal bit for bit. Neural problems
stay on the step path (their gradients sample mini-batches, not noise drawn in bulk).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.driver import RunOptions, run_loop
from decentopt.plan import Plan
from decentopt.problems.base import normal_block
from decentopt.schedules import MultiStep
from decentopt.updates import FusedUpdate
from tests.algorithms.test_common import ALL, graph_for, hyper

NATIVE = {"dsgd", "dmsgd", "ed", "edm"}
RTOL, ATOL = 1e-9, 1e-12


def quadratic() -> dopt.problems.Quadratic:
    return dopt.problems.Quadratic.paper(n=8, d=4, p=6, sigma2=0.05, repetitions=4, seed=2)


def logistic() -> dopt.problems.Logistic:
    return dopt.problems.Logistic.paper(n=8, d=4, m=20, repetitions=2, seed=2, mu=0.05)


def ring8(name: str) -> dopt.topology.Topology:
    return graph_for(name, dopt.topology.ring(8).W.numpy())


@pytest.mark.parametrize("shape", [(8, 4, 4), (32, 20, 10), (3, 5), (7,), (2, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bulk_draws_equal_the_draws_one_by_one(shape, dtype):
    """Numbers and generator state, bit for bit, in either default dtype."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        one = torch.Generator().manual_seed(5)
        each = torch.stack([torch.randn(shape, generator=one) for _ in range(7)])
        bulk = torch.Generator().manual_seed(5)
        block = normal_block(7, shape, bulk)
    finally:
        torch.set_default_dtype(previous)
    assert torch.equal(each, block) and block.dtype == dtype
    assert torch.equal(one.get_state(), bulk.get_state())


def both_paths(name: str, problem, path: str = "auto", **extra):
    alg = dopt.algorithms.make(name, **hyper(name, **extra))
    run = lambda p: dopt.simulate(alg, problem, ring8(name), 60, seed=4, points=12, path=p)  # noqa: E731
    return run("step"), run(path), run(path)


@pytest.mark.parametrize("name", ALL)
def test_every_method_agrees_on_the_quadratic(name):
    step, block, again = both_paths(name, quadratic())
    assert step.path == "step"
    assert block.path == ("native" if name in NATIVE else "block")
    for metric, values in step.history.items():
        np.testing.assert_allclose(block.history[metric], values, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(block.final_state.x, step.final_state.x, rtol=RTOL, atol=ATOL)
    assert vars(block.comm) == vars(step.comm)  # the same rounds and bytes
    assert block.steps.tolist() == step.steps.tolist()
    torch.testing.assert_close(again.final_state.x, block.final_state.x, rtol=0, atol=0)


@pytest.mark.parametrize("name", ALL)
def test_every_method_is_exact_on_the_logistic_problem(name):
    step, block, _ = both_paths(name, logistic(), path="block")
    assert block.path == "block"
    for metric, values in step.history.items():
        np.testing.assert_array_equal(block.history[metric], values)
    torch.testing.assert_close(block.final_state.x, step.final_state.x, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(NATIVE))
@pytest.mark.parametrize("variant", [{"nesterov": True}, {"dampening": False}])
def test_native_steps_follow_the_momentum_switches_and_a_schedule(name, variant):
    if not dopt.algorithms.resolve(name).uses_momentum:
        variant = {}
    schedule = MultiStep(0.05, milestones=(7, 30), gamma=0.5)
    step, native, _ = both_paths(name, quadratic(), path="native", lr=schedule, **variant)
    assert native.path == "native"
    torch.testing.assert_close(native.final_state.x, step.final_state.x, rtol=RTOL, atol=ATOL)


def test_float32_and_a_default_dtype_of_float64_run_natively():
    prob = dopt.problems.Quadratic.paper(
        n=8, d=4, p=6, sigma2=0.05, repetitions=4, seed=2, dtype=torch.float32
    )
    step, native, _ = both_paths("edm", prob, path="native")
    torch.testing.assert_close(native.final_state.x, step.final_state.x, rtol=1e-4, atol=1e-5)


def test_only_a_single_fused_update_runs_natively():
    alg = dopt.algorithms.make("dsgt", lr=0.05)
    with pytest.raises(ValueError, match="declares no fused update"):
        dopt.simulate(alg, quadratic(), dopt.topology.ring(8), 5, path="native")
    with pytest.raises(ValueError, match="path must be one of"):
        dopt.simulate(alg, quadratic(), dopt.topology.ring(8), 5, path="fast")
    edm = dopt.algorithms.make("edm", lr=0.05)
    assert edm.fused is not None and edm.fused.kind == "edm" and edm.fused.reads == ("psi", "m")
    # a named mixing kernel, a graph that is not circulant: the block path instead
    dense = dopt.simulate(edm, quadratic(), dopt.topology.ring(8), 5, kernel="dense")
    assert dense.path == "block"
    star = dopt.simulate(
        dopt.algorithms.make("dsgd", lr=0.05), quadratic(), dopt.topology.star(8), 5
    )
    assert star.path == "block"


class Anchored(NamedTuple):
    x: torch.Tensor
    anchor: torch.Tensor
    buffer: torch.Tensor
    t: int = 0


@dataclass(frozen=True)
class AnchoredEDM(dopt.algorithms.MomentumHyperParams):
    """A user's EDM under field names of its own, declaring the update its step is."""

    name: ClassVar[str] = "anchored_edm"
    State: ClassVar[type] = Anchored
    from_x0: ClassVar[tuple[str, ...]] = ("anchor",)
    needs_psd: ClassVar[bool] = True
    declares: ClassVar[bool] = True

    @property
    def fused(self) -> FusedUpdate | None:
        kind = FusedUpdate("edm", ("anchor", "buffer"), ("lr", "beta"), self.nesterov)
        return kind if self.declares else None

    def step(self, state: Anchored, grad: torch.Tensor, comm) -> Anchored:
        update = FusedUpdate("edm", ("anchor", "buffer"), ("lr", "beta"), self.nesterov)
        inputs = (state.x, state.anchor, state.buffer, grad)
        x, anchor, buffer = comm.mix_map(update, inputs, (self.lr_at(state.t), self.beta))
        return Anchored(x, anchor, buffer, state.t + 1)


@dataclass(frozen=True)
class SilentEDM(AnchoredEDM):
    declares: ClassVar[bool] = False


def test_the_native_path_is_chosen_from_the_rules_declaration():
    """A rule of its own field names that declares EDM's update runs many steps in one C
    call and equals EDM; the same step undeclared takes the block path (nothing is found
    out by running it)."""
    edm = dopt.algorithms.make("edm", lr=0.05, beta=0.8, nesterov=True)
    mine = AnchoredEDM(lr=0.05, beta=0.8, nesterov=True)
    fused = dopt.algorithms.as_method(mine).fused
    assert fused is not None and fused.reads == ("anchor", "buffer") and fused.nesterov
    silent = SilentEDM(lr=0.05, beta=0.8, nesterov=True)
    paths = ((edm, "native"), (mine, "native"), (silent, "auto"))
    runs = [
        dopt.simulate(alg, quadratic(), dopt.topology.ring(8), 40, path=path) for alg, path in paths
    ]
    assert [r.path for r in runs] == ["native", "native", "block"]
    torch.testing.assert_close(runs[1].final_state.x, runs[0].final_state.x, rtol=0, atol=0)
    torch.testing.assert_close(runs[2].final_state.x, runs[0].final_state.x)
    assert runs[1].final_state.rule.anchor.shape == runs[0].final_state.rule.psi.shape


@pytest.mark.parametrize("path", ["native", "block"])
def test_divergence_inside_a_block_stops_the_same_column_at_the_same_step(path):
    paper = dopt.problems.Quadratic.paper(n=4, d=2, p=3, sigma2=0.0, repetitions=3, seed=0)
    A = paper.A.clone()
    A[:, 1] *= 30  # column 1: curvature x900, far beyond what the step size allows
    prob = dopt.problems.Quadratic(A, paper.x_local, 0.0)
    alg = dopt.algorithms.make("ed", lr=0.1)
    run, step = (
        dopt.simulate(alg, prob, dopt.topology.ring(4), 400, path=p, record=100)
        for p in (path, "step")
    )
    assert run.path == path
    assert run.diverged.tolist() == [False, True, False] and run.diverged_at[1] == 50
    assert run.diverged_at.tolist() == step.diverged_at.tolist()
    np.testing.assert_allclose(run.history["dist_to_opt"], step.history["dist_to_opt"], RTOL, ATOL)


def small_run(path: str, **options):
    prob = dopt.problems.Quadratic.paper(n=6, d=3, p=4, sigma2=0.1, repetitions=2, seed=1)
    comm = SimulatedCommunicator(dopt.topology.ring(6))
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    plan = Plan(60, tuple(range(0, 61, 10)), period=10)
    opts = RunOptions(seed=3, log=lambda _: None, path=path, **options)
    return run_loop(alg, prob, comm, plan, opts)


@pytest.mark.parametrize("path", ["native", "block"])
def test_a_checkpointed_block_run_resumes_to_the_uninterrupted_result(tmp_path, path):
    full = small_run(path)
    assert full.path == path
    small_run(path, checkpoint_dir=tmp_path, stop_after=30)
    resumed = small_run(path, checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 30
    torch.testing.assert_close(resumed.final_state.x, full.final_state.x, rtol=0, atol=0)
    for a, b in zip(full.records, resumed.records, strict=True):
        assert a.step == b.step and a.rounds == b.rounds
        np.testing.assert_array_equal(a.metrics["dist_to_opt"], b.metrics["dist_to_opt"])
    step = small_run("step")  # and the step path's, to rounding
    torch.testing.assert_close(full.final_state.x, step.final_state.x, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("path", ["native", "block"])
def test_progress_is_reported_for_every_step(path):
    seen: list[int] = []
    run = small_run(path, progress=seen.append, stop_after=37)
    assert seen == list(range(1, 38)) and run.records[-1].step == 30
