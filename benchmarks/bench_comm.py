"""Per-round gossip time of the distributed communicator on a ring of 4 processes.

Side by side in one run, for messages of d = 1e3, 1e6 and the size of VGG-11
(9.2 M float32 parameters): ``DistributedCommunicator.mix`` (neighbours only,
one ``batch_isend_irecv``) against an ``all_gather``-then-mix baseline (every
rank receives every row and forms its row of ``W Z``). gloo on 127.0.0.1.

Run: ``.venv/bin/python benchmarks/bench_comm.py``
"""

from __future__ import annotations

import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import decentopt as dopt
from decentopt.comm import DistributedCommunicator

SIZES = {"1e3": 1_000, "1e6": 1_000_000, "VGG-11 (9.2e6)": 9_231_114}
WORLD = 4


def all_gather_mix(z: torch.Tensor, W_row: torch.Tensor) -> torch.Tensor:
    rows = [torch.empty_like(z) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, z)
    out = torch.zeros_like(z)
    for w, row in zip(W_row.tolist(), rows, strict=True):
        if w:
            out.add_(row, alpha=w)
    return out


def worker(rank: int, port: int, queue: mp.Queue) -> None:
    os.environ |= {
        "RANK": str(rank),
        "WORLD_SIZE": str(WORLD),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    torch.set_num_threads(1)
    dopt.distributed.init("gloo")
    topo = dopt.topology.ring(WORLD)
    comm = DistributedCommunicator(topo, timeout=120)
    W_row = topo.W[rank].float()
    results = {}
    for label, d in SIZES.items():
        z = torch.randn(1, d)
        reps = 20 if d <= 1_000_000 else 5
        timings = {}
        candidates = (
            ("neighbours", lambda z=z: comm.mix(z)),
            ("all_gather", lambda z=z: all_gather_mix(z[0], W_row)),
        )
        for name, fn in candidates:
            fn()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            dist.barrier()
            timings[name] = (time.perf_counter() - start) / reps
        results[label] = timings
    if rank == 0:
        queue.put(results)
    dopt.distributed.finalize()


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, port, queue)) for r in range(WORLD)]
    for p in procs:
        p.start()
    results = queue.get(timeout=600)
    for p in procs:
        p.join()
    print(f"ring of {WORLD} gloo processes on 127.0.0.1, float32, time per gossip round (rank 0)")
    print(f"{'message':16s} {'neighbours':>12s} {'all_gather':>12s} {'ratio':>7s}")
    for label, t in results.items():
        print(
            f"{label:16s} {t['neighbours'] * 1e3:10.2f}ms {t['all_gather'] * 1e3:10.2f}ms "
            f"{t['all_gather'] / t['neighbours']:6.2f}x"
        )


if __name__ == "__main__":
    main()
