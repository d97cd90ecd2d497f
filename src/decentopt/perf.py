"""Process-level memory: how much is available, and settings for large models on the CPU.

A step over an ``(n, P)`` stack allocates a few tensors of ``n P`` numbers (for
16 agents of VGG-11, 624 MB each) and frees the previous ones. glibc serves
such sizes with ``mmap`` and returns them to the system on ``free``, so every
step pays page faults and zero-filling for gigabytes -- on a 2-core machine
that costs as much as the arithmetic itself. :func:`keep_freed_memory` makes
glibc keep freed blocks in its heap (``M_MMAP_MAX = 0``, a 1 GiB trim
threshold) so the next step reuses them. It changes only how this process's
memory is recycled; it is a no-op where glibc is absent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

__all__ = ["available_memory", "keep_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_applied = False


def keep_freed_memory() -> bool:
    """Ask glibc to recycle large freed blocks in-process; True if it took effect."""
    global _applied
    if _applied:
        return True
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    _applied = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**30))
    return _applied


def available_memory() -> float | None:
    """Bytes the system can still give this process (Linux ``MemAvailable``), if known."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None
