"""DecentralizedOptimizer against DDP: step time and bytes per step, 4 processes, one run.

Every configuration trains the same CNN (about 2.4 M parameters) on the same random
batches of 32 images per rank, under ``decentopt launch -n 4`` on this machine:

* DDP (``DistributedDataParallel``, gloo) with ``torch.optim.SGD``: one all-reduce of
  the gradients per step, overlapped with backward in buckets of ``--bucket-mb``
  (2.5 MB by default, so that this model has several; DDP's default is 25 MB);
* ``DecentralizedOptimizer`` with DSGD and EDM on the ring, blocking
  (``overlap=False``) and overlapped with backward (``overlap=True``);
* ``wrap(AdamW, "edm")``;
* the group form: 2 agents of 2 processes (``GroupCommunicator``), DSGD and EDM, each
  process averaging gradients with its agent's other and gossiping half the row.

Each is timed at 1 thread per process and at torch's default (the machine's cores), and
the report gives the group form's step time over DDP's (min and median). ``--group-only``
times DDP and the group form alone.

For each: seconds per step (min and median over the timed steps, rank 0, after
warm-up), the share of a blocking step spent in ``opt.step()`` (the gossip), and
bytes this rank sends per step -- counted by the communicator for ours, and for
DDP the ring all-reduce's ``2 (n - 1) / n`` times the gradients' size. Writes
``OUT/bench_distributed.json`` and ``.md``.

Usage: ``python benchmarks/bench_distributed.py [--steps 20] [--out results/bench]``
(it starts the 4 processes itself).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

WORLD = 4
BATCH = 32


def cnn() -> nn.Module:
    """A CNN of about 2.4 M parameters for 3 x 32 x 32 images."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(256 * 4 * 4, 512), nn.ReLU(), nn.Linear(512, 10),
    )  # fmt: skip


def timed(
    step: Any, steps: int, warmup: int = 3, stepped: Any = None
) -> tuple[list[float], list[float]]:
    """Seconds of each step, and of the part ``stepped`` reports (the optimizer's step)."""
    for _ in range(warmup):
        step()
    dist.barrier()
    times, parts = [], []
    for _ in range(steps):
        start = time.perf_counter()
        part = step()
        times.append(time.perf_counter() - start)
        parts.append(part or 0.0)
    return times, parts


def worker(args: argparse.Namespace) -> None:
    import decentopt as dopt

    rank, world = dopt.distributed.init("gloo", timeout=120)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(BATCH, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (BATCH,), generator=g)
    loss_fn = nn.functional.cross_entropy
    params = sum(p.numel() for p in cnn().parameters())
    rows: dict[str, Any] = {}

    # DDP + SGD
    model = nn.parallel.DistributedDataParallel(cnn(), bucket_cap_mb=args.bucket_mb)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def ddp_step() -> float:
        sgd.zero_grad()
        loss_fn(model(x), y).backward()  # the all-reduce overlaps with backward
        start = time.perf_counter()
        sgd.step()
        return time.perf_counter() - start

    times, parts = timed(ddp_step, args.steps)
    ring_allreduce = 2 * (world - 1) / world * 4 * params
    rows["DDP + SGD"] = {"times": times, "parts": parts, "bytes": ring_allreduce}

    comm = dopt.comm.DistributedCommunicator(dopt.topology.ring(world), timeout=60)
    agents = world // 2
    group = dopt.comm.GroupCommunicator(dopt.topology.ring(agents), procs_per_agent=2, timeout=60)
    configs: list[tuple[str, Any]] = []
    for name, hp in (("dsgd", {"lr": 0.01}), ("edm", {"lr": 0.01, "beta": 0.9})):
        for overlap in (False, True):
            how = "overlapped" if overlap else "blocking"
            if not args.group_only:
                configs.append((f"{name.upper()}, {how}", (name, hp, overlap, comm)))
            label = f"{name.upper()}, {agents} agents x 2 processes, {how}"
            configs.append((label, (name, hp, overlap, group)))
    if not args.group_only:
        configs.append(("wrap(AdamW, edm)", None))
    for label, setting in configs:
        model = cnn()
        if setting is None:
            opt = dopt.distributed.wrap(torch.optim.AdamW(model.parameters(), lr=1e-3), "edm", comm)
        else:
            name, hp, overlap, used = setting
            opt = dopt.distributed.DecentralizedOptimizer(
                model.parameters(), name, used, overlap=overlap, bucket_cap_mb=args.bucket_mb, **hp
            )

        def step(model: nn.Module = model, opt: Any = opt) -> float:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            start = time.perf_counter()
            opt.step()
            return time.perf_counter() - start

        counted = comm if setting is None else setting[3]
        before = counted.stats.bytes_sent
        times, parts = timed(step, args.steps)
        sent = (counted.stats.bytes_sent - before) / (args.steps + 3)
        rows[label] = {"times": times, "parts": parts, "bytes": sent}
    if rank == 0:
        result = {
            "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
            "torch": torch.__version__,
            "world": world,
            "parameters": params,
            "batch": BATCH,
            "bucket_mb": args.bucket_mb,
            "steps": args.steps,
            "threads": args.threads,
            "rows": rows,
        }
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"bench_distributed-{args.threads}.json").write_text(json.dumps(result))
    dopt.distributed.finalize()


def report(out: Path, threads: int) -> str:
    result = json.loads((out / f"bench_distributed-{threads}.json").read_text())
    rows = result["rows"]
    ddp = statistics.median(rows["DDP + SGD"]["times"])
    lines = [
        f"{result['world']} processes (gloo, {threads} thread(s) each) on {result['machine']}, "
        f"torch {result['torch']}; "
        f"a CNN of {result['parameters'] / 1e6:.1f} M parameters, batch {result['batch']} per "
        f"rank, buckets of {result['bucket_mb']:g} MB, {result['steps']} timed steps after 3 of "
        "warm-up; rank 0's times.",
        "",
        "| configuration | s / step (min / median) | of DDP's median | in `opt.step()` | "
        "bytes sent / step |",
        "|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        med = statistics.median(r["times"])
        share = statistics.median(p / t for p, t in zip(r["parts"], r["times"], strict=True))
        lines.append(
            f"| {label} | {min(r['times']):.4f} / {med:.4f} | {med / ddp:.2f}x | {share:.0%} | "
            f"{r['bytes'] / 1e6:.1f} MB |"
        )
    for name in ("DSGD", "EDM"):
        if f"{name}, blocking" in rows:
            blocking = statistics.median(rows[f"{name}, blocking"]["times"])
            lapped = statistics.median(rows[f"{name}, overlapped"]["times"])
            lines.append(f"\n{name}: overlapped / blocking = {lapped / blocking:.2f}x")
    ddp_min = min(rows["DDP + SGD"]["times"])
    for label, r in rows.items():
        if "agents x" in label:  # the group form against DDP over the same processes
            ratio_min, ratio_med = min(r["times"]) / ddp_min, statistics.median(r["times"]) / ddp
            lines.append(f"\n{label} / DDP: {ratio_min:.2f}x (min), {ratio_med:.2f}x (median)")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--world", type=int, default=WORLD, help="processes (default 4)")
    parser.add_argument(
        "--bucket-mb", type=float, default=2.5, help="bucket size of DDP and ours (default 2.5)"
    )
    parser.add_argument("--out", type=Path, default=Path("results/bench_distributed"))
    parser.add_argument(
        "--group-only", action="store_true", help="time DDP and the group form only"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.world % 2:
        parser.error(f"--world {args.world}: the group form needs an even number of processes")
    if args.worker:
        worker(args)
        return 0
    texts = []
    for threads in (1, torch.get_num_threads()):  # one thread, and torch's default
        command = [sys.executable, "-m", "decentopt", "launch", "-n", str(args.world)]
        command += ["--threads", str(threads), __file__, "--worker", "--threads", str(threads)]
        command += ["--steps", str(args.steps), "--out", str(args.out)]
        command += ["--bucket-mb", str(args.bucket_mb)] + ["--group-only"] * args.group_only
        subprocess.run(command, check=True)
        texts.append(report(args.out, threads))
    text = "\n".join(texts)
    (args.out / "bench_distributed.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
