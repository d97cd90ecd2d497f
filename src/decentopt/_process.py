"""Process lifetimes: child processes that end with their parent; whether a PID is alive.

A worker of a sweep or a rank started by ``decentopt launch`` must not run on
alone when the process that started it dies, even by SIGKILL (which it cannot
catch to clean up). On Linux the kernel can send the child a signal when its
parent dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere :func:`die_with_parent` does
nothing and the parent's own handlers are all there is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

__all__ = ["alive", "die_with_parent"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """In a child process: get ``sig`` when the parent dies; True where it took effect.

    Call it first thing in the child (``preexec_fn`` of ``subprocess.Popen``, the
    ``initializer`` of a process pool). If the parent is already gone, the child
    gets the signal at once.
    """
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the request: act on it now
        os.kill(os.getpid(), sig)
    return True


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (perhaps another user's); False for 0,
    -1 and impossible PIDs, which ``os.kill`` would read as groups of processes."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # alive, under another user
        pass
    return True
