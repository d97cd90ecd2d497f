"""Process-group set-up for jobs started by ``torchrun`` (or ``decentopt launch``)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["Job", "device_for_rank", "finalize", "init", "job"]

_REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def init(backend: str = "auto", *, timeout: float = 300.0) -> tuple[int, int]:
    """Initialise the default process group from torchrun's environment; returns (rank, world).

    ``backend="auto"`` picks NCCL when CUDA is available and gloo otherwise.
    ``timeout`` bounds start-up and collectives; gossip has its own timeout.
    """
    missing = [k for k in _REQUIRED if k not in os.environ]
    if missing:
        raise RuntimeError(
            f"missing {', '.join(missing)} in the environment: start the script with "
            "`torchrun --nproc-per-node N script.py` or `decentopt launch -n N script.py`"
        )
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    start = time.monotonic()
    try:
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout))
    except (RuntimeError, dist.DistError) as exc:  # a rank never came (or the store died)
        from decentopt.comm.distributed import PeerFailure

        raise PeerFailure(
            f"rank {os.environ['RANK']}: start-up: not every one of the {os.environ['WORLD_SIZE']} "
            f"ranks joined within {time.monotonic() - start:.1f} s (timeout {timeout:g} s); "
            "check that WORLD_SIZE matches the processes started. Underlying error: "
            f"{str(exc).splitlines()[0]}"
        ) from None
    return dist.get_rank(), dist.get_world_size()


def device_for_rank() -> torch.device:
    """This rank's GPU (``LOCAL_RANK``) under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def finalize() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


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
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Job()
    return Job(*init(timeout=timeout))
