"""Installing from pyproject.toml alone brings every module the package imports."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
#: import name -> distribution name, where they differ
DISTRIBUTIONS = {"sklearn": "scikit-learn", "tomli": "tomli", "mlflow": "mlflow-skinny"}


def imported_modules() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
            elif (  # an optional extra, imported when asked for: needs("wandb", ...)
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "needs"
                and isinstance(node.args[0], ast.Constant)
            ):
                found.add(node.args[0].value.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"decentopt"}


def test_every_third_party_import_is_declared():
    """As a dependency, or as an optional extra (Triton: the GPU kernels, shipped with
    torch's CUDA builds; imported only where it is)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [dep for deps in meta["optional-dependencies"].values() for dep in deps]
    declared = {
        dep.split(";")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower()
        for dep in [*meta["dependencies"], *extras]
    }
    missing = {DISTRIBUTIONS.get(m, m) for m in imported_modules()} - declared
    assert not missing, f"imported under src/ but not declared in pyproject.toml: {missing}"


def test_license_is_an_spdx_string_and_pins_are_used():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "MIT"
    pinned = {
        line.split("==")[0].lower()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    used = {DISTRIBUTIONS.get(m, m) for m in imported_modules()} | {"pytest", "ruff"}
    assert pinned <= used, f"pinned but never imported: {pinned - used}"
