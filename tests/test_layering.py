"""The package's layers: imports run one way, no circles, no long modules, no hidden loads."""

from __future__ import annotations

import ast
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

import decentopt

ROOT = Path(decentopt.__file__).parent
#: Layers from the bottom: a module may import its own layer and the ones below only.
LAYERS = (
    (
        "_checks",
        "_registry",
        "_renamed",
        "_schema",
        "_process",
        "perf",
        "schedules",
        "updates",
        "native",
        "plan",
        "models",
        "data",
        "compression",
    ),
    ("topology", "communicator"),
    ("algorithms", "problems", "theory", "analysis", "results"),
    ("comm",),
    (
        "distributed",
        "driver",
        "simulate",
        "training",
        "styles",
        "figures",
        "plotting",
        "drawing",
        "plugins",
        "catalog",
        "integrations",
    ),
    ("experiments",),
    ("cli", "__main__"),
)
#: What the math layer may not know of at all (not even in TYPE_CHECKING blocks it may).
BACKEND = ("decentopt.native", "decentopt.comm.mixers", "decentopt.comm.simulated")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, typed: bool = False) -> set[str]:
    """Modules imported when ``path`` runs (``if TYPE_CHECKING:`` blocks left out, unless
    ``typed``: then every import, as a type checker reads them)."""
    tree = ast.parse(path.read_text())
    typing_only = (
        {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
            for stmt in block.body
            for node in ast.walk(stmt)
        }
        if not typed
        else set()
    )
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("decentopt")}


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for depth, names in enumerate(LAYERS):
        if top in names:
            return depth
    raise AssertionError(f"{module} belongs to no layer of LAYERS; add it")


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


@pytest.mark.parametrize("typed", [False, True], ids=["run-time", "type-only too"])
def test_every_import_runs_down_the_layers(typed):
    upward = []
    modules = _modules()
    for module, path in modules.items():
        if module == "decentopt":
            continue  # the package's front door re-exports every layer
        # "from decentopt import x" names the front door, which Python runs for any import
        for target in _runtime_imports(path, typed) - {"decentopt", "decentopt.__version__"}:
            while target not in modules and "." in target:  # a name imported from a module
                target = target.rsplit(".", 1)[0]
            if target == "decentopt":
                upward.append(f"{module} imports a name of the package's front door")
            elif _layer(target) > _layer(module):
                upward.append(f"{module} -> {target}")
    assert not upward, "imports running up the layers:\n" + "\n".join(sorted(upward))


@pytest.mark.parametrize("typed", [False, True], ids=["run-time", "type-only too"])
def test_there_is_no_import_circle(typed):
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for target in _runtime_imports(path, typed) - {"decentopt"}:
            while target and target not in modules:
                target = target.rsplit(".", 1)[0] if "." in target else ""
            parent_package = path.name == "__init__.py" and target.startswith(module + ".")
            if target and target != module and not parent_package:
                if not module.startswith(target + "."):  # a submodule needs its package
                    edges[module].add(target)
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


#: The problems' own kernels (one pass over a problem's data), which no backend chooses.
PROBLEM_KERNELS = "decentopt.native.problems"


def test_the_math_layer_knows_no_backend():
    """Not even for types: the rules type against :mod:`decentopt.communicator`, below them."""
    for module, path in _modules().items():
        if module.startswith(("decentopt.algorithms", "decentopt.problems")):
            for target in _runtime_imports(path, typed=True):
                if module.startswith("decentopt.problems") and target.startswith(PROBLEM_KERNELS):
                    continue
                backend = target == "decentopt.comm" or target.startswith(
                    ("decentopt.comm.", *BACKEND)
                )
                assert not backend, (module, target)


def test_importing_the_algorithms_loads_no_native_code():
    code = (
        "import sys, decentopt.algorithms\n"
        "from decentopt import native\n"
        "assert native.library.cache_info().currsize == 0, 'the library was loaded'\n"
        "assert not any('_kernels' in m or 'kernels-' in m for m in map(str, sys.modules))\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_no_module_is_over_four_hundred_lines():
    long = {m: n for m, p in _modules().items() if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_no_module_keeps_the_formatter_off():
    """Code is laid out by the formatter everywhere: a table is data, a long call gets a
    helper, a long module is split; never ``# fmt: skip`` or ``# fmt: off``."""
    kept = []
    for module, path in _modules().items():
        with path.open("rb") as source:
            for token in tokenize.tokenize(source.readline):
                text = token.string.replace(" ", "")
                if token.type == tokenize.COMMENT and ("#fmt:skip" in text or "#fmt:off" in text):
                    kept.append(f"{module}:{token.start[0]}")
    assert not kept, kept


def test_no_function_of_the_driver_or_the_experiments_is_over_sixty_lines():
    long = []
    for module, path in _modules().items():
        if module.split(".")[1:2] not in (["driver"], ["experiments"]):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.end_lineno - node.lineno + 1 > 60:  # type: ignore[operator]
                    long.append(f"{module}.{node.name}")
    assert not long, f"split these into parts: {long}"
