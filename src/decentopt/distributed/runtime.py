"""Process-group set-up for jobs started by ``torchrun`` (or ``decentopt launch``)."""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from decentopt.comm.distributed import PeerFailure, through_host
from decentopt.comm.leaving import leave

__all__ = [
    "Job",
    "StartupError",
    "average_buffers",
    "broadcast_parameters",
    "device_for_rank",
    "finalize",
    "init",
    "job",
]

_REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class StartupError(RuntimeError):
    """The environment of a rank (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...) is wrong."""


def _whole(name: str, default: str | None = None) -> int:
    """The environment variable ``name`` as a whole number, or a :class:`StartupError`."""
    text = os.environ.get(name, default)
    try:
        return int(str(text).strip())
    except ValueError:
        raise StartupError(
            f"{name}={text!r} is not a whole number; torchrun and decentopt launch set it "
            "(unset it to run a single process)"
        ) from None


def _check_environment() -> tuple[int, int, str, int]:
    """Every variable a rank needs, present and sensible, before anything waits on them:
    ``(rank, world, address, port)``."""
    missing = [k for k in _REQUIRED if k not in os.environ]
    if missing:
        raise StartupError(
            f"missing {', '.join(missing)} in the environment: start the script with "
            "`torchrun --nproc-per-node N script.py` or `decentopt launch -n N script.py`"
        )
    world = _whole("WORLD_SIZE")
    rank = _whole("RANK")
    if world < 1:
        raise StartupError(f"WORLD_SIZE={world}: the number of processes must be >= 1")
    if not 0 <= rank < world:
        raise StartupError(
            f"RANK={rank} with WORLD_SIZE={world}: each process needs a RANK from 0 to {world - 1}"
        )
    port = _whole("MASTER_PORT")
    if not 0 < port < 65536:
        raise StartupError(f"MASTER_PORT={port} is not a port (1 to 65535)")
    address = os.environ["MASTER_ADDR"]
    try:
        socket.getaddrinfo(address, port)
    except (OSError, UnicodeError) as exc:
        raise StartupError(
            f"MASTER_ADDR={address!r} does not resolve ({exc}); give rank 0's host name or "
            "IP address (127.0.0.1 on one machine)"
        ) from None
    return rank, world, address, port


def _use_local_gpu(rank: int) -> None:
    """NCCL's one GPU per process: this process's is the LOCAL_RANK-th of its machine."""
    local = _whole("LOCAL_RANK", "0")
    gpus = torch.cuda.device_count()
    if local >= gpus:
        raise StartupError(
            f"rank {rank}: LOCAL_RANK {local} but this machine has {gpus} GPU(s); NCCL "
            f"needs one GPU per process: start at most {gpus} process(es) per "
            "machine, or use backend='gloo' (ranks may then share a GPU; tensors travel "
            "through host memory)"
        )
    torch.cuda.set_device(local)


def init(backend: str = "auto", *, timeout: float = 300.0) -> tuple[int, int]:
    """Initialise the default process group from torchrun's environment; returns (rank, world).

    ``backend="auto"`` picks NCCL when CUDA is available and gloo otherwise.
    ``timeout`` bounds start-up and collectives; gossip has its own timeout. A wrong
    environment (a variable missing or malformed, a RANK outside the world, an address
    that does not resolve) is a :class:`StartupError` naming the variable, at once.
    """
    rank, world, address, port = _check_environment()
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        _use_local_gpu(rank)
    outcome: dict[str, BaseException] = {}

    def start() -> None:
        try:
            dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout))
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc

    start_time = time.monotonic()
    # a listener on MASTER_PORT that never answers would hold the connection forever:
    # start-up runs in a thread that is given up on after the timeout
    worker = threading.Thread(target=start, name="decentopt-start-up", daemon=True)
    worker.start()
    worker.join(1.5 * timeout + 2.0)  # torch's own deadline, with its message, comes first
    waited = time.monotonic() - start_time
    if worker.is_alive():
        raise PeerFailure(
            f"rank {rank}: start-up: no answer from {address}:{port} within {waited:.1f} s "
            f"(timeout {timeout:g} s): rank 0 did not start, or another program listens on that "
            "port; set MASTER_PORT to a free port (decentopt launch picks one)"
        )
    exc = outcome.get("error")
    if exc is not None:
        text = str(exc)
        if "EADDRINUSE" in text or "address already in use" in text.lower():
            raise PeerFailure(
                f"rank {rank}: start-up: port {port} is in use by another program; "
                "set MASTER_PORT to a free port (decentopt launch picks one)"
            ) from None
        if isinstance(exc, RuntimeError | dist.DistError):  # a rank never came, the store died
            raise PeerFailure(
                f"rank {rank}: start-up: not every one of the {world} ranks joined within "
                f"{waited:.1f} s (timeout {timeout:g} s); check that WORLD_SIZE matches the "
                f"processes started. Underlying error: {text.splitlines()[0] if text else exc!r}"
            ) from None
        raise exc
    return dist.get_rank(), dist.get_world_size()


def device_for_rank() -> torch.device:
    """This rank's GPU (``LOCAL_RANK``) under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


@torch.no_grad()
def broadcast_parameters(model: torch.nn.Module, src: int = 0) -> None:
    """Give every rank rank ``src``'s parameters and buffers: a common start (the paper starts
    every agent from one point). A no-op outside torch.distributed."""
    if not dist.is_initialized():
        return
    for tensor in [*model.parameters(), *model.buffers()]:
        through_host(tensor.data, lambda t: dist.broadcast(t, src))


@torch.no_grad()
def average_buffers(model: torch.nn.Module) -> None:
    """Average the model's floating-point buffers (BatchNorm statistics) over all ranks, e.g.
    before evaluating; integer buffers (batch counts) take the largest value. A no-op
    outside torch.distributed."""
    if not dist.is_initialized():
        return
    world = dist.get_world_size()
    for buffer in model.buffers():
        if buffer.is_floating_point():
            through_host(buffer, lambda t: (dist.all_reduce(t), t.div_(world)))
        else:
            through_host(buffer, lambda t: dist.all_reduce(t, op=dist.ReduceOp.MAX))


#: ``finalize()``: leave the job: record that this rank finished (and after how many gossip
#: rounds, so that a neighbour that goes on names unequal step counts rather than a death),
#: wait for the delayed messages still in flight, then close the group.
finalize = leave


@dataclass(frozen=True)
class Job:
    """This process's place in a job: rank 0 of 1 outside torchrun."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        """Whether this process reports and writes results."""
        return self.rank == 0

    def barrier(self, timeout: float = 300.0) -> None:
        """Wait for every rank; on gloo, fail naming the missing ranks after ``timeout`` s."""
        if self.world > 1:
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=timedelta(seconds=timeout), wait_all_ranks=True)
            else:
                dist.barrier()


def job(timeout: float = 300.0) -> Job:
    """The current job; under torchrun (``WORLD_SIZE`` > 1) the process group is initialised,
    waiting at most ``timeout`` seconds for every rank."""
    if _whole("WORLD_SIZE", "1") <= 1:
        return Job()
    return Job(*init(timeout=timeout))
