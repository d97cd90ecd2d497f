"""Decentralized training with one agent per process: a small CNN on Dirichlet-split digits.

Run on one machine with 4 processes:

    torchrun --nproc-per-node 4 examples/train_dirichlet.py --algorithm edm --epochs 20
    decentopt launch -n 4 examples/train_dirichlet.py --algorithm edm --epochs 20

An agent may also be a group of processes that average their gradients and gossip one
shard of the parameters each (here 2 agents of 2 processes; on 2 machines, one agent
per machine: torchrun --nnodes 2 --nproc-per-node 2 ... --procs-per-agent 2):

    decentopt launch -n 4 --procs-per-agent 2 examples/train_dirichlet.py --epochs 20

Each rank holds its Dirichlet(phi) share of scikit-learn's digits, trains its
own copy of the model with ``DecentralizedOptimizer`` and gossips with its ring
neighbours only. Checkpoints go to ``--checkpoints`` every epoch, in a folder named
by a fingerprint of the settings; rerunning the same command resumes from the last
epoch that every rank completed, and other settings (another --lr or --algorithm)
start afresh in their own folder instead of resuming what is not theirs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F

import decentopt as dopt
from decentopt.data import dirichlet_split, load_digits
from decentopt.models import make_model
from decentopt.problems.neural import AgentSampler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="edm", choices=dopt.algorithms.names())
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--beta", type=float, default=0.9)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--phi", type=float, default=0.5, help="Dirichlet concentration")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a peer")
    parser.add_argument("--checkpoints", default="results/example-checkpoints")
    parser.add_argument(
        "--procs-per-agent",
        type=int,
        default=int(os.environ.get("DECENTOPT_PROCS_PER_AGENT", "1")),
        help="processes per agent (default: decentopt launch --procs-per-agent's, else 1)",
    )
    args = parser.parse_args()

    rank, processes = dopt.distributed.init()
    group = args.procs_per_agent
    world = processes // group  # agents
    settings = {k: v for k, v in vars(args).items() if k not in ("timeout", "checkpoints")}
    digest = hashlib.sha256(json.dumps(settings | {"world": processes}, sort_keys=True).encode())
    checkpoints = Path(args.checkpoints) / f"{args.algorithm}-{digest.hexdigest()[:12]}"
    device = dopt.distributed.device_for_rank()
    topo = dopt.topology.ring(world)
    if group > 1:  # each agent: `group` processes, gradients averaged, one shard per link
        comm = dopt.comm.GroupCommunicator(topo, procs_per_agent=group, timeout=args.timeout)
    else:
        comm = dopt.comm.DistributedCommunicator(topo, timeout=args.timeout)
    agent = comm.rank  # this process's agent

    data = load_digits()
    split = dirichlet_split(
        data.y_train.numpy(), world, args.phi, seed=0, min_share=args.batch_size
    )
    x, y = data.x_train.to(device), data.y_train.to(device)
    # every rank must take the same number of steps (one gossip round each): an epoch is
    # the steps in which an average agent sees its data once; each rank cycles its own share
    sampler = AgentSampler((split.indices[agent],), args.batch_size, seed=rank)
    steps = AgentSampler(split.indices, args.batch_size).steps_per_epoch
    model = make_model("small_cnn", seed=rank).to(device)
    dopt.distributed.broadcast_parameters(model)  # every agent starts from rank 0's model
    comm.check_consistency(extra=str(sum(p.numel() for p in model.parameters())))

    hp = {"lr": args.lr} | (
        {"beta": args.beta} if dopt.algorithms.REGISTRY[args.algorithm].uses_momentum else {}
    )
    opt = dopt.distributed.DecentralizedOptimizer(model.parameters(), args.algorithm, comm, **hp)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(
        opt, milestones=[int(0.6 * args.epochs), int(0.8 * args.epochs)], gamma=0.1
    )
    start = 0
    last = dopt.distributed.latest_checkpoint(checkpoints)
    if last is not None:
        saved = dopt.distributed.load_checkpoint(checkpoints, last)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["rng"])
        sampler.load_state_dict(saved["sampler"])
        start = last
        if rank == 0:
            print(f"resuming from epoch {start}")

    for epoch in range(start, args.epochs):
        model.train()
        total = 0.0
        for _ in range(steps):
            idx = torch.from_numpy(sampler.next()[0]).to(device)
            opt.zero_grad()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += float(loss.detach())
        scheduler.step()
        # metrics: the average model's test accuracy needs one collective mean
        dopt.distributed.average_buffers(model)  # BatchNorm statistics (the CNN has none)
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])[None]
        avg = comm.mean(flat)[0]
        local_loss = comm.mean(torch.tensor([[total / steps]]))[0, 0]
        consensus = comm.mean((flat - avg).pow(2).sum().reshape(1, 1))[0, 0]
        if rank == 0:
            eval_model = make_model("small_cnn").to(device)
            torch.nn.utils.vector_to_parameters(avg, eval_model.parameters())
            eval_model.eval()
            with torch.no_grad():
                acc = eval_model(data.x_test.to(device)).argmax(1) == data.y_test.to(device)
            print(
                f"epoch {epoch + 1:3d}  train loss {float(local_loss):.4f}  "
                f"consensus {float(consensus):.2e}  "
                f"test acc (avg model) {float(acc.float().mean()):.3f}"
            )
        dopt.distributed.save_checkpoint(
            checkpoints,
            epoch + 1,
            {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(),
                "sampler": sampler.state_dict(),
            },
        )
    if rank == 0:
        print(
            f"done: {comm.stats.rounds} gossip rounds, {comm.stats.bytes_sent / 1e6:.1f} MB sent "
            "by rank 0"
        )
    dopt.distributed.finalize()


if __name__ == "__main__":
    main()
