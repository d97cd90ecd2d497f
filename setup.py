"""Builds the native kernels when the package is installed (metadata: pyproject.toml).

The C library ``decentopt/native/_kernels*.so`` is compiled by the recipe of
``src/decentopt/native/build.py``: ``kernels.c`` and ``blocks.c`` once per instruction set
(AVX-512, AVX2 + FMA, baseline; baseline only off x86), ``api.c`` once, linked
into one library that picks its variant at run time. It is optional: where
there is no C compiler (or it fails) the install goes on without it, the
package builds the kernels at first use if a compiler appears later, and
otherwise mixes with torch (README, "Native kernels").
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "decentopt_native_build", HERE / "src" / "decentopt" / "native" / "build.py"
)
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)

NATIVE = "decentopt.native._kernels"


class BuildNative(build_ext):
    """Compiles the kernels with per-variant flags; a failure leaves the package without them."""

    def build_extension(self, ext: Extension) -> None:
        if ext.name != NATIVE:
            super().build_extension(ext)
            return
        try:
            self._build_native(ext)
        except Exception as exc:  # no compiler, an unsupported one, a failed link
            print(
                f"warning: decentopt's native kernels were not built ({exc}); the package "
                "builds them at first use where a C compiler is, else mixes with torch",
                file=sys.stderr,
            )

    def _build_native(self, ext: Extension) -> None:
        compiler = self.compiler
        if compiler.compiler_type != "unix":
            raise RuntimeError(f"the {compiler.compiler_type} compiler is not supported")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = Path(self.build_temp) / "native"
        common = [flag for flag in recipe.COMMON_FLAGS if flag != "-fPIC"]
        objects = []
        for name, flags in recipe.variants():
            try:
                objects += compiler.compile(
                    [str(recipe.HERE / source) for source in recipe.PER_ISA],
                    output_dir=str(temp / name),
                    macros=[("DECENTOPT_ISA", name)],
                    extra_postargs=[*common, *flags],
                )
            except Exception:
                if name == "generic":
                    raise
                print(f"note: the {name} variant of the native kernels was left out")
        objects += compiler.compile(
            [str(recipe.HERE / "api.c")],
            output_dir=str(temp / "api"),
            macros=[recipe.digest_macro()],
            extra_postargs=common,
        )
        compiler.link_shared_object(objects, str(target), extra_postargs=["-pthread"])


setup(
    ext_modules=[Extension(NATIVE, sources=[], optional=True)],
    cmdclass={"build_ext": BuildNative},
)
