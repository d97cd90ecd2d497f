"""Names of earlier releases, read for one more release with a ``FutureWarning``.

* ``repetitions`` is now ``runs``;
* ``[topology] n`` is now the top-level ``agents``;
* ``[heterogeneity] values`` is now the kind's panel parameter in ``[problem_params]``
  (``c`` for the quadratic, ``sigma_h2`` for the logistic problem);
* a neural run's top-level problem keys (``dataset``, ``model``, ``phi``, ...) now
  sit in ``[problem_params]``.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Iterable
from typing import Any

from decentopt._schema import ConfigError
from decentopt.experiments import kinds

__all__ = ["renamed"]


def renamed(
    raw: dict[str, Any], source: str, top_keys: Iterable[str], problem: str | None = None
) -> dict[str, Any]:
    """``raw`` with the old names moved to the new ones (``top_keys``: today's top-level keys;
    ``problem``: the kind, for an override that does not name it)."""
    if isinstance(raw.get("problem"), dict):
        raise ConfigError(
            f'{source}: problem is a name, e.g. problem = "quadratic", with its settings in '
            "[problem_params]; found a [problem] table"
        )
    raw = copy.deepcopy(raw)

    def move(old: str, new: str, value: Any, into: dict[str, Any], key: str) -> None:
        warnings.warn(
            f"{source}: {old} is now {new}; the old name goes in the next release",
            FutureWarning,
            stacklevel=4,
        )
        if key in into and into[key] != value:
            raise ConfigError(f"{source}: both {old} and {new} are given; keep {new}")
        into[key] = value

    if "repetitions" in raw:
        move("'repetitions'", "'runs'", raw.pop("repetitions"), raw, "runs")
    if isinstance(raw.get("topology"), dict) and "n" in raw["topology"]:
        move("[topology] n", "the top-level 'agents'", raw["topology"].pop("n"), raw, "agents")
    kind = kinds.KINDS.get(raw.get("problem", problem))  # type: ignore[arg-type]
    params = raw.setdefault("problem_params", {})
    if kind is not None and isinstance(params, dict):
        het = raw.pop("heterogeneity", None)
        if isinstance(het, dict) and kind.panel:
            unknown = set(het) - {"values"}
            if unknown:
                raise ConfigError(f"{source} [heterogeneity]: unknown key {unknown.pop()!r}")
            move(
                "[heterogeneity] values",
                f"[problem_params] {kind.panel}",
                het.get("values"),
                params,
                kind.panel,
            )
        for key in [f.name for f in dataclasses.fields(kind)]:
            if key in raw and key not in top_keys:
                move(f"top-level '{key}'", f"[problem_params] {key}", raw.pop(key), params, key)
    return raw
