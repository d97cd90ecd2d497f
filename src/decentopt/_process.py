"""Process lifetimes: child processes that end with their parent; whether a PID is alive.

A worker of a sweep or a rank started by ``decentopt launch`` must not run on
alone when the process that started it dies, even by SIGKILL (which it cannot
catch to clean up). On Linux the kernel can send the child a signal when its
parent dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere :func:`die_with_parent` does
nothing and the parent's own handlers are all there is.

A file written by a process that may die at any moment is written atomically
(:func:`atomic_file`: a temporary file in the same folder, then ``os.replace``),
so that it is there whole or not at all. Temporary files carry the prefix
:data:`TEMP_PREFIX`, a name no user file has, so that they can be swept away.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["TEMP_PREFIX", "alive", "atomic_file", "die_with_parent", "temporary_file"]

#: Prefix of every temporary file the project writes (then renames or removes).
TEMP_PREFIX = ".decentopt-"

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


def temporary_file(path: Path) -> tuple[int, str]:
    """``mkstemp`` beside ``path`` under the project's prefix; the name part is cut short so
    that the temporary name never exceeds the file system's limit when ``path`` does not."""
    return tempfile.mkstemp(
        dir=path.parent, prefix=f"{TEMP_PREFIX}{path.name[:40]}.", suffix=".tmp"
    )


@contextmanager
def atomic_file(
    path: str | Path, mode: str = "w", *, newline: str | None = None, permissions: int | None = None
) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` (its folder made if needed); on success it
    replaces ``path`` atomically, with ``permissions`` (by default those ``open`` would give
    it). A refusal of the file system is an ``OSError`` naming ``path``, not the temporary
    file; on any failure the temporary file is removed and ``path`` left as it was."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temporary_file(path)
        with os.fdopen(fd, mode, newline=newline) as fh:
            yield fh
        if permissions is None:
            mask = os.umask(0)
            os.umask(mask)
            permissions = 0o666 & ~mask  # as open() would create it (mkstemp makes 0600)
        os.chmod(tmp, permissions)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _naming(exc, path) from exc
        raise


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` about ``path``: a folder where the file goes, or a name too long, said so."""
    if path.is_dir():
        return IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    where = exc.filename if exc.errno == errno.ENAMETOOLONG and exc.filename else path
    return type(exc)(exc.errno, exc.strerror or str(exc), str(where))
