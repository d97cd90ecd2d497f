"""A process of the group-form tests (started by tests/distributed/test_groups.py).

Usage: python group_worker.py OUT   with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set,
4 processes: 2 agents of 2 processes each (processes 0, 1 run agent 0; 2, 3 agent 1).
Every variant of the shared suite trains the tiny network through
``DecentralizedOptimizer`` over a ``GroupCommunicator``, each process on its own share
of the data (the agent's gradient is the mean of its two processes'); a variant the
group form refuses records its one-line error. Saves OUT/group-rank{r}.pt.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import numpy as np
import torch

import decentopt as dopt
from tests.distributed import worker

#: two agents, unequal weights (so they do not agree after one mix); a tree too (RelaySGD)
W2 = np.array([[0.75, 0.25], [0.25, 0.75]])
#: variants also run with overlap=True and one bucket per parameter
OVERLAPPED = ("edm", "dsgt/packed", "choco_edm/qsgd", "relaysgd")


def train(name: str, extra: dict, comm, rank: int, **options) -> torch.Tensor:
    net = worker.tiny_net([rank])  # this process's own share of the data
    model = net.model
    ix = torch.from_numpy(net.sampler.indices[0])
    x, y = net.data.x_train[ix], net.data.y_train[ix]
    comm.stats.reset()  # from round 0, as a fresh simulator (random operators key on it)
    opt = dopt.distributed.DecentralizedOptimizer(
        model.parameters(), name, comm, **worker.hyper(name), **extra, **options
    )
    return worker.train_with(opt, model, x, y, worker.STEPS)


#: 16 agents on the 4 processes: the graphs of each kind of variant
MANY = {
    "ring": lambda: dopt.topology.ring(16),
    "one_peer_exp": lambda: dopt.topology.one_peer_exponential(16),
    "directed": lambda: dopt.topology.directed_one_peer_exponential(16),
    "chain": lambda: dopt.topology.chain(16),
}


def quadratic16() -> dopt.problems.Quadratic:
    return dopt.problems.Quadratic.paper(n=16, d=3, p=5, c=0.5, sigma2=0.05, repetitions=2, seed=0)


def many_graphs(variant: str) -> list[str]:
    """The graphs a variant runs on here: its home (the chain for relaying), and the
    time-varying and directed ones it supports."""
    if worker.on_tree(variant):
        return ["chain"]
    kinds = ["ring"] + ["one_peer_exp"] * worker.on_schedules(variant)
    return kinds + ["directed"] * worker.on_directed(variant)


def many(rank: int) -> dict[str, object]:
    """Every variant with 4 agents on each of the 4 processes, on the quadratic."""
    results: dict[str, object] = {}
    comms = {}
    for label, build in MANY.items():
        comms[label] = dopt.comm.ManyAgentCommunicator(build(), timeout=10.0)
    rows = slice(4 * rank, 4 * rank + 4)
    prob = quadratic16()
    for variant in worker.VARIANTS:
        for label in many_graphs(variant):
            comm = comms[label]
            comm.stats.reset()  # W_t from round 0, as a fresh simulator
            alg = worker.method(variant)
            gen = torch.Generator().manual_seed(7)
            state = alg.init(prob.initial_point()[rows])
            try:
                for _ in range(worker.STEPS):
                    state = alg.step(state, prob.gradient(state.x, gen, rows=rows), comm)
            except ValueError as exc:
                results[f"many-refused/{label}/{variant}"] = str(exc)
                continue
            results[f"many/{label}/{variant}"] = state.x.clone()
            results[f"many-bytes/{label}/{variant}"] = comm.stats.bytes_sent
    return results


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_default_dtype(torch.float64)
    rank, _ = dopt.distributed.init("gloo", timeout=60)
    try:
        comm = dopt.comm.GroupCommunicator(
            dopt.topology.from_matrix(W2), procs_per_agent=2, timeout=10.0
        )
        comm.check_consistency()
        results: dict[str, object] = {"agent": comm.rank, "position": comm.position}
        for variant, (name, extra) in worker.VARIANTS.items():
            try:
                results[variant] = train(name, extra, comm, rank)
            except ValueError as exc:  # refused
                results[f"refused/{variant}"] = str(exc)
                continue
            results[f"bytes/{variant}"] = comm.stats.bytes_sent
            results[f"rounds/{variant}"] = comm.stats.rounds
            if variant in OVERLAPPED:
                for overlap, label in ((False, "buckets"), (True, "overlap")):
                    results[f"{label}/{variant}"] = train(
                        name, extra, comm, rank, overlap=overlap, bucket_cap_mb=1e-5
                    )
        # wrap(): the base optimizer steps on the agent's mean gradient
        net = worker.tiny_net([rank])
        ix = torch.from_numpy(net.sampler.indices[0])
        base = torch.optim.SGD(net.model.parameters(), lr=0.05)
        wrapped = dopt.distributed.wrap(base, "dsgd", comm)
        x, y = net.data.x_train[ix], net.data.y_train[ix]
        results["wrap/sgd-dsgd"] = worker.train_with(wrapped, net.model, x, y, worker.STEPS)
        # a process that starts elsewhere takes its agent's first process's point
        model = worker.tiny_net([rank], seed=rank).model
        dopt.distributed.DecentralizedOptimizer(model.parameters(), "dsgd", comm, lr=0.1)
        results["start"] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        results |= many(rank)
        torch.save(results, out / f"group-rank{rank}.pt")
    except Exception:
        (out / f"error-rank{rank}.txt").write_text(traceback.format_exc())
        raise
    dopt.distributed.finalize()


if __name__ == "__main__":
    main()
