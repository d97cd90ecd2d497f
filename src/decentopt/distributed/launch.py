"""Start N local processes, one agent each, through torchrun (``decentopt launch``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["launch", "torchrun_command"]


def torchrun_command(nproc: int, target: str, args: Sequence[str], *, module: bool) -> list[str]:
    """The torchrun command line: rendezvous on 127.0.0.1 at a free port."""
    if nproc < 1:
        raise ValueError(f"the number of processes must be >= 1; got {nproc}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rendezvous = ["--master-addr=127.0.0.1", f"--master-port={port}"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    return [*torchrun, *rendezvous, *(["-m"] if module else []), target, *args]


def launch(
    nproc: int, target: str, args: Sequence[str] = (), *, module: bool = False, threads: int = 1
) -> int:
    """Run ``target`` (a script, or a module with ``module``) on ``nproc`` local processes.

    Each process gets ``threads`` OpenMP threads and, unless set, transparent huge
    pages for large CPU tensors (they cut the page faults of allocating an
    ``(n, P)`` parameter stack every step; set ``THP_MEM_ALLOC_ENABLE=0`` to opt out).
    Returns the exit code of torchrun.
    """
    cmd = torchrun_command(nproc, target, args, module=module)
    env = {"THP_MEM_ALLOC_ENABLE": "1"} | dict(os.environ) | {"OMP_NUM_THREADS": str(threads)}
    print(" ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd, env=env)
