"""How the native kernels are built: one recipe for ``pip install`` and for a first-use build.

Only the standard library is used here, so that ``setup.py`` can load this file
before anything is installed. ``kernels.c`` and ``blocks.c`` are compiled once per instruction set
of :data:`VARIANTS` (each object exports its functions with the variant's name
as suffix) and once ``api.c``; the objects are linked into one shared library.
At run time :mod:`decentopt.native` asks the library which variant the CPU
supports, so a wheel built on one machine is fast on every x86-64 CPU and
correct on any other (aarch64 builds the baseline variant only).

A variant the compiler refuses (an old compiler without AVX-512) is left out:
the loader uses the best variant the library has.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "COMMON_FLAGS",
    "HERE",
    "SOURCES",
    "VARIANTS",
    "build_unix",
    "digest_macro",
    "source_digest",
    "variants",
]

HERE = Path(__file__).resolve().parent
#: Every file the library is built from (a change to any of them rebuilds a cached copy).
SOURCES = (
    "kernels.c",
    "kernels.h",
    "compress.h",
    "logistic.h",
    "quadratic.h",
    "blocks.c",
    "blocks.h",
    "api.c",
)
#: The files compiled once per instruction set (each exports its functions with the suffix).
PER_ISA = ("kernels.c", "blocks.c")
#: Instruction-set variants of kernels.c: name and the compiler flags that enable it,
#: best first (``decentopt_cpu_level`` returns 2, 1, 0 in this order).
VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("avx512", ("-mavx512f",)),
    ("avx2", ("-mavx2", "-mfma")),
    ("generic", ()),
)
#: Flags of every object. ISO C mode keeps floating-point contraction off, so a
#: multiply-add rounds as torch's separate operations do.
COMMON_FLAGS = ("-O3", "-std=c11", "-fPIC", "-pthread")

_X86 = {"x86_64", "amd64", "i386", "i686", "x86"}


def source_digest() -> str:
    """A digest of the sources, compiled into the library (``decentopt_source_digest``)."""
    return hashlib.sha256(b"".join((HERE / name).read_bytes() for name in SOURCES)).hexdigest()[:16]


def digest_macro() -> tuple[str, str]:
    """The macro that compiles :func:`source_digest` into ``api.c``."""
    return "DECENTOPT_SOURCE_DIGEST", f'"{source_digest()}"'


def variants(machine: str | None = None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The variants worth building for a machine (``platform.machine()`` by default)."""
    machine = (machine or platform.machine()).lower()
    return VARIANTS if machine in _X86 else VARIANTS[-1:]


def build_unix(compiler: Sequence[str], target: Path, workdir: Path) -> None:
    """Build the library at ``target`` with a Unix-style compiler (gcc, clang, cc).

    Objects go to ``workdir``. Raises ``RuntimeError`` with the compiler's first line
    of error when the baseline variant or the link fails.
    """

    def call(args: list[str], what: str) -> None:
        """Run the compiler; a RuntimeError with its first line of error where it fails."""
        result = subprocess.run(
            [*compiler, *args], capture_output=True, text=True, timeout=300, cwd=str(workdir)
        )
        if result.returncode != 0:
            lines = (result.stderr or result.stdout or "").strip().splitlines()
            first = next((line for line in lines if "error" in line), lines[0] if lines else "")
            raise RuntimeError(f"{what} failed: {first}")

    objects = []
    for name, flags in variants():
        objs = [workdir / f"{Path(source).stem}_{name}.o" for source in PER_ISA]
        try:
            for source, obj in zip(PER_ISA, objs, strict=True):
                isa = [*COMMON_FLAGS, *flags, f"-DDECENTOPT_ISA={name}"]
                call([*isa, "-c", str(HERE / source), "-o", str(obj)], f"compiling {source}")
        except RuntimeError:
            if name == "generic":
                raise
            continue  # this compiler cannot target that instruction set
        objects.extend(str(obj) for obj in objs)
    api = workdir / "api.o"
    name, value = digest_macro()
    call(
        [*COMMON_FLAGS, f"-D{name}={value}", "-c", str(HERE / "api.c"), "-o", str(api)],
        "compiling api.c",
    )
    link = ["-shared", "-pthread", *objects, str(api), "-o", str(target), "-lm"]
    call(link, "linking the native kernels")
