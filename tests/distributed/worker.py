"""A rank of the distributed tests (started by tests/distributed/test_distributed.py).

Usage: python worker.py MODE OUT   with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set.
MODE "equivalence": every registered algorithm on the quadratic problem and on
a tiny network, over the ring and over time-varying topologies (SCHEDULES);
each rank saves its final row to OUT/MODE-rank{r}.pt.
MODE "failure": rank 3 exits during step 5; the others must fail cleanly.
MODE "hang": rank 3 stops answering at step 5; its neighbours must time out.
MODE "stale": delayed gossip with bounded staleness, rank 0 slowed by a sleep in each step;
each rank saves how far its messages lagged and when it finished.
MODE "stale_failure" / "stale_hang": the same, and rank 3 exits (first hangs) at step 5.
MODE "stale_timed": bounded staleness with each rank computing for the time model
TIMED's compute times (a sleep before each step); each rank saves the ages it used per
step and its final row.
MODE "resume": the optimizer over time-varying graphs, stopped after 7 steps and resumed
from its state_dict() by a fresh optimizer and communicator; both final rows are saved.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

import decentopt as dopt
from decentopt.comm import DistributedCommunicator, PeerFailure
from decentopt.driver import TimeModel
from decentopt.problems.neural import NeuralProblem

STEPS = 15


#: registered algorithms, plus the tracking methods in their packed one-round form, the
#: compressed methods with each compression operator (bytes on the wire), and rules composed
#: with gossips no paper pairs them with (two channels in one compressed message, push-sum
#: of a rule of its own, several rounds per mix, messages tau rounds late)
VARIANTS = {name: (name, {}) for name in dopt.algorithms.names()} | {
    "dsgt/packed": ("dsgt", {"atc": False}),
    "dsgt_hb/packed": ("dsgt_hb", {"atc": False}),
    "choco_dsgd/top_k": ("choco_dsgd", {"compression": "top_k(0.5)", "gamma": 0.6}),
    "choco_dsgd/random_k": ("choco_dsgd", {"compression": "random_k(0.5)", "gamma": 0.6}),
    "choco_ed/sign": ("choco_ed", {"compression": "sign", "gamma": 0.4}),
    "choco_edm/qsgd": ("choco_edm", {"compression": "qsgd(3)", "gamma": 0.6}),
    "dsgt/choco": ("dsgt", {"atc": False, "gossip": "choco(qsgd(3), gamma=0.6)"}),
    "mt/choco": ("mt", {"gossip": "choco(top_k(0.5), gamma=0.6)"}),
    "qg_dsgdm/push_sum": ("qg_dsgdm", {"gossip": "push_sum"}),
    "edm/multi_round": ("edm", {"gossip": "multi_round(3)"}),
    "dsgd/delayed": ("dsgd", {"gossip": "delayed(2)"}),
    "dsgd/delayed1": ("dsgd", {"gossip": "delayed(1)"}),
    "dmsgd/delayed": ("dmsgd", {"gossip": "delayed(2)"}),
    "dmsgd/stale": ("dmsgd", {"gossip": "delayed(1, staleness=1)"}),  # the bound is the delay
    "qg_dsgdm/delayed": ("qg_dsgdm", {"gossip": "delayed(1)"}),
    "dmsgd/delayed_push_sum": ("dmsgd", {"gossip": "delayed(2, push_sum)"}),
    "dsgd/local": ("dsgd", {"gossip": "local(4)"}),
    "dmsgd/local_push_sum": ("dmsgd", {"gossip": "local(3, push_sum)"}),
    "dsgt/local": ("dsgt", {"atc": False, "gossip": "local(3)"}),
    "dmsgd/periodic_global": ("dmsgd", {"gossip": "periodic_global(4)"}),
    "dsgd/periodic_global_choco": ("dsgd", {"gossip": "periodic_global(4, choco(top_k(0.5)))"}),
    "dsgd/outer": ("dsgd", {"outer": "nesterov(lr=0.8, beta=0.5, every=4)"}),
    "ed/outer": ("ed", {"outer": "nesterov(lr=0.7, beta=0.9, every=4)"}),
    "dmsgd/local_outer": ("dmsgd", {"gossip": "local(6)", "outer": "nesterov(0.7, 0.9, every=4)"}),
}

#: the variants whose calls on the network are counted step by step
QUIET = (
    "dsgd/local",
    "dmsgd/local_push_sum",
    "dmsgd/periodic_global",
    "k_gt",
    "led",
    "dsgd/outer",
    "dmsgd/local_outer",
)
#: what crosses ranks: point-to-point messages (each P2POp of a batch; isend and irecv
#: themselves must stay torch's own, which P2POp checks) and collectives of torch.distributed
NETWORK_CALLS = (
    "P2POp", "send", "recv", "batch_isend_irecv", "all_reduce", "all_gather",
    "all_gather_object", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier",
)  # fmt: skip


def method(name: str):
    base, extra = VARIANTS[name]
    return dopt.algorithms.make(base, **hyper(base), **extra)


def on_tree(name: str) -> bool:
    """Whether a variant relays over a tree (the chain here) rather than gossips (the ring)."""
    return "tree" in method(name).needs


def home(name: str) -> dopt.topology.Topology:
    """The static graph a variant runs on in these tests."""
    return dopt.topology.chain(4) if on_tree(name) else dopt.topology.ring(4)


def on_schedules(name: str) -> bool:
    """Whether a variant runs over time-varying graphs (relaying needs one fixed tree,
    compressed gossip one fixed W)."""
    return "static" not in method(name).needs


#: directed graphs of the push-sum methods: (problem kind, graph); the random one is
#: column- but not row-stochastic
DIRECTED = {
    "random_directed": ("quadratic", lambda: dopt.topology.random_directed(4, 0.3, seed=2)),
    "directed_one_peer_exp": ("net", lambda: dopt.topology.directed_one_peer_exponential(4)),
}


def on_directed(name: str) -> bool:
    return "symmetric" not in method(name).needs


#: time-varying topologies of the equivalence runs: (problem kind, schedule)
SCHEDULES = {
    "matchings": ("quadratic", lambda: dopt.topology.random_matchings(4, seed=3)),
    "one_peer_exp": ("net", lambda: dopt.topology.one_peer_exponential(4)),
}


def hyper(name: str) -> dict:
    hp = {"lr": 0.05}
    if dopt.algorithms.resolve(name).uses_momentum:
        hp["beta"] = 0.8
    return hp


def quadratic() -> dopt.problems.Quadratic:
    return dopt.problems.Quadratic.paper(n=4, d=3, p=5, c=0.5, sigma2=0.05, repetitions=2, seed=0)


def tiny_net(rows: np.ndarray, seed: int = 0) -> NeuralProblem:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 5, generator=g)
    y = torch.randint(0, 3, (40,), generator=g)
    data = dopt.data.Dataset("toy", x, y, x[:4], y[:4], 3)
    shares = np.array_split(np.arange(40), 4)
    return NeuralProblem(model, data, tuple(shares[i] for i in rows), batch_size=10, backend="loop")


def steps_of(alg, kind: str, rank: int, comm: DistributedCommunicator) -> torch.Tensor:
    """This rank's row after STEPS steps of ``alg`` on the quadratic or the tiny network."""
    if kind == "quadratic":
        rows = slice(rank, rank + 1)
        prob = quadratic()
        gen = torch.Generator().manual_seed(7)
        state = alg.init(prob.initial_point()[rows])
        for _ in range(STEPS):
            state = alg.step(state, prob.gradient(state.x, gen, rows=rows), comm)
        return state.x.clone()
    net = tiny_net([rank])
    state = alg.init(net.initial_point())
    for _ in range(STEPS):
        grads, _ = net.gradient_and_loss(state.x)
        state = alg.step(state, grads, comm)
    return state.x.clone()


def equivalence(rank: int, ring: DistributedCommunicator, out: Path) -> None:
    results = {}
    chain = DistributedCommunicator(dopt.topology.chain(4), timeout=5.0)
    for variant, (name, extra) in VARIANTS.items():
        comm = chain if on_tree(variant) else ring
        alg = dopt.algorithms.make(name, **hyper(name), **extra)
        sent = 0
        for kind in ("quadratic", "net"):  # each from round 0, as a fresh simulator
            comm.stats.reset()
            results[f"{kind}/{variant}"] = steps_of(alg, kind, rank, comm)
            sent += comm.stats.bytes_sent
        results[f"bytes/{variant}"] = torch.tensor(sent)
        comm.stats.reset()
        # the same training through the torch.optim-style wrapper on a plain model
        net = tiny_net([rank])
        model = net.model
        opt = dopt.distributed.DecentralizedOptimizer(
            model.parameters(), name, comm, **hyper(name), **extra
        )
        ix = torch.from_numpy(net.sampler.indices[0])
        for _ in range(STEPS):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                model(net.data.x_train[ix]), net.data.y_train[ix]
            )
            loss.backward()
            opt.step()
        results[f"optimizer/{variant}"] = torch.cat(
            [p.detach().reshape(-1) for p in model.parameters()]
        )[None]
    for label, (kind, schedule) in (SCHEDULES | DIRECTED).items():
        tv = DistributedCommunicator(schedule(), timeout=5.0)
        tv.check_consistency()
        for variant, (name, extra) in VARIANTS.items():
            if not on_schedules(variant) or (label in DIRECTED and not on_directed(variant)):
                continue
            tv.stats.reset()  # W_t from round 0, as a fresh simulator
            alg = dopt.algorithms.make(name, **hyper(name), **extra)
            results[f"{label}/{variant}"] = steps_of(alg, kind, rank, tv)
    results |= network_calls(rank, ring)
    torch.save(results, out / f"equivalence-rank{rank}.pt")


def network_calls(rank: int, comm: DistributedCommunicator) -> dict[str, torch.Tensor]:
    """For each variant of QUIET, the calls of torch.distributed each step made, by name
    (``calls/<variant>``: steps x NETWORK_CALLS)."""
    import torch.distributed as dist

    made: list[str] = []

    def counted(name, fn):
        def call(*args, **kwargs):
            made.append(name)
            return fn(*args, **kwargs)

        return call

    originals = {name: getattr(dist, name) for name in NETWORK_CALLS}
    for name, fn in originals.items():
        setattr(dist, name, counted(name, fn))
    out = {}
    try:
        prob = quadratic()
        for variant in QUIET:
            alg = method(variant)
            gen = torch.Generator().manual_seed(7)
            comm.stats.reset()
            state = alg.init(prob.initial_point()[rank : rank + 1])
            table = torch.zeros(8, len(NETWORK_CALLS), dtype=torch.int64)
            for t in range(8):
                grad = prob.gradient(state.x, gen, rows=slice(rank, rank + 1))
                made.clear()
                state = alg.step(state, grad, comm)
                for name in made:
                    table[t, NETWORK_CALLS.index(name)] += 1
            out[f"calls/{variant}"] = table
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
    return out


def train_with(opt, model: torch.nn.Module, x, y, steps: int, inf_at: int | None = None,
               rank: int = 0, scaler=None) -> torch.Tensor:  # fmt: skip
    """``steps`` steps; with ``inf_at``, rank 1's gradient overflows at that step."""
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        if step == inf_at and rank == 1:
            next(model.parameters()).grad.view(-1)[0] = float("inf")
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def optimizer_patterns(rank: int, comm: DistributedCommunicator, out: Path) -> None:
    """The torch.optim-style optimizer and wrap() in real multi-process use."""
    results = {}
    net = tiny_net([rank])
    ix = torch.from_numpy(net.sampler.indices[0])
    x, y = net.data.x_train[ix], net.data.y_train[ix]
    chain = DistributedCommunicator(dopt.topology.chain(4), timeout=5.0)
    for variant, (name, extra) in VARIANTS.items():
        for overlap in (False, True):  # every parameter its own bucket and gossip round
            for shared in (comm, chain):  # both runs from round 0: random operators key on it
                shared.stats.reset()
            model = tiny_net([rank]).model
            opt = dopt.distributed.DecentralizedOptimizer(
                model.parameters(), name, chain if on_tree(variant) else comm,
                overlap=overlap, bucket_cap_mb=1e-5,
                **hyper(name), **extra,
            )  # fmt: skip
            results[f"{variant}/overlap={overlap}"] = train_with(opt, model, x, y, 5)
    model = tiny_net([rank]).model
    base = torch.optim.SGD(model.parameters(), lr=0.05)
    results["wrap/sgd-dsgd"] = train_with(dopt.distributed.wrap(base, "dsgd", comm), model, x, y, 5)
    model = tiny_net([rank]).model
    results["dsgd"] = train_with(
        dopt.distributed.DecentralizedOptimizer(model.parameters(), "dsgd", comm, lr=0.05),
        model, x, y, 5,
    )  # fmt: skip
    # the complete graph, identical data on every rank: any combination is AdamW alone
    complete = DistributedCommunicator(dopt.topology.complete(4), timeout=5.0)
    shared = tiny_net([0])
    xs, ys = shared.data.x_train[:10], shared.data.y_train[:10]
    for how in ("dsgd", "edm", "dsgt", "sgp"):
        model = tiny_net([0]).model
        adamw = torch.optim.AdamW(model.parameters(), lr=0.01)
        wrapped = dopt.distributed.wrap(adamw, how, complete)
        results[f"adamw/{how}"] = train_with(wrapped, model, xs, ys, 5)
    model = tiny_net([0]).model
    results["adamw/alone"] = train_with(
        torch.optim.AdamW(model.parameters(), lr=0.01), model, xs, ys, 5
    )
    # a GradScaler: rank 1 overflows at step 2; every rank skips that step, nobody hangs
    model = tiny_net([rank]).model
    opt = dopt.distributed.DecentralizedOptimizer(
        model.parameters(), "edm", comm, lr=0.05, beta=0.8
    )
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    results["scaler/overflow"] = train_with(opt, model, x, y, 5, inf_at=2, rank=rank, scaler=scaler)
    results["scaler/scale"] = torch.tensor(scaler.get_scale())
    model = tiny_net([rank]).model
    opt = dopt.distributed.DecentralizedOptimizer(
        model.parameters(), "edm", comm, lr=0.05, beta=0.8
    )
    results["scaler/reference"] = train_with(opt, model, x, y, 4)  # the same without step 2
    # a common start and averaged buffers
    torch.manual_seed(100 + rank)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4))
    model[1].running_mean.fill_(float(rank))
    dopt.distributed.broadcast_parameters(model, src=0)
    results["broadcast"] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    model[1].running_mean.fill_(float(rank))
    dopt.distributed.average_buffers(model)
    results["buffers"] = model[1].running_mean.clone()
    torch.save(results, out / f"optimizer-rank{rank}.pt")


def failure(rank: int, comm: DistributedCommunicator, out: Path, hang: bool = False) -> None:
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.5)
    prob = quadratic()
    gen = torch.Generator().manual_seed(7)
    rows = slice(rank, rank + 1)
    state = alg.init(prob.initial_point()[rows])
    start = time.monotonic()  # the processes are up: what the code controls starts here
    for step in range(100):
        if rank == 3 and step == 5:
            if hang:  # a peer stays alive but stops talking
                time.sleep(8)  # longer than the 5 s gossip timeout
            os._exit(17)  # a peer dies without a word
        try:
            state = alg.step(state, prob.gradient(state.x, gen, rows=rows), comm)
        except PeerFailure as exc:
            elapsed = time.monotonic() - start
            (out / f"failure-rank{rank}.txt").write_text(f"step {step} ({elapsed:.2f} s): {exc}")
            os._exit(3)


def stale(rank: int, comm: DistributedCommunicator, out: Path, dies: str = "") -> None:
    """40 steps of DSGD with ``delayed(1, staleness=3)``; rank 0 sleeps 50 ms a step; with
    ``dies``, rank 3 exits during step 5 (``"exit"``) or first stays silent (``"hang"``)."""
    alg = dopt.algorithms.make("dsgd", lr=0.05, gossip="delayed(1, staleness=3)")
    prob = quadratic()
    gen = torch.Generator().manual_seed(7)
    rows = slice(rank, rank + 1)
    state = alg.init(prob.initial_point()[rows])
    start = time.monotonic()
    for step in range(40):
        if rank == 0:
            time.sleep(0.05)
        if dies and rank == 3 and step == 5:
            time.sleep(8 if dies == "hang" else 0)  # longer than the 5 s timeout
            os._exit(17)
        try:
            state = alg.step(state, prob.gradient(state.x, gen, rows=rows), comm)
        except PeerFailure as exc:
            elapsed = time.monotonic() - start
            (out / f"failure-rank{rank}.txt").write_text(f"step {step} ({elapsed:.2f} s): {exc}")
            os._exit(3)
    seconds = time.monotonic() - start
    comm.settle()
    result = {"oldest": comm.oldest, "seconds": seconds, "x": state.x}
    torch.save(result, out / f"stale-rank{rank}.pt")


#: the time model of "stale_timed": rank 0 computes 0.24 s a step, the others 0.03 s; its
#: ages stay the same under 10 ms of jitter in every compute and link time (checked against
#: the simulation of the ranks, decentopt.driver.arrivals)
TIMED = TimeModel(compute=0.03, slow=(0,), factor=8.0)
TIMED_STEPS = 16
TIMED_GOSSIP = "delayed(1, staleness=3)"


def timed_problem(world: int) -> dopt.problems.Quadratic:
    return dopt.problems.Quadratic.paper(n=world, d=3, p=5, c=0.5, sigma2=0.0, seed=0)


def stale_timed(rank: int, comm: DistributedCommunicator, out: Path) -> None:
    """DSGD with TIMED_GOSSIP, each step preceded by the rank's compute time under TIMED."""
    from decentopt.driver.timeline import compute_times

    alg = dopt.algorithms.make("dsgd", lr=0.05, gossip=TIMED_GOSSIP)
    prob = timed_problem(comm.world_size)
    compute = compute_times(TIMED, comm.world_size, TIMED_STEPS)
    gen = torch.Generator().manual_seed(7)
    rows = slice(rank, rank + 1)
    state = alg.init(prob.initial_point()[rows])
    ages = []
    comm.barrier("start")  # the clocks start together
    for step in range(TIMED_STEPS):
        time.sleep(float(compute[step, rank]))
        state = alg.step(state, prob.gradient(state.x, gen, rows=rows), comm)
        ages.append(comm.ages)
    comm.settle()
    torch.save({"ages": ages, "x": state.x}, out / f"stale_timed-rank{rank}.pt")


#: time-varying graphs and methods of the resume mode (directed: push-sum's OSGP)
RESUMES = {
    "one_peer_exponential/exact": ("one_peer_exponential", "dmsgd", None),
    "one_peer_exponential/delayed(1)": ("one_peer_exponential", "dmsgd", "delayed(1)"),
    "random_matchings/delayed(2)": ("random_matchings", "dmsgd", "delayed(2)"),
    "base_graph/exact": ("base_graph", "dmsgd", None),
    "directed_one_peer_exponential/osgp": ("directed_one_peer_exponential", "osgp", None),
}


def resume(rank: int, ring: DistributedCommunicator, out: Path) -> None:
    """Per case: 12 steps straight, and 7 steps, a save, and 5 more in a fresh optimizer
    over a fresh communicator (the messages of the first are settled first)."""
    from decentopt.distributed import DecentralizedOptimizer

    def model() -> torch.nn.Module:
        torch.manual_seed(rank)
        return torch.nn.Linear(3, 1).double()

    def train(opt, net, steps: range) -> None:
        for t in steps:
            g = torch.Generator().manual_seed(1000 * rank + t)
            x, y = torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()

    def row(net) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in net.parameters()])

    results = {}
    for case, (graph, name, gossip) in RESUMES.items():
        topology = dopt.topology.make(graph, ring.world_size)
        alg = dopt.algorithms.make(name, lr=0.05, beta=0.5, gossip=gossip)
        comm = DistributedCommunicator(topology, timeout=5.0)
        net = model()
        opt = DecentralizedOptimizer(net.parameters(), alg, comm)
        train(opt, net, range(7))
        saved = (
            {k: v.clone() for k, v in net.state_dict().items()},
            torch.utils._pytree.tree_map(
                lambda v: v.clone() if isinstance(v, torch.Tensor) else v, opt.state_dict()
            ),
        )
        train(opt, net, range(7, 12))
        comm.settle()
        again = DistributedCommunicator(topology, timeout=5.0)
        fresh = model()
        fresh.load_state_dict(saved[0])
        opt = DecentralizedOptimizer(fresh.parameters(), alg, again)
        opt.load_state_dict(saved[1])
        train(opt, fresh, range(7, 12))
        again.settle()
        results[case] = (row(net), row(fresh))
    torch.save(results, out / f"resume-rank{rank}.pt")


def collective_hang(rank: int, comm: DistributedCommunicator, out: Path, stage: str) -> None:
    """Rank 3 stays alive but never joins an average (or a barrier); the others must fail."""
    start = time.monotonic()
    if rank == 3:
        time.sleep(15)
        os._exit(17)
    try:
        if stage == "mean":
            comm.mean(torch.ones(1, 3))
        else:
            comm.barrier("checkpoint")
    except PeerFailure as exc:
        (out / f"failure-rank{rank}.txt").write_text(f"{time.monotonic() - start:.1f} s: {exc}")
        os._exit(3)


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    torch.set_default_dtype(torch.float64)
    rank, world = dopt.distributed.init("gloo", timeout=60)
    comm = DistributedCommunicator(dopt.topology.ring(world), timeout=5.0)
    comm.check_consistency()
    try:
        modes = {
            "equivalence": equivalence,
            "optimizer": optimizer_patterns,
            "failure": failure,
            "hang": lambda r, c, o: failure(r, c, o, hang=True),
            "stale": stale,
            "stale_timed": stale_timed,
            "resume": resume,
            "stale_failure": lambda r, c, o: stale(r, c, o, dies="exit"),
            "stale_hang": lambda r, c, o: stale(r, c, o, dies="hang"),
            "hang_mean": lambda r, c, o: collective_hang(r, c, o, "mean"),
            "hang_barrier": lambda r, c, o: collective_hang(r, c, o, "barrier"),
        }
        modes[mode](rank, comm, out)
    except Exception:
        (out / f"error-rank{rank}.txt").write_text(traceback.format_exc())
        raise
    dopt.distributed.finalize()


if __name__ == "__main__":
    main()
