"""Synchronous, delayed and asynchronous gossip with a straggler: 4 gloo processes, ring.

Every rank trains a small MLP with ``DecentralizedOptimizer`` (DSGD); a step is its
forward/backward plus a sleep standing for the rest of its compute (``--compute`` seconds,
so that the 4 processes do not compete for this machine's cores), and rank 0 sleeps
``--factor`` times as long. Gossips: ``exact`` (synchronous: every step waits for the
neighbours' current one), ``delayed(1)`` (waits for the messages of one step ago) and
``delayed(1, staleness=S)`` (waits only for those ``S`` steps old). For each, seconds per
step of the slowed rank and of the others (the slowest of ranks 1-3), over ``--steps``
steps, min and median over ``--repeats`` repeats. Under a bound ``S`` a neighbour of the
straggler may finish at most ``S`` steps ahead of it, so its time per step is at least
the straggler's times ``(steps - S) / steps`` (ranks further away: ``S`` more per hop).

Usage: ``python benchmarks/bench_async.py [--steps 40] [--repeats 3]`` (it starts the 4
processes itself, through ``decentopt launch``; under a minute with the defaults).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

#: the gossips, and how many steps a rank may run ahead of a neighbour under each
GOSSIPS = {
    "exact": 0,
    "delayed(1)": 1,
    "delayed(1, staleness=4)": 4,
    "delayed(1, staleness=16)": 16,
}


def run(gossip: str, args: argparse.Namespace, rank: int, comm: object) -> float:
    """Seconds per step of this rank over ``args.steps`` steps (all ranks start together)."""
    import decentopt as dopt

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = dopt.distributed.DecentralizedOptimizer(
        model.parameters(), "dsgd", comm, lr=0.05, gossip=gossip
    )
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    pause = args.compute * (args.factor if rank == 0 else 1.0)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        time.sleep(pause)
        opt.step()
    seconds = (time.perf_counter() - start) / args.steps
    comm.settle()  # type: ignore[attr-defined]  # the last messages, before the next gossip
    return seconds


def worker(args: argparse.Namespace) -> None:
    import decentopt as dopt
    from decentopt.comm import DistributedCommunicator

    torch.set_num_threads(1)
    rank, world = dopt.distributed.init("gloo")
    comm = DistributedCommunicator(dopt.topology.ring(world), timeout=60.0)
    times = {g: [run(g, args, rank, comm) for _ in range(args.repeats)] for g in GOSSIPS}
    everyone: list = [None] * world
    dist.all_gather_object(everyone, times)
    if rank == 0:
        args.out.write_text(json.dumps(everyone))
    dopt.distributed.finalize()


def report(everyone: list, args: argparse.Namespace) -> str:
    lines = [
        f"{len(everyone)} gloo processes on a ring, DSGD, {args.steps} steps x {args.repeats} "
        f"repeats; compute {args.compute * 1e3:g} ms a step, rank 0 {args.factor:g}x slower.",
        "Seconds per step, min / median over repeats (others: the slowest of ranks 1-3).",
        "",
        f"| {'gossip':<25} | {'slowed rank 0':<15} | {'others':<15} | others / slowed | "
        "neighbours' floor |",
        f"|{'-' * 27}|{'-' * 17}|{'-' * 17}|-----------------|-------------------|",
    ]
    for g, bound in GOSSIPS.items():
        slow = everyone[0][g]
        others = [max(r[g][k] for r in everyone[1:]) for k in range(args.repeats)]
        floor = max(args.steps - bound, 0) / args.steps
        cells = [f"{min(t):.4f} / {statistics.median(t):.4f}" for t in (slow, others)]
        ratio = statistics.median(others) / statistics.median(slow)
        lines.append(
            f"| {g:<25} | {cells[0]:<15} | {cells[1]:<15} | {ratio:>15.2f} | {floor:>17.2f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compute", type=float, default=0.01, help="seconds (default 0.01)")
    parser.add_argument("--factor", type=float, default=4.0, help="the straggler's slowdown")
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        args.out = Path(tmp) / "times.json"
        command = [
            sys.executable, "-m", "decentopt", "launch", "-n", "4", __file__, "--worker",
            "--steps", str(args.steps), "--repeats", str(args.repeats),
            "--compute", str(args.compute), "--factor", str(args.factor), "--out", str(args.out),
        ]  # fmt: skip
        subprocess.run(command, check=True)
        print(report(json.loads(args.out.read_text()), args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
