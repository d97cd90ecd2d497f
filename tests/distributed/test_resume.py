"""A run resumed from a checkpoint equals the uninterrupted run bit for bit over every
time-varying graph (``W_t`` is picked by the communicator's round, which the checkpoint
carries), at stop steps that are not multiples of the schedule's period: in the simulator's
loop and in :class:`~decentopt.distributed.DecentralizedOptimizer`."""

from __future__ import annotations

import inspect
import threading
from typing import Any

import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.comm.base import CommStats, Shared
from decentopt.distributed import DecentralizedOptimizer
from decentopt.driver import RunOptions, run_loop
from decentopt.plan import Plan
from decentopt.topology import REGISTRY, TopologySchedule

N = 4


def schedules() -> dict[str, TopologySchedule]:
    """Every time-varying family of :mod:`decentopt.topology` over ``N`` agents (found in its
    registry, so that a new family is covered too), and a sequence of matrices."""
    found = {}
    for name, family in REGISTRY.items():
        if inspect.signature(family).return_annotation in ("TopologySchedule", TopologySchedule):
            found[name] = family(N)
    found["base_graph(base=3)"] = dopt.topology.base_graph(N, base=3)
    ring, star = dopt.topology.ring(N).W, dopt.topology.star(N).W
    found["sequence"] = dopt.topology.sequence([ring, dopt.topology.complete(N).W, star])
    return found


SCHEDULES = schedules()


def test_every_time_varying_family_is_covered():
    names = {s.name.split("(")[0] for s in SCHEDULES.values()}
    families = {"one_peer_exponential", "one_peer_hypercube", "base_graph", "random_matchings"}
    assert families | {"directed_one_peer_exponential", "sequence"} <= names
    assert all(s.period != 1 for s in SCHEDULES.values())


def methods(schedule: TopologySchedule) -> dict[str, Any]:
    """Exact and delayed gossip: push-sum over a directed schedule, plain mixing otherwise."""
    if "symmetric" not in schedule.offers:
        return {
            "sgp": dopt.algorithms.make("dmsgd", lr=0.05, beta=0.5, gossip="push_sum"),
            "osgp": dopt.algorithms.make("osgp", lr=0.05, beta=0.5),
        }
    return {
        "exact": dopt.algorithms.make("dmsgd", lr=0.05, beta=0.5),
        "delayed(1)": dopt.algorithms.make("dmsgd", lr=0.05, beta=0.5, gossip="delayed(1)"),
    }


CASES = [(s, m) for s, schedule in SCHEDULES.items() for m in methods(schedule)]


def quiet(_: str) -> None:
    pass


@pytest.mark.parametrize("path", ["step", "block"])
@pytest.mark.parametrize(("schedule", "method"), CASES)
def test_the_simulator_resumes_a_time_varying_run_exactly(tmp_path, schedule, method, path):
    topology = SCHEDULES[schedule]
    alg = methods(topology)[method]
    prob = dopt.problems.Quadratic.paper(n=N, d=3, p=4, sigma2=0.1, repetitions=2, seed=1)
    grad = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731
    plan = Plan(12, tuple(range(13)))

    def run(**kw: Any) -> Any:
        comm = SimulatedCommunicator(topology)
        options = RunOptions(seed=3, log=quiet, checkpoint_every=1, path=path, **kw)
        return run_loop(alg, prob, comm, plan, options, gradient=grad)

    full = run()
    for stop in (5, 7):  # odd: not a multiple of any period here but one (tested anyway)
        folder = tmp_path / str(stop)
        run(checkpoint_dir=folder, stop_after=stop)
        resumed = run(checkpoint_dir=folder)
        assert resumed.resumed_from == stop
        assert torch.equal(resumed.final_state.x, full.final_state.x)
        assert [r.rounds for r in resumed.records] == [r.rounds for r in full.records]


class Board:
    """What the ranks of :class:`Lockstep` share: one slot per rank and a barrier."""

    def __init__(self, n: int) -> None:
        self.rows: list[torch.Tensor | None] = [None] * n
        self.barrier = threading.Barrier(n, timeout=60)


class Lockstep(Shared):
    """Rank ``rank`` of ``n`` ranks run as threads of this process: each round every rank
    posts its row and reads its round-``t`` neighbours' (the gather form of ``W_t``), the
    arithmetic of :class:`~decentopt.comm.DistributedCommunicator` without processes."""

    def __init__(self, topology: TopologySchedule, rank: int, board: Board) -> None:
        self.topology, self.rank, self.board, self.stats = topology, rank, board, CommStats()

    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        this = self.topology.at(self.stats.rounds)
        self.board.rows[self.rank] = z.detach().clone()
        self.board.barrier.wait()
        rows, i = self.board.rows, self.rank
        mixed = z.detach() * float(this.self_weight[i])
        for peers, weights in zip(this.peers, this.weights, strict=True):
            mixed = mixed + float(weights[i]) * rows[int(peers[i])]  # type: ignore[operator]
        self.board.barrier.wait()
        self.stats.add_round(float(this.messages.mean()), int(this.messages.max()), 0, 0)
        return mixed if out is None else out.copy_(mixed)

    def mix_compressed(self, z: torch.Tensor, compression: Any) -> Any:  # pragma: no cover
        raise NotImplementedError("not called here")

    def mean(self, z: torch.Tensor) -> torch.Tensor:  # pragma: no cover - not called here
        raise NotImplementedError("not called here")

    def barrier(self, stage: str) -> None:  # pragma: no cover - not called here
        self.board.barrier.wait()


def on_ranks(work: Any) -> list[Any]:
    """``work(rank)`` on ``N`` threads; their results, or the first error raised."""
    results: list[Any] = [None] * N
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            results[rank] = work(rank)
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(N)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def train(opt: DecentralizedOptimizer, model: torch.nn.Module, rank: int, steps: range) -> None:
    for t in steps:
        g = torch.Generator().manual_seed(1000 * rank + t)
        x, y = torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def copied(tree: Any) -> Any:
    """A copy of the tensors in ``tree``, as ``torch.save`` would keep them."""
    return torch.utils._pytree.tree_map(
        lambda v: v.clone() if isinstance(v, torch.Tensor) else v, tree
    )


def model_of(rank: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(rank)
    model = torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


@pytest.mark.parametrize(("schedule", "method"), CASES)
def test_the_optimizer_resumes_a_time_varying_run_exactly(schedule, method):
    """Stopped after 7 steps and resumed by a fresh optimizer over a fresh communicator (a
    restarted job) from ``state_dict()``: every rank ends where the uninterrupted run does."""
    topology = SCHEDULES[schedule]
    alg = methods(topology)[method]
    stop, steps = 7, 12
    board = Board(N)

    def uninterrupted(rank: int) -> tuple[Any, Any, torch.Tensor]:
        model = model_of(rank)
        opt = DecentralizedOptimizer(model.parameters(), alg, Lockstep(topology, rank, board))
        train(opt, model, rank, range(stop))
        saved = copied((model.state_dict(), opt.state_dict()))
        train(opt, model, rank, range(stop, steps))
        return *saved, torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    def resumed(rank: int) -> torch.Tensor:
        model_state, opt_state, _ = first[rank]
        model = model_of(rank + 10)
        model.load_state_dict(model_state)
        opt = DecentralizedOptimizer(model.parameters(), alg, Lockstep(topology, rank, board))
        opt.load_state_dict(opt_state)
        train(opt, model, rank, range(stop, steps))
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    first = on_ranks(uninterrupted)
    again = on_ranks(resumed)
    for rank in range(N):
        assert torch.equal(again[rank], first[rank][2]), f"rank {rank}"
    assert not torch.equal(first[0][2], first[1][2])  # the ranks differ: a real check


def test_a_checkpoint_without_the_round_loads_assuming_steps_times_rounds_per_step():
    """A state saved before the round was kept: one parameter group trained from the start,
    so the assumed round (steps x rounds per step) is the true one and the resume is exact."""
    topology = SCHEDULES["one_peer_exponential"]
    alg = dopt.algorithms.make("dmsgd", lr=0.05, beta=0.5, gossip="delayed(1)")
    stop, steps = 7, 12
    board = Board(N)

    def uninterrupted(rank: int) -> tuple[Any, Any, torch.Tensor]:
        model = model_of(rank)
        opt = DecentralizedOptimizer(model.parameters(), alg, Lockstep(topology, rank, board))
        train(opt, model, rank, range(stop))
        saved = ({k: v.clone() for k, v in model.state_dict().items()}, opt.state_dict())
        assert saved[1].pop("comm")["rounds"] == stop  # as an older version saved it
        saved = (saved[0], copied(saved[1]))
        train(opt, model, rank, range(stop, steps))
        return *saved, torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    def resumed(rank: int) -> torch.Tensor:
        model = model_of(rank)
        model.load_state_dict(first[rank][0])
        comm = Lockstep(topology, rank, board)
        opt = DecentralizedOptimizer(model.parameters(), alg, comm)
        opt.load_state_dict(first[rank][1])
        assert comm.stats.rounds == stop
        train(opt, model, rank, range(stop, steps))
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    first = on_ranks(uninterrupted)
    with pytest.warns(RuntimeWarning, match=r"does not record .* assuming round 7"):
        again = on_ranks(resumed)  # (warnings are caught process-wide: not in the threads)
    for rank in range(N):
        assert torch.equal(again[rank], first[rank][2])
