"""Process-level settings: how much memory is available (the system, a container's cgroup,
the address-space limit), memory recycling for large models on the CPU, and one thread
for small dense linear algebra.

A step over an ``(n, P)`` stack allocates a few tensors of ``n P`` numbers (for
16 agents of VGG-11, 624 MB each) and frees the previous ones. glibc serves
such sizes with ``mmap`` and returns them to the system on ``free``, so every
step pays page faults and zero-filling for gigabytes -- on a 2-core machine
that costs as much as the arithmetic itself. :func:`keep_freed_memory` makes
glibc keep freed blocks in its heap (``M_MMAP_MAX = 0``, a 1 GiB trim
threshold) so the next step reuses them. It changes only how this process's
memory is recycled; it is a no-op where glibc is absent.

:func:`one_thread` runs a block with one torch intra-op thread and one thread in the BLAS
libraries (numpy's and scipy's OpenBLAS): a problem's set-up and a graph's spectrum
factorise many small matrices, which threads do not speed up, while on a busy machine
threads that wait for each other at every call make them 10-100x slower (measured on 2
cores with one kept busy: a batch of 320 eigenvalue problems of size 100, 0.13 s at one
thread, 13-21 s at two; numpy's 2-norm of a 256 x 256 matrix, 2.8 s).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
from collections.abc import Iterator
from pathlib import Path

import torch

__all__ = [
    "MEMORY_MARGIN",
    "available_memory",
    "cgroup_memory",
    "gib",
    "keep_freed_memory",
    "one_thread",
]

#: A run's peak over its estimate, at most (measured: 1.60 for logistic regression with 32
#: agents, d = 100, m = 20,000 and 3 runs; 1.92 for a quadratic with 64 agents, d = 1000,
#: p = 20 and 8 runs): a run is refused unless this many times its estimate is available.
MEMORY_MARGIN = 2.0


def gib(size: float) -> str:
    """Bytes in GiB, readably."""
    value = size / 2**30
    return f"{value:,.0f} GiB" if value >= 100 else f"{value:.3g} GiB"


_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


@functools.cache
def keep_freed_memory() -> bool:
    """Ask glibc to recycle large freed blocks in-process (once); True if it took effect."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**30))


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run a block at one torch intra-op thread and one BLAS thread, then restore both."""
    from threadpoolctl import ThreadpoolController  # the pools loaded now (about 1 ms)

    previous = torch.get_num_threads()
    limit = ThreadpoolController().limit(limits=1, user_api="blas")
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
        limit.restore_original_limits()


def _text(path: Path) -> str:
    """A file's text; "" for an absent or unreadable one."""
    try:
        return path.read_text()
    except OSError:
        return ""


def _number(path: Path) -> float | None:
    """A number in a cgroup file; None for ``max``, absent or unreadable files."""
    text = _text(path).strip()
    return float(text) if text.isdigit() else None


def _cgroup_room(path: Path, limit_name: str, usage_name: str) -> float | None:
    """The tightest ``limit - usage`` of the cgroup folder ``path`` and the folders above it
    (a limit set on a parent holds for its children)."""
    rooms = []
    for folder in (path, *path.parents):
        limit = _number(folder / limit_name)
        usage = _number(folder / usage_name)
        if limit is not None and limit < 2**60 and usage is not None:  # v1: 2^63 = none
            rooms.append(limit - usage)
    return max(0.0, min(rooms)) if rooms else None


def cgroup_memory(root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc")) -> float | None:
    """Bytes this process's memory cgroup still allows (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``, minus current usage), or None when it sets no limit."""
    rooms = []
    for line in _text(proc / "self" / "cgroup").splitlines():
        _, controllers, where = [*line.split(":", 2), "", ""][:3]
        relative = where.strip().lstrip("/")
        if controllers == "":  # v2: one unified hierarchy
            places = (root / relative, root)
            names = ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # v1: inside a container, the path may be hidden
            places = (root / "memory" / relative, root / "memory")
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        found = (_cgroup_room(p, *names) for p in places if p.is_dir())
        rooms += [r for r in found if r is not None][:1]
    return min(rooms) if rooms else None


def _proc_bytes(path: str, key: str) -> float | None:
    """The size on the line ``key`` of a /proc file (given in KiB), in bytes."""
    lines = _text(Path(path)).splitlines()
    return next((float(line.split()[1]) * 1024 for line in lines if line.startswith(key)), None)


def _address_space_room() -> float | None:
    """What ``RLIMIT_AS`` leaves of this process's address space, if it is limited."""
    try:
        import resource
    except ImportError:
        return None
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    size = _proc_bytes("/proc/self/status", "VmSize:")
    return None if soft == resource.RLIM_INFINITY or size is None else max(0.0, soft - size)


def available_memory() -> float | None:
    """Bytes the system can still give this process, if known: the least of Linux's
    ``MemAvailable``, what the memory cgroup (a container's limit) leaves, and what
    ``RLIMIT_AS`` leaves of the address space."""
    rooms = (_mem_available(), cgroup_memory(), _address_space_room())
    return min((room for room in rooms if room is not None), default=None)


def _mem_available() -> float | None:
    return _proc_bytes("/proc/meminfo", "MemAvailable:")
