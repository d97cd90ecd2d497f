"""``decentopt launch``: N local processes, one agent each, supervised and restarted.

The launcher sets the environment torchrun would (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and
watches the processes. When one exits with an error, the others are sent
SIGTERM, and whatever has not ended ``grace`` seconds later (a stopped or hung
process) is killed. With ``max_restarts = K`` the whole job is then started
again, up to K times, on a fresh port; ``DECENTOPT_ATTEMPT`` tells the
processes which attempt they are. Runs of ``decentopt run``/``reproduce``
resume from their latest complete checkpoint (every rank's file intact), so
a job that loses a worker finishes with the rows of an uninterrupted run.

The ranks end with the launcher: SIGTERM, SIGHUP or Ctrl-C stop them (SIGTERM,
then SIGKILL after ``grace``), and on Linux a launcher killed outright (SIGKILL)
has the kernel send each rank SIGTERM.

Why not torchrun's elastic agent: restarting workers on the agent's store
failed here with gloo ("connectFullMesh failed ... Connection refused") in
torch 2.13, and its SIGTERM-to-SIGKILL grace period is fixed at 30 s. Use
torchrun directly for jobs across machines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from decentopt._process import die_with_parent

__all__ = ["launch", "processes_flag", "worker_command"]

#: How often the launcher looks at its processes (seconds).
POLL = 0.05


def processes_flag(n: int) -> str:
    """How to ask for ``n`` processes of the launcher this process runs under: ``decentopt
    launch -n N`` (it sets ``DECENTOPT_ATTEMPT``), else torchrun's ``--nproc-per-node N``."""
    if "DECENTOPT_ATTEMPT" in os.environ:
        return f"decentopt launch -n {n}"
    return f"torchrun --nproc-per-node {n}"


def worker_command(target: str, args: Sequence[str], *, module: bool) -> list[str]:
    """The command line of one worker process."""
    return [sys.executable, *(["-m"] if module else []), target, *args]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(procs: list[subprocess.Popen], grace: float) -> None:
    """SIGTERM every live process, then SIGKILL what is left after ``grace`` seconds."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _exit_by_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _signals_exit() -> Iterator[None]:
    """While supervising: SIGTERM and SIGHUP raise ``SystemExit(128 + signal)``, the
    launcher's exit code (the main thread only)."""
    main = threading.current_thread() is threading.main_thread()
    signals = (signal.SIGTERM, signal.SIGHUP) if main else ()
    previous = {sig: signal.signal(sig, _exit_by_signal) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _supervise(procs: list[subprocess.Popen], grace: float) -> tuple[int, int | None]:
    """Wait for every process; on the first failure stop the rest. Returns (code, failed rank)."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            _stop(procs, grace)
            rank, code = failed[0]
            return (128 - code if code < 0 else code), rank  # killed by signal N: 128 + N
        if all(c == 0 for c in codes):
            return 0, None
        time.sleep(POLL)


def _check_launch(nproc: int, procs_per_agent: int, max_restarts: int, grace: float) -> None:
    """Refuse, in one line naming the flag, what :func:`launch` cannot start."""
    if nproc < 1:
        raise ValueError(f"the number of processes must be >= 1; got {nproc}")
    if procs_per_agent < 1 or nproc % procs_per_agent:
        raise ValueError(
            f"--procs-per-agent {procs_per_agent} does not divide -n {nproc}: every agent "
            f"takes the same number of processes (e.g. -n {2 * max(procs_per_agent, 1)} "
            f"--procs-per-agent {max(procs_per_agent, 1)})"
        )
    if max_restarts < 0 or grace < 0:
        raise ValueError(
            f"max_restarts and grace must be >= 0; got {max_restarts} and {grace} "
            "(--max-restarts 1 restarts a failed job once; --grace 5 waits 5 s before SIGKILL)"
        )


def launch(
    nproc: int,
    target: str,
    args: Sequence[str] = (),
    *,
    module: bool = False,
    threads: int = 1,
    max_restarts: int = 0,
    grace: float = 5.0,
    procs_per_agent: int = 1,
    log: Callable[[str], None] = lambda text: print(text, file=sys.stderr),
) -> int:
    """Run ``target`` (a script, or a module with ``module``) on ``nproc`` local processes.

    Each process gets ``threads`` OpenMP threads and, unless set, transparent huge
    pages for large CPU tensors (they cut the page faults of allocating an
    ``(n, P)`` parameter stack every step; set ``THP_MEM_ALLOC_ENABLE=0`` to opt out).
    A failed job is restarted up to ``max_restarts`` times; ``grace``: seconds
    between SIGTERM and SIGKILL for the processes left when one fails. With
    ``procs_per_agent = P`` the processes learn (``DECENTOPT_PROCS_PER_AGENT``) that every
    ``P`` consecutive ranks run one agent (:class:`~decentopt.comm.GroupCommunicator`), as
    torchrun's ``--nnodes nproc/P --nproc-per-node P`` would group them. Returns the exit
    code of the last attempt (0 on success).
    """
    _check_launch(nproc, procs_per_agent, max_restarts, grace)
    command = worker_command(target, args, module=module)
    base = {"THP_MEM_ALLOC_ENABLE": "1"} | dict(os.environ) | {"OMP_NUM_THREADS": str(threads)}
    code = 0
    for attempt in range(max_restarts + 1):
        log(f"launch: {nproc} processes of `{' '.join(command[1:])}` (attempt {attempt + 1})")
        common = {
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
            "DECENTOPT_ATTEMPT": str(attempt),
            "DECENTOPT_PROCS_PER_AGENT": str(procs_per_agent),
        }
        procs: list[subprocess.Popen] = []
        try:
            with _signals_exit():
                for rank in range(nproc):
                    env = base | common | {"RANK": str(rank), "LOCAL_RANK": str(rank)}
                    # SIGTERM when the launcher dies, even by SIGKILL
                    procs.append(subprocess.Popen(command, env=env, preexec_fn=die_with_parent))
                code, rank = _supervise(procs, grace)
        except (KeyboardInterrupt, SystemExit) as exc:  # the launcher goes: its ranks too
            _stop(procs, grace)
            if isinstance(exc, KeyboardInterrupt):
                raise
            code = int(exc.code or 0)  # 128 + the signal
            log(f"launch: stopped by signal {code - 128}; every rank was stopped")
            return code
        if code == 0:
            return 0
        then = "restarting every rank (runs resume from their checkpoints)"
        then = then if attempt < max_restarts else "no restarts left (--max-restarts)"
        log(f"launch: rank {rank} exited with code {code}; the other ranks were stopped; {then}")
    return code
