"""Native kernels: the library's own elementwise updates fused with a circulant mix.

``fused.c`` (next to this file) computes DSGD's, DmSGD's, ED's and EDM's update
and the mix of its first output in one pass over the state, block of columns by
block of columns, writing each output once with non-temporal stores; it also
has the plain circulant mix. On (256, 10^5) float32 over ring(256) an EDM step
then takes 1.2x its 7-pass memory bound at one thread and 0.9x at two, against
1.6x for the same update compiled by ``torch.compile`` (which cannot keep the
mixed rows in a buffer) and 2.2x eagerly; the mix 0.9-1.2x a copy, against
1.8-2.1x (``benchmarks/bench_peers.py``).

The source is compiled on first use with the system's C compiler (``$CC``, else
``cc``; ``-O3 -march=native -pthread``) into a cache folder
(``$DECENTOPT_CACHE``, else ``~/.cache/decentopt``), named by a hash of the
source, the flags, the compiler and the CPU's features, and loaded with
:mod:`ctypes` (which releases the GIL during a call). When there is
no compiler or the build fails, :func:`library` says why and the simulator uses
``torch.compile`` instead.

Each kernel is registered with the Python function it implements
(:func:`implements`): the Python function stays the reference, and the tests
check both give the same numbers for every option.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["NativeUpdate", "implements", "library", "mix", "native_update", "run", "supports"]

_SOURCE = Path(__file__).with_name("fused.c")
_HEADER = Path(__file__).with_name("fused_kernels.h")
_FLAGS = ("-O3", "-march=native", "-pthread", "-shared", "-fPIC", "-std=c11")
_KINDS = {"descend": 0, "momentum_descend": 1, "correct": 2, "edm": 3}
#: Largest stencil and block width the C code accepts (MAX_TERMS, MAX_WIDTH there).
MAX_TERMS, MAX_WIDTH = 64, 8192


@dataclass(frozen=True)
class NativeUpdate:
    """A C update: its kind in ``fused.c`` and how many tensors, scalars and outputs."""

    kind: str
    inputs: int
    scalars: int
    outputs: int


_REGISTRY: dict[Callable[..., object], NativeUpdate] = {}


def implements(
    kind: str, *, inputs: int, scalars: int, outputs: int
) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """Decorator: the C update ``kind`` computes what the decorated function computes."""
    if kind not in _KINDS:
        raise ValueError(f"no native update {kind!r}; fused.c has {sorted(_KINDS)}")

    def record(fn: Callable[..., object]) -> Callable[..., object]:
        _REGISTRY[fn] = NativeUpdate(kind, inputs, scalars, outputs)
        return fn

    return record


def native_update(fn: Callable[..., object]) -> tuple[NativeUpdate, bool, bool] | None:
    """``(update, nesterov, dampening)`` for a registered function (or a partial of one
    with only ``nesterov`` / ``dampening`` keywords); ``None`` otherwise."""
    keywords: dict[str, object] = {}
    if isinstance(fn, functools.partial):
        if fn.args or set(fn.keywords) - {"nesterov", "dampening"}:
            return None
        keywords, fn = dict(fn.keywords), fn.func
    update = _REGISTRY.get(fn)
    if update is None:
        return None
    return update, bool(keywords.get("nesterov", False)), bool(keywords.get("dampening", True))


def _cpu_signature() -> str:
    """What ``-march=native`` depends on: a library built for one CPU may not run on
    another that shares the cache folder (a cluster's home directory)."""
    try:
        with open("/proc/cpuinfo") as info:
            flags = next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return f"{platform.machine()} {platform.processor()} {flags}"


def _cache_dir() -> Path:
    root = os.environ.get("DECENTOPT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "decentopt"


@functools.cache
def library() -> tuple[ctypes.CDLL | None, str]:
    """The compiled kernels and ``""``, or ``None`` and why they are not available."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        return None, f"no C compiler ({os.environ.get('CC', 'cc')!r} is not on PATH)"
    source = _SOURCE.read_bytes() + _HEADER.read_bytes()
    try:
        version = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{compiler} --version failed: {exc}"
    recipe = " ".join(_FLAGS) + version + _cpu_signature()
    digest = hashlib.sha256(source + recipe.encode()).hexdigest()
    target = _cache_dir() / f"fused-{digest[:16]}.so"
    if not target.exists():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                built = Path(tmp) / target.name
                result = subprocess.run(
                    [compiler, *_FLAGS, str(_SOURCE), "-o", str(built)],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                if result.returncode != 0:
                    first = (result.stderr.strip().splitlines() or ["no message"])[0]
                    return None, f"{compiler} failed on {_SOURCE.name}: {first}"
                os.replace(built, target)  # atomic: concurrent builds cannot half-write it
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"building {target} failed: {exc}"
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as exc:
        return None, f"loading {target} failed: {exc}"
    for name in ("update_mix_f32", "update_mix_f64", "mix_f32", "mix_f64"):
        getattr(lib, f"decentopt_{name}").restype = ctypes.c_int
    return lib, ""


_CTYPES = {torch.float32: (ctypes.c_float, "f32"), torch.float64: (ctypes.c_double, "f64")}


def supports(tensor: torch.Tensor) -> bool:
    """Whether the kernels take this state (CPU, float32 or float64)."""
    return tensor.device.type == "cpu" and tensor.dtype in _CTYPES


def _entry(name: str, dtype: torch.dtype) -> tuple[Any, type]:
    """The C function ``decentopt_<name>_<f32|f64>`` and its scalar type."""
    lib, why = library()
    if lib is None:
        raise RuntimeError(why)
    scalar_type, suffix = _CTYPES[dtype]
    return getattr(lib, f"decentopt_{name}_{suffix}"), scalar_type


def _stencil_args(stencil: Sequence[tuple[int, float]], n: int, scalar_type: type) -> tuple:
    """``(k, offsets, weights)`` as the C functions take them."""
    k = len(stencil)
    offsets = (ctypes.c_int64 * k)(*(o % n for o, _ in stencil))
    return ctypes.c_int64(k), offsets, (scalar_type * k)(*(w for _, w in stencil))


def run(
    update: NativeUpdate,
    nesterov: bool,
    dampening: bool,
    flats: Sequence[torch.Tensor],
    scalars: Sequence[float],
    outs: Sequence[torch.Tensor],
    stencil: Sequence[tuple[int, float]],
    width: int,
) -> None:
    """Run ``update`` on contiguous ``(n, d)`` ``flats`` into ``outs`` (the first mixed).

    Raises ``RuntimeError`` when the library is missing or the kernel reports a
    failure (out of memory for its buffers, or arguments it does not take).
    """
    kernel, scalar_type = _entry("update_mix", flats[0].dtype)
    n, d = flats[0].shape
    beta = scalars[1] if len(scalars) > 1 else 0.0
    pointers = ctypes.c_void_p
    status = kernel(
        ctypes.c_int(_KINDS[update.kind]),
        ctypes.c_int(int(nesterov)),
        ctypes.c_int(int(dampening)),
        ctypes.c_int64(n),
        ctypes.c_int64(d),
        (pointers * len(flats))(*(t.data_ptr() for t in flats)),
        (pointers * len(outs))(*(t.data_ptr() for t in outs)),
        scalar_type(scalars[0]),
        scalar_type(beta),
        *_stencil_args(stencil, n, scalar_type),
        ctypes.c_int64(width),
        ctypes.c_int(torch.get_num_threads()),
    )
    if status:
        raise RuntimeError(
            f"the native {update.kind} kernel failed: its row buffers ({width} columns) could "
            f"not be allocated, or it was given {len(stencil)} stencil terms (at most "
            f"{MAX_TERMS}) or a block width of {width} (at most {MAX_WIDTH})"
        )


def mix(
    flat: torch.Tensor, out: torch.Tensor, stencil: Sequence[tuple[int, float]], width: int
) -> None:
    """``out = W flat`` for a circulant ``W`` given by ``stencil``; both contiguous ``(n, d)``.

    Raises ``RuntimeError`` as :func:`run` does.
    """
    kernel, scalar_type = _entry("mix", flat.dtype)
    n, d = flat.shape
    status = kernel(
        ctypes.c_int64(n),
        ctypes.c_int64(d),
        ctypes.c_void_p(flat.data_ptr()),
        ctypes.c_void_p(out.data_ptr()),
        *_stencil_args(stencil, n, scalar_type),
        ctypes.c_int64(width),
        ctypes.c_int(torch.get_num_threads()),
    )
    if status:
        raise RuntimeError(
            f"the native mix was given {len(stencil)} stencil terms (at most {MAX_TERMS})"
        )
