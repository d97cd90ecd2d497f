"""The native kernels: a C library built when the package is installed, loaded with ctypes.

``kernels.c`` fuses the library's own elementwise updates (DSGD's, DmSGD's, ED's
and EDM's) with a circulant mix, and has the plain circulant mix, CHOCO-gossip's
compressed round (``compress.h``), the logistic problem's gradient in one pass
over its data (``logistic.h``) and the quadratic's (``quadratic.h``); ``blocks.c``
runs many steps of a quadratic problem with those updates in one call; ``build.py``
compiles it once per instruction set (AVX-512, AVX2 + FMA, baseline) into one
library. Which functions exist and which update each ``kind`` computes is known
here and in :mod:`decentopt.comm.mixers.native`, the mixer that calls them;
:mod:`decentopt.native.problems` calls the problems' own kernels; nothing else
imports this module.

Where the library comes from, in order:

1. **installed**: ``pip install`` built it beside this file (``_kernels*.so``),
   so an installed wheel needs no compiler;
2. **built at first use** (a source checkout, or an install whose build had no
   compiler): the same recipe with ``$CC`` (else ``cc``) into a private cache
   folder (``$DECENTOPT_CACHE``, else ``~/.cache/decentopt``, created ``0700``),
   named by a hash of the sources, the recipe and the compiler. The library's
   SHA-256 and size are recorded beside it when it is built and checked before
   every load; a file or folder owned by another user or writable by others is
   refused; a library that fails a check is built again;
3. **none**: :func:`library` says why, and the simulator mixes with torch.

``DECENTOPT_NATIVE=0`` turns the library off; ``DECENTOPT_ISA=avx2`` (or
``generic``) runs a lower variant than the CPU supports.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.machinery
import json
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from decentopt._process import atomic_file
from decentopt.native import build
from decentopt.updates import KINDS

__all__ = [
    "UPDATE_KINDS",
    "Library",
    "cached_library",
    "describe",
    "installed_library",
    "library",
    "run",
]

#: The updates of ``decentopt_update_mix``, by ``kind`` index (api.c says the same).
UPDATE_KINDS = tuple(KINDS)
#: Largest stencil the C code accepts (MAX_TERMS there).
MAX_TERMS = 64
#: Largest block width the C code accepts (MAX_WIDTH there).
MAX_WIDTH = 8192
#: The variant of the functions for each dtype they take.
SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
#: decentopt_cpu_level's answer -> the variants that CPU runs, best first.
_RUNS = {2: ("avx512", "avx2", "generic"), 1: ("avx2", "generic"), 0: ("generic",)}

#: Every exported function's arguments in order, as the C headers declare them (api.c,
#: blocks.c, logistic.h, quadratic.h): a type and a name each. ``scalar`` is the variant's
#: float type, ``T*`` a pointer to a ``T``, ``ptr[]`` an array of pointers.
_DECLARATIONS = {
    "decentopt_update_mix": (
        "int kind, int nesterov, int dampening, i64 n, i64 d, ptr[] inputs, ptr[] outputs, "
        "scalar alpha, scalar beta, i64 k, i64* offsets, scalar* weights, i64 width, "
        "int threads"
    ),
    "decentopt_mix": (
        "i64 n, i64 d, ptr z, ptr out, i64 k, i64* offsets, scalar* weights, i64 width, int threads"
    ),
    # z = x - alpha g where z is NULL
    "decentopt_choco": (
        "int op, i64 n, i64 D, i64 k, i64 kept, f64 levels, f64 per_unit, ptr z, ptr hat, "
        "ptr s, ptr out, scalar gamma, ptr keys, ptr units, i64 terms, i64* offsets, "
        "f64* weights, ptr x, ptr g, scalar alpha, int threads"
    ),
    "decentopt_quadratic_steps": (
        "int kind, int nesterov, int dampening, i64 n, i64 panels, i64 runs, i64 d, i64 k, "
        "int lower, ptr[] in, ptr[] out, ptr H, ptr F, ptr b, ptr z, int wide, i64 steps, "
        "scalar* alphas, scalar beta, i64 terms, i64* offsets, scalar* weights"
    ),
    "decentopt_logistic_gradient": (
        "i64 groups, i64 levels, i64 stride, i64 m, i64 d, ptr samples, ptr labels, ptr x, "
        "ptr out, ptr loss, f64 scale, int threads"
    ),
    "decentopt_quadratic_gradient": (
        "i64 count, i64 d, ptr H, ptr x, ptr b, ptr term, ptr out, int threads"
    ),
}


def _signatures(scalar: type) -> dict[str, list]:
    """The ctypes argument types of :data:`_DECLARATIONS` for the variant of ``scalar``."""
    types: dict[str, Any] = {
        "int": ctypes.c_int,
        "i64": ctypes.c_int64,
        "f64": ctypes.c_double,
        "scalar": scalar,
        "ptr": ctypes.c_void_p,
        "ptr[]": ctypes.POINTER(ctypes.c_void_p),
        "i64*": ctypes.POINTER(ctypes.c_int64),
        "f64*": ctypes.POINTER(ctypes.c_double),
        "scalar*": ctypes.POINTER(scalar),
    }
    return {
        name: [types[arg.split()[0]] for arg in declaration.split(", ")]
        for name, declaration in _DECLARATIONS.items()
    }


@dataclass(frozen=True)
class Library:
    """A loaded library: where it came from, the variant this CPU runs, its functions."""

    path: Path
    origin: str  # "installed" or "built at first use"
    isa: str
    variants: tuple[str, ...]  # every variant of the library this CPU can run
    handle: ctypes.CDLL

    def function(self, name: str, suffix: str, isa: str | None = None) -> ctypes._CFuncPtr:
        """``decentopt_<name>_<suffix>_<isa>`` with its argument types declared."""
        variant = isa or self.isa
        if variant not in self.variants:
            raise ValueError(f"this CPU or library has no {variant!r} variant: {self.variants}")
        fn = getattr(self.handle, f"{name}_{suffix}_{variant}")
        fn.argtypes = _signatures(ctypes.c_float if suffix == "f32" else ctypes.c_double)[name]
        fn.restype = ctypes.c_int
        return fn


def _open(path: Path, origin: str) -> Library:
    """Load ``path`` and choose the best variant it has that this CPU runs."""
    handle = ctypes.CDLL(str(path))
    said: dict[str, Any] = {}  # what the library says of itself
    for name in ("source_digest", "update_kinds", "cpu_level"):
        try:
            fn = getattr(handle, f"decentopt_{name}")
        except AttributeError as exc:  # a library of an earlier release
            raise OSError(f"{path.name} lacks a function: {exc}") from None
        fn.restype = ctypes.c_int if name == "cpu_level" else ctypes.c_char_p
        fn.argtypes = []
        said[name] = fn()
    built_from = said["source_digest"].decode()
    if built_from != build.source_digest():
        raise OSError(f"{path.name} was built from other sources ({built_from}); rebuild it")
    kinds = tuple(said["update_kinds"].decode().split())
    if kinds != UPDATE_KINDS:
        raise OSError(f"{path} implements the updates {kinds}, not {UPDATE_KINDS}")
    level = int(said["cpu_level"])
    present = tuple(
        v for v in _RUNS.get(level, ("generic",)) if hasattr(handle, f"decentopt_mix_f32_{v}")
    )
    if not present:
        raise OSError(f"{path} has no variant this CPU runs")
    wanted = os.environ.get("DECENTOPT_ISA")
    if wanted:
        if wanted not in present:
            raise OSError(f"DECENTOPT_ISA={wanted!r}, but this CPU and library run {present}")
        present = present[present.index(wanted) :]
    return Library(path, origin, present[0], present, handle)


def installed_library() -> tuple[Library | None, str]:
    """The library ``pip install`` built beside this file, or ``None`` and why not."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = build.HERE / f"_kernels{suffix}"
        if path.is_file():
            try:
                return _open(path, "installed"), ""
            except OSError as exc:  # e.g. an editable install whose C sources changed since
                return None, f"the installed {path.name} was not loaded: {exc}"
    return None, "the package was installed without its compiled kernels"


def _unsafe(path: Path) -> str:
    """Why ``path`` may not be trusted (another owner, writable by others); ``""`` if fine."""
    if not hasattr(os, "getuid"):  # no POSIX owners to check
        return ""
    info = path.lstat()
    if info.st_uid != os.getuid():
        return f"{path} belongs to another user (uid {info.st_uid})"
    if info.st_mode & 0o022:
        return f"{path} is writable by its group or by others (mode {info.st_mode & 0o777:o})"
    return ""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verify(target: Path, manifest: Path) -> str:
    """``""`` when the cached library matches the SHA-256 and size recorded when it was built."""
    for path in (target, manifest):
        if not path.is_file():
            return f"{path.name} is missing"
        why = _unsafe(path)
        if why:
            return why
    try:
        record = json.loads(manifest.read_text())
        size, digest = int(record["bytes"]), str(record["sha256"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        return f"{manifest} is damaged ({type(exc).__name__})"
    if target.stat().st_size != size or _digest(target) != digest:
        return f"{target} does not match the checksum recorded when it was built"
    return ""


def _compiler() -> tuple[list[str], str] | str:
    """The compiler command and its version text, or why there is none."""
    name = os.environ.get("CC", "cc")
    found = shutil.which(name.split()[0]) if name.strip() else None
    if found is None:
        return f"no C compiler ({name!r} is not on PATH)"
    command = [found, *name.split()[1:]]
    try:
        version = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{found} --version failed: {exc}"
    return command, version


def cached_library() -> tuple[Library | None, str]:
    """The library built at first use into the cache folder (checked, rebuilt if it fails)."""
    found = _compiler()
    if isinstance(found, str):
        return None, found
    compiler, version = found
    recipe = json.dumps([build.COMMON_FLAGS, build.variants(), version, platform.machine()])
    key = hashlib.sha256(b"".join((build.HERE / s).read_bytes() for s in build.SOURCES))
    key.update(recipe.encode())
    root = os.environ.get("DECENTOPT_CACHE")
    folder = Path(root) if root else Path.home() / ".cache" / "decentopt"
    try:  # created 0700 if needed, then checked to be safe to build and load in
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        why = f"the cache folder {folder} cannot be created ({exc.strerror or exc})"
    else:
        why = _unsafe(folder)
    if why:
        return None, f"{why}; fix it (chmod 700) or set DECENTOPT_CACHE to a private folder"
    target = folder / f"kernels-{key.hexdigest()[:16]}.so"
    manifest = target.with_suffix(".json")
    problem = _verify(target, manifest)
    if problem:
        if target.exists() or manifest.exists():
            warnings.warn(
                f"the cached native kernels failed a check ({problem}); building them again",
                RuntimeWarning,
                stacklevel=3,
            )
        try:
            with tempfile.TemporaryDirectory(dir=folder) as tmp:
                built = Path(tmp) / target.name
                build.build_unix(compiler, built, Path(tmp))
                record = {"sha256": _digest(built), "bytes": built.stat().st_size}
                os.chmod(built, 0o700)
                os.replace(built, target)  # atomic: concurrent builds cannot half-write it
            with atomic_file(manifest, permissions=0o600) as note:
                note.write(json.dumps(record))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            return None, f"building the native kernels with {compiler[0]} failed: {exc}"
        problem = _verify(target, manifest)
        if problem:  # another process replaced it meanwhile, or the disk lies
            return None, f"the native kernels just built fail their check: {problem}"
    try:
        return _open(target, "built at first use"), ""
    except OSError as exc:
        return None, f"loading {target} failed: {exc}"


@functools.cache
def library() -> tuple[Library | None, str]:
    """The kernels (installed, else built at first use) and ``""``, or ``None`` and why not."""
    if os.environ.get("DECENTOPT_NATIVE", "1").strip().lower() in ("0", "off", "false", "no"):
        return None, "turned off by DECENTOPT_NATIVE"
    lib, why = installed_library()
    if lib is not None:
        return lib, ""
    lib, also = cached_library()
    return (lib, "") if lib is not None else (None, f"{why}; {also}")


def run(name: str, dtype: torch.dtype, failure: str, *args: object, isa: str | None = None) -> bool:
    """Call function ``name`` in its variant for ``dtype`` with ``args``: False without the
    library; a RuntimeError saying ``failure`` where the function reports one."""
    lib, _ = library()
    if lib is None:
        return False
    if lib.function(name, SUFFIX[dtype], isa)(*args):
        raise RuntimeError(failure)
    return True


def describe() -> str:
    """Which kernels the simulator uses, in words (what ``print(native.describe())`` says)."""
    lib, why = library()
    if lib is None:
        return f"native kernels: not in use ({why}); the simulator mixes with torch"
    others = [v for v in lib.variants if v != lib.isa]
    below = f"; this CPU also runs {', '.join(others)}" if others else ""
    return f"native kernels: in use, {lib.isa} variant (library {lib.origin}: {lib.path}){below}"
