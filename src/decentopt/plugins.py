"""Users' own methods: load a module or a ``.py`` file that registers algorithms.

A plugin is ordinary Python that defines a method and decorates it with
:func:`decentopt.algorithms.register` (``docs/extending.md``). It reaches the
library three ways, each loading it through :func:`load` or
:func:`load_entry_points`:

* ``decentopt run SPEC --plugin MODULE_OR_FILE`` (repeatable; also ``reproduce``,
  ``compare`` and ``methods``),
* ``plugins = ["mypkg.methods", "my_method.py"]`` at the top of a specification
  (paths relative to the specification file),
* the entry-point group ``decentopt.plugins`` of an installed distribution, loaded
  by the command line at start-up.

Loading is idempotent: a plugin loaded twice (by name, by path, or both ways)
registers its methods once.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import decentopt.algorithms  # noqa: F401  (the built-in registries, filled before a plugin adds)
from decentopt._registry import Registry

__all__ = ["ENTRY_POINT_GROUP", "PluginError", "failures", "is_path", "load", "load_entry_points"]

#: The entry-point group installed distributions declare their plugins in.
ENTRY_POINT_GROUP = "decentopt.plugins"
#: Plugins already loaded: the resolved file or the module name -> the names it registered
#: (methods, gossips, compression operators, graphs, ...: every :class:`Registry`).
_LOADED: dict[str, list[str]] = {}
#: Installed plugins that failed at start-up: distribution -> the one-line reason.
_FAILED: dict[str, str] = {}
#: Prefix of the module names files are loaded under (one unique name per file).
MODULE_PREFIX = "decentopt_plugin_"
#: What a plugin may raise while it imports, all reported as its failure: its exceptions,
#: and ``sys.exit()`` or ``KeyboardInterrupt`` raised by its code, which would otherwise end
#: the program that loads it (with no word of the plugin).
IMPORT_FAILURES = (Exception, SystemExit, KeyboardInterrupt)


class PluginError(ValueError):
    """A plugin could not be found or imported; the message names the plugin and the fix."""


def is_path(spec: str) -> bool:
    """Whether ``spec`` names a file (``x.py``, ``./x.py``, ``dir/x.py``) rather than a module."""
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def load(spec: str, *, base: str | Path | None = None) -> list[str]:
    """Import the plugin ``spec``: a module name (``mypkg.methods``) or a path to a ``.py``
    file (relative to ``base``, by default the working directory). Returns the names it
    registered (methods, gossips, compression operators, ...); a plugin loaded before
    returns ``[]`` and registers nothing.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(
            f"a plugin is a module name or a path to a .py file, e.g. mypkg.methods or "
            f"./my_method.py; got {spec!r}"
        )
    spec = spec.strip()
    if is_path(spec):
        path = (Path(base or ".") / Path(spec).expanduser()).resolve()
        return _once(str(path), lambda: _import_file(path, spec))
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", spec):
        raise PluginError(
            f"plugin {spec!r}: not a module name (dotted identifiers) nor a path ending in .py"
        )
    return _once(spec, lambda: _import_module(spec))


def loaded() -> list[str]:
    """The plugins loaded in this process (resolved file paths, module names), in order:
    what a process computing units elsewhere loads to know the same methods."""
    return list(_LOADED)


def _once(key: str, run: Callable[[], object]) -> list[str]:
    """Run the import ``run`` unless ``key`` was loaded; undo half a failed registration."""
    if key in _LOADED:
        return []
    before = [set(registry) for registry in Registry.every]
    try:
        run()
    except BaseException:
        for registry, names in zip(Registry.every, before, strict=False):
            for name in set(registry) - names:  # a retry after a fix starts clean
                del registry[name]
        raise
    added = zip(Registry.every, before, strict=False)
    _LOADED[key] = [name for registry, names in added for name in registry if name not in names]
    return list(_LOADED[key])


def _import_file(path: Path, spec: str) -> None:
    if not path.is_file():
        raise PluginError(f"plugin {spec}: no file at {path}; give the path of a .py file")
    if _imported(path):
        return  # imported already, e.g. by its module name
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    stem = re.sub(r"\W", "_", path.stem)
    name = f"{MODULE_PREFIX}{stem}_{digest}"
    found = importlib.util.spec_from_file_location(name, path)
    if found is None or found.loader is None:
        raise PluginError(f"plugin {spec}: {path} cannot be imported; give a .py file")
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module  # dataclasses and pickle look the module up by name
    # its folder is importable while it runs (sibling helpers), and not afterwards
    sys.path.insert(0, str(path.parent))
    try:
        found.loader.exec_module(module)
    except IMPORT_FAILURES as exc:
        del sys.modules[name]
        raise PluginError(_failed(spec, exc, path)) from None
    finally:
        if str(path.parent) in sys.path:
            sys.path.remove(str(path.parent))


def _import_module(spec: str) -> None:
    try:
        found = importlib.util.find_spec(spec)
        if found is None:
            raise ModuleNotFoundError(f"No module named {spec!r}", name=spec)
        if spec not in sys.modules and found.has_location and found.origin:
            if _imported(Path(found.origin).resolve()):
                return  # its file was loaded already, by path
        importlib.import_module(spec)
    except IMPORT_FAILURES as exc:
        name = exc.name if isinstance(exc, ModuleNotFoundError) else None
        if name is not None and (spec == name or spec.startswith(name + ".")):
            hint = Path(*spec.split(".")).with_suffix(".py")
            there = f" (to load the file {hint}, give its path: ./{hint})" if hint.is_file() else ""
            raise PluginError(
                f"plugin {spec}: no module named {name!r}; install the package that "
                f"provides it, add its folder to PYTHONPATH, or give a .py file's path{there}"
            ) from None
        raise PluginError(_failed(spec, exc, None)) from None


def _imported(path: Path) -> bool:
    """Whether a module of the file ``path`` is imported (only files of its name are
    resolved: a cheap scan)."""
    files = [getattr(module, "__file__", None) for module in list(sys.modules.values())]
    named = [file for file in files if isinstance(file, str) and Path(file).name == path.name]
    return any(Path(file).resolve() == path for file in named)


def _failed(spec: str, exc: BaseException, path: Path | None) -> str:
    """One line: the plugin, its own exception, and where in the plugin it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if path is None or Path(f.filename).resolve() == path]
    where = f" ({Path(mine[-1].filename).name}, line {mine[-1].lineno})" if mine else ""
    message = str(exc).splitlines()[0] if str(exc) else "raised while importing"
    if isinstance(exc, SystemExit):  # sys.exit(code): the code, not an empty message
        message = f"it called sys.exit({exc.code!r}) while importing"
    return f"plugin {spec} failed to import: {type(exc).__name__}: {message}{where}"


def load_entry_points() -> dict[str, str]:
    """Load every plugin of the installed distributions' ``decentopt.plugins`` entry points.

    A broken one does not stop the others: returns (and keeps, see :func:`failures`)
    ``{distribution: reason}`` for those that failed, each reason one line.
    """
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = point.dist.name if point.dist is not None else point.name
        if dist in _FAILED:
            continue
        try:
            _once(f"{point.value} ({dist})", point.load)
        except IMPORT_FAILURES as exc:
            _FAILED[dist] = _failed(f"{point.value} (distribution {dist})", exc, None)
    return dict(_FAILED)


def failures() -> dict[str, str]:
    """The installed plugins that failed to load: ``{distribution: reason}``."""
    return dict(_FAILED)
