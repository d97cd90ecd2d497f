"""A rank of ``test_exits``: 10 steps of DSGD over ring(4) with ``GOSSIP`` (delayed gossip
with bounded staleness by default), then ``finalize()``; a ``PeerFailure`` is printed as one
line and the process exits 3 through Python's own shutdown (not ``os._exit``), so threads
still inside a wait at exit would show. MODE: ``kill`` (rank 3 exits at step 5), ``hang``
(rank 3 falls silent for longer than the 2 s timeout, then exits), ``slow`` (rank 0 sleeps
0.3 s a step), ``nofinal`` (no ``finalize()``: the rank prints whether the process group
is still open when its own exit hook runs, after the library's), ``extra`` (rank 0 makes an
11th step)."""

from __future__ import annotations

import atexit
import os
import sys
import time

import torch
import torch.distributed as dist

import decentopt as dopt
from decentopt.comm import DistributedCommunicator, PeerFailure


def main() -> None:
    mode = sys.argv[1]
    rank, world = dopt.distributed.init("gloo", timeout=30)
    if mode == "nofinal":  # registered first, so it runs after the communicator's hook
        atexit.register(lambda: print(f"group open at exit: {dist.is_initialized()}"))
    comm = DistributedCommunicator(dopt.topology.ring(world), timeout=2.0)
    alg = dopt.algorithms.make("dsgd", lr=0.05, gossip=os.environ["GOSSIP"])
    state = alg.init(torch.zeros(1, 3, dtype=torch.float64))
    steps = 11 if mode == "extra" and rank == 0 else 10
    try:
        for step in range(steps):
            if rank == 3 and step == 5 and mode in ("kill", "hang"):
                time.sleep(6 if mode == "hang" else 0)
                os._exit(17)
            if mode == "slow" and rank == 0:
                time.sleep(0.3)
            state = alg.step(state, torch.full((1, 3), float(rank), dtype=torch.float64), comm)
        if mode != "nofinal":
            dopt.distributed.finalize()
    except PeerFailure as exc:
        print(f"error: {exc}", flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
