"""The one loop: loss windows, checkpoints and divergence, for any problem."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import decentopt as dopt
from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.driver import RunOptions, run_loop
from decentopt.plan import Plan


class CountingLosses:
    """Zero gradients; the k-th call reports loss k for every agent (n = 3, one column)."""

    n, dim, dtype, x_star = 3, 2, torch.float64, None

    def __init__(self) -> None:
        self.calls = 0

    def initial_point(self) -> torch.Tensor:
        return torch.ones(self.n, self.dim, dtype=self.dtype)

    def gradient_and_loss(self, x: torch.Tensor, generator: Any) -> tuple[torch.Tensor, Any]:
        self.calls += 1
        return torch.zeros_like(x), torch.full((self.n,), float(self.calls))

    def metrics(self, x: torch.Tensor, comm: Any = None) -> dict[str, float]:
        return {"norm": float(x.pow(2).sum())}

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = state["calls"]


def quiet(_: str) -> None:
    pass


QUIET = RunOptions(log=quiet)


def test_train_loss_is_the_sum_over_agents_of_each_epochs_mean_loss():
    problem = CountingLosses()
    comm = SimulatedCommunicator(dopt.topology.ring(3))
    alg = dopt.algorithms.make("dsgd", lr=0.1)
    plan = Plan(8, (4, 8), period=4)
    run = run_loop(alg, problem, comm, plan, RunOptions(log=quiet), labels=[{"run": 0}])
    # epoch 1 sees losses 1..4 (mean 2.5), epoch 2 losses 5..8 (mean 6.5); 3 agents
    assert [r.metrics["train_loss"][0] for r in run.records] == [7.5, 19.5]
    rows = run.rows
    assert [r["epoch"] for r in rows] == [1, 2] and rows[0]["lr"] == 0.1


def noisy_quadratic_run(**kw: Any) -> Any:
    """EDM on a small noisy quadratic, 60 steps in epochs of 10 (checkpoints per epoch)."""
    prob = dopt.problems.Quadratic.paper(n=6, d=3, p=4, sigma2=0.1, repetitions=2, seed=1)
    comm = SimulatedCommunicator(dopt.topology.ring(6))
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    plan = Plan(60, tuple(range(0, 61, 10)), period=10)
    grad = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731
    return run_loop(alg, prob, comm, plan, RunOptions(seed=3, log=quiet, **kw), gradient=grad)


def test_a_checkpointed_run_resumes_to_the_uninterrupted_result(tmp_path):
    """Noise generator, problem state and records are restored: identical trajectories."""
    run = noisy_quadratic_run

    full = run()
    run(checkpoint_dir=tmp_path, stop_after=30)
    resumed = run(checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 30
    torch.testing.assert_close(resumed.final_state.x, full.final_state.x, rtol=0, atol=0)
    for a, b in zip(full.records, resumed.records, strict=True):
        assert a.step == b.step and a.rounds == b.rounds
        np.testing.assert_array_equal(a.metrics["dist_to_opt"], b.metrics["dist_to_opt"])


def test_one_column_diverging_leaves_the_others_running():
    paper = dopt.problems.Quadratic.paper(n=4, d=2, p=3, sigma2=0.0, repetitions=3, seed=0)
    A = paper.A.clone()
    A[:, 1] *= 30  # column 1: curvature x900, far beyond what the step size allows
    prob = dopt.problems.Quadratic(A, paper.x_local, 0.0)
    alg = dopt.algorithms.make("ed", lr=0.1)
    comm = SimulatedCommunicator(dopt.topology.ring(4))
    gradient = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731
    plan = Plan(2000, (0, 1000, 2000))
    run = run_loop(alg, prob, comm, plan, QUIET, gradient=gradient, metrics=prob.metrics)
    assert run.diverged.tolist() == [False, True, False] and 0 < run.diverged_at[1] <= 100
    errors = np.array([r.metrics["dist_to_opt"] for r in run.records])  # (records, columns)
    assert np.isnan(errors[1:, 1]).all() and np.isfinite(errors[:, [0, 2]]).all()
    assert (errors[-1, [0, 2]] < 1e-6 * errors[0, [0, 2]]).all()  # ED: exact convergence


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(tmp_path):
    import pytest

    run = noisy_quadratic_run

    full = run()
    for damage in ("flip", "truncate", "manifest"):
        folder = tmp_path / damage
        run(checkpoint_dir=folder, stop_after=30)
        kept = sorted(p.name for p in folder.glob("step-*"))
        assert kept == ["step-00000020", "step-00000030"]  # the last two are kept
        target = folder / "step-00000030" / "rank0.pt"
        if damage == "manifest":  # the size and checksum record itself, cut short
            target = target.with_suffix(".json")
        data = bytearray(target.read_bytes())
        if damage == "flip":
            data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
        else:
            data = data[: len(data) // 3]
        target.write_bytes(bytes(data))
        with pytest.warns(RuntimeWarning, match=r"step-00000030/rank0.*previous checkpoint"):
            resumed = run(checkpoint_dir=folder)
        assert resumed.resumed_from == 20
        torch.testing.assert_close(resumed.final_state.x, full.final_state.x, rtol=0, atol=0)


class Drifting(CountingLosses):
    """Four columns: three settle at 1; column 2 drifts away linearly, never overflowing."""

    n, dim = 3, 2

    def initial_point(self) -> torch.Tensor:
        return torch.zeros(self.n, 4, self.dim, dtype=self.dtype)

    def gradient_and_loss(self, x: torch.Tensor, generator: Any) -> tuple[torch.Tensor, Any]:
        g = x - 1.0
        g[:, 2] = -30.0
        return g, None

    def metrics(self, x: torch.Tensor, comm: Any = None) -> dict[str, torch.Tensor]:
        return {"norm": x.pow(2).sum(-1).mean(0)}


def test_a_column_far_above_the_others_counts_as_diverged():
    """A slow drift below the absolute bound (1e10) is still stopped, not averaged in."""
    comm = SimulatedCommunicator(dopt.topology.ring(3))
    alg = dopt.algorithms.make("dsgd", lr=0.1)
    run = run_loop(alg, Drifting(), comm, Plan(400, (0, 400)), QUIET)
    assert run.diverged.tolist() == [False, False, True, False]
    last = run.records[-1].metrics["norm"]
    assert np.isnan(last[2]) and np.allclose(last[[0, 1, 3]], 2.0)


def test_checkpoints_inside_an_epoch_resume_the_epochs_loss_exactly(tmp_path):
    """checkpoint_every = 3 with epochs of 4: resuming at step 6 (mid-epoch 2) keeps the
    partial loss sum, so train_loss equals the uninterrupted run's."""
    comm = lambda: SimulatedCommunicator(dopt.topology.ring(3))  # noqa: E731
    alg = dopt.algorithms.make("dsgd", lr=0.1)
    plan = Plan(8, (4, 8), period=4)
    full = run_loop(alg, CountingLosses(), comm(), plan, QUIET)
    run_loop(
        alg,
        CountingLosses(),
        comm(),
        plan,
        QUIET.but(checkpoint_dir=tmp_path, checkpoint_every=3, stop_after=7),
    )
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000003", "step-00000006"]
    resumed = run_loop(
        alg, CountingLosses(), comm(), plan, QUIET.but(checkpoint_dir=tmp_path, checkpoint_every=3)
    )
    assert resumed.resumed_from == 6
    assert [r.metrics["train_loss"][0] for r in resumed.records] == [7.5, 19.5]
    assert [r.metrics["train_loss"][0] for r in full.records] == [7.5, 19.5]


def test_checkpoints_by_minutes(tmp_path):
    """checkpoint_minutes = 0 (every check, i.e. every CHECK_EVERY steps) without epochs."""
    from decentopt.driver import CHECK_EVERY

    noisy_quadratic_run(checkpoint_dir=tmp_path, checkpoint_every=10**6, checkpoint_minutes=1e-9)
    steps = sorted(int(p.name.split("-")[1]) for p in tmp_path.glob("step-*"))
    assert steps and all(s % CHECK_EVERY == 0 for s in steps)


def test_large_states_keep_freed_memory_in_the_process(monkeypatch):
    """From LARGE_STATE_BYTES of state the loop asks glibc to recycle freed blocks
    (each step's tensors would otherwise be page-faulted in afresh)."""
    import decentopt.driver.loop as driver

    calls: list[int] = []
    monkeypatch.setattr(driver, "keep_freed_memory", lambda: calls.append(1) or True)
    prob = dopt.problems.Quadratic.paper(n=8, d=5, p=10, sigma2=0.0, repetitions=1, seed=0)
    alg = dopt.algorithms.make("dsgd", lr=0.05)
    dopt.simulate(alg, prob, dopt.topology.ring(8), 2)
    assert calls == []  # a small state leaves the process's allocator alone
    monkeypatch.setattr(driver, "LARGE_STATE_BYTES", 8 * 5 * 8)
    dopt.simulate(alg, prob, dopt.topology.ring(8), 2)
    assert calls == [1]


class Growing(Drifting):
    """Four columns that all grow by 10 % a step, finite for 700 steps: none is an outlier."""

    def initial_point(self) -> torch.Tensor:
        return torch.ones(self.n, 4, self.dim, dtype=self.dtype)

    def gradient_and_loss(self, x: torch.Tensor, generator: Any) -> tuple[torch.Tensor, Any]:
        return -x, None


def test_growth_without_overflow_counts_as_diverged():
    """Every column grows together, far past its start, without a NaN: diverged once past
    GROWTH times its starting scale, whatever ``blowup`` allows (as CHOCO-SGD with top-k
    and gamma = 1 does on ring(32), reaching 5e8 times its start in 1,000 steps)."""
    from decentopt.driver.guard import GROWTH

    comm = SimulatedCommunicator(dopt.topology.ring(3))
    alg = dopt.algorithms.make("dsgd", lr=0.1)
    run = run_loop(alg, Growing(), comm, Plan(300, (0, 300)), QUIET.but(blowup=1e30))
    assert run.diverged.all()
    # the squared norm grows 1.21 times a step from a scale of 1 + 2 = 3: past 1e6 * 3
    # after 78 steps (checked every CHECK_EVERY steps)
    first = int(np.ceil(np.log(GROWTH * 3 / 2) / np.log(1.21)))
    assert (run.diverged_at >= first).all() and (run.diverged_at < first + 64).all()


def test_a_checkpoint_of_another_number_of_agents_is_left_and_the_run_starts_afresh(tmp_path):
    import shutil

    import pytest

    other = tmp_path / "eight"
    prob = dopt.problems.Quadratic.paper(n=8, d=3, p=4, sigma2=0.1, repetitions=2, seed=1)
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    grad = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731
    comm = SimulatedCommunicator(dopt.topology.ring(8))
    plan = Plan(60, tuple(range(0, 61, 10)), period=10)
    run_loop(alg, prob, comm, plan, QUIET.but(seed=3, checkpoint_dir=other), gradient=grad)
    shutil.copytree(other, tmp_path / "six")  # into a unit of six agents
    full = noisy_quadratic_run()
    with pytest.warns(RuntimeWarning, match=r"six: the checkpoint of step 60 is of another run"):
        resumed = noisy_quadratic_run(checkpoint_dir=tmp_path / "six")
    assert resumed.resumed_from in (0, None)
    torch.testing.assert_close(resumed.final_state.x, full.final_state.x, rtol=0, atol=0)


def test_a_folder_named_like_a_checkpoint_is_not_one(tmp_path):
    from decentopt.distributed.checkpoint import latest_checkpoint

    noisy_quadratic_run(checkpoint_dir=tmp_path, stop_after=30)
    (tmp_path / "step-xyz").mkdir()
    (tmp_path / "step-xyz" / "COMPLETE").touch()
    assert latest_checkpoint(tmp_path) == 30
    resumed = noisy_quadratic_run(checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 30 and (tmp_path / "step-xyz").is_dir()


def test_a_run_under_an_outer_optimizer_resumes_to_the_uninterrupted_result(tmp_path):
    """x_sync and the outer momentum are in the checkpoint: stopped at step 30, between two
    outer steps (every 7), the resumed run ends where the uninterrupted one does."""
    prob = dopt.problems.Quadratic.paper(n=6, d=3, p=4, sigma2=0.1, repetitions=2, seed=1)
    alg = dopt.algorithms.make("dmsgd", lr=0.05, beta=0.5, outer="nesterov(0.7, 0.9, every=7)")
    plan = Plan(60, tuple(range(0, 61, 10)), period=10)
    grad = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731

    def run(**kw: Any) -> Any:
        comm = SimulatedCommunicator(dopt.topology.ring(6))
        options = RunOptions(seed=3, log=quiet, **kw)
        return run_loop(alg, prob, comm, plan, options, gradient=grad)

    full = run()
    run(checkpoint_dir=tmp_path, stop_after=30)
    resumed = run(checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 30
    for name, value in full.final_state.tensors().items():
        torch.testing.assert_close(resumed.final_state.tensors()[name], value, rtol=0, atol=0)
    assert [r.rounds for r in resumed.records] == [r.rounds for r in full.records]
    plain = dopt.algorithms.make("dmsgd", lr=0.05, beta=0.5)
    comm = SimulatedCommunicator(dopt.topology.ring(6))
    other = run_loop(plain, prob, comm, plan, RunOptions(seed=3, log=quiet), gradient=grad)
    assert not torch.allclose(other.final_state.x, full.final_state.x)
