"""Where specifications come from: the built-in presets, TOML files, and ``--set`` overrides.

:func:`read_toml` reads a file or a preset by name; :func:`merge` lays ``[quick]`` and the
overrides of :func:`parse_override` over it. Every failure is a one-line
:class:`~decentopt._schema.ConfigError` naming the file: not TOML, not UTF-8, or values
nested thousands deep (which would exhaust the reader's recursion).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from decentopt._schema import ConfigError

__all__ = [
    "PAPER_PRESETS",
    "PRESETS",
    "PRESET_DIR",
    "STUDIES",
    "is_study",
    "merge",
    "parse_override",
    "read_toml",
    "tomllib",
]

PRESET_DIR = Path(__file__).with_name("presets")
_BUILT_IN = {p.stem: tomllib.loads(p.read_text()) for p in PRESET_DIR.glob("*.toml")}


def is_study(raw: dict[str, Any]) -> bool:
    """Whether a file's table is a study (:mod:`.study`), which names its kind."""
    return "study" in raw


#: The run specifications among the presets.
PRESETS = sorted(k for k, raw in _BUILT_IN.items() if not is_study(raw))
#: The studies among the presets (:mod:`.study`).
STUDIES = sorted(k for k, raw in _BUILT_IN.items() if is_study(raw))
#: The presets that reproduce a result of the paper.
PAPER_PRESETS = [p for p in PRESETS if "reproduces" in _BUILT_IN[p]]


def too_deep(where: object) -> ConfigError:
    return ConfigError(
        f"{where}: values are nested too deeply (arrays or tables within each other hundreds "
        "of times); a specification nests a few levels"
    )


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with the tables of ``extra`` merged in, key by key (neither is changed)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> dict[str, Any]:
    """``"a.b=VALUE"`` -> ``{"a": {"b": VALUE}}``; VALUE is read as TOML (else a string)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. iterations=500")
    key, raw = (s.strip() for s in text.split("=", 1))
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: empty key")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    except RecursionError:
        raise too_deep(f"override {key}") from None
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def read_toml(path_or_preset: str | Path) -> tuple[dict[str, Any], str]:
    """The table of a TOML file or of the preset so named, and the file's path."""
    path = Path(path_or_preset)
    if not path.suffix and str(path_or_preset) in _BUILT_IN:
        path = PRESET_DIR / f"{path_or_preset}.toml"
    if not path.is_file():
        raise ConfigError(
            f"no configuration file at {path}; give a TOML file or a preset ({', '.join(PRESETS)})"
        )
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), str(path)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file; give a TOML specification") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:  # arrays or inline tables thousands deep
        raise too_deep(path) from None
