"""A rank of tests/distributed/test_agreement.py: rank 1 differs from the others in one
setting per case; each rank writes what every case gave to OUT/agreement-rank{r}.json.

Usage: python agreement_worker.py OUT   with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

import decentopt as dopt
from decentopt.comm import DistributedCommunicator
from decentopt.distributed import DecentralizedOptimizer, wrap
from decentopt.distributed.agreement import RanksDisagree


def case(name: str, odd: bool) -> None:
    """Build (and step) an optimizer as rank 1 (``odd``) or the others would in case ``name``."""
    weights = "metropolis" if odd and name == "weights" else "paper"
    graph = dopt.topology.ring(3, weights=weights)
    comm = DistributedCommunicator(graph, timeout=20)
    shape = {"model": (10, 2), "size": (11, 1)}.get(name, (21, 1)) if odd else (21, 1)
    model = torch.nn.Linear(*shape)
    if odd and name == "dtype":
        model = model.double()
    method = "ed" if odd and name == "method" else "edm"
    if name == "compression":
        opt = DecentralizedOptimizer(
            model.parameters(),
            "choco_dsgd",
            comm,
            lr=0.1,
            gamma=0.5,
            compression="top_k(0.1)" if odd else "qsgd(4)",
        )
    elif name == "wrapped":
        base = torch.optim.Adam(model.parameters(), lr=0.02 if odd else 0.01)
        opt = wrap(base, "ed", comm)
    else:
        momentum = {"beta": 0.9} if method == "edm" else {}
        opt = DecentralizedOptimizer(model.parameters(), method, comm, lr=0.1, **momentum)
    if name == "added":  # the parameter set changes after construction
        extra = torch.nn.Parameter(torch.zeros(3 if odd else 4))
        opt.add_param_group({"params": [extra]})
    model(torch.ones(1, model.in_features, dtype=model.weight.dtype)).sum().backward()
    opt.step()


CASES = ("same", "weights", "model", "method", "dtype", "size", "compression", "added", "wrapped")


def main() -> None:
    out = Path(sys.argv[1])
    rank, _ = dopt.distributed.init(timeout=60)
    results = {}
    for name in CASES:
        try:
            case(name, odd=rank == 1)
            results[name] = "ok"
        except RanksDisagree as exc:
            results[name] = str(exc)
    (out / f"agreement-rank{rank}.json").write_text(json.dumps(results))
    dopt.distributed.finalize()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
