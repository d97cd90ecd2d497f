"""The study file: a reproduction target made of several run specifications, as TOML.

A study names its kind (``study``: how its parts are reported, docs/experiments.md) and its
parts: the specifications it runs (``specs``: preset names, or paths relative
to the study file), and for a graph study the graphs and numbers of agents each
part is run over. Its claims sit in the parts' ``[[claims]]`` tables, or, for
claims across parts, in the study's own. The built-in studies are files of
``experiments/presets/`` (``decentopt reproduce methods`` runs
``presets/methods.toml``); a copy runs with ``decentopt run COPY.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from decentopt._schema import ConfigError, bounded, parse
from decentopt.experiments.sources import PRESETS, is_study, merge, read_toml
from decentopt.experiments.spec import RunSpec, load_spec
from decentopt.experiments.variants import check_labels

__all__ = ["Request", "Study", "load_study"]


@dataclass(frozen=True)
class Request:
    """What of a study runs: ``--quick``, ``--set`` overrides of every part, ``--only``
    labels (``None``: all), ``--check`` and ``--x``."""

    quick: bool = False
    sets: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    check: bool = False
    #: the curves' axis asked for (``--x``), or ``None``: the study's own ``x``
    x: str | None = None

    def load(self, path: str, sets: list[str] | None = None) -> RunSpec:
        """A part with the request's ``--quick`` and ``--set`` (after ``sets``)."""
        return load_spec(path, quick=self.quick, overrides=[*(sets or []), *self.sets])


@dataclass(frozen=True, kw_only=True)
class Study:
    """A validated study file (see the module docstring)."""

    study: Literal["tuned", "bytes", "graphs", "scaling", "cases"]
    title: str = ""
    specs: tuple[str, ...] = ()
    x: Literal["step", "rounds", "bytes_per_agent", "model_time"] = "step"
    agents: tuple[int, ...] = ()
    graphs: dict[str, Any] = field(default_factory=dict)
    drawn: tuple[str, ...] = ()
    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # cases: part -> agents
    seeds: int = bounded(5, minimum=2)
    small: bool = False  # scaling: the small sizes (--quick)
    claims: tuple[dict[str, Any], ...] = ()
    quick: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    description: str = ""
    source: str = ""

    def spec_path(self, part: str) -> str:
        """A part as ``load_spec`` reads it: a file beside the study, else a preset."""
        beside = Path(self.source).parent / part
        return str(beside) if beside.suffix and beside.is_file() else part

    def parts(self, how: Request) -> list[RunSpec]:
        """Every part, loaded and checked before anything runs. ``--only``: each label must
        name a variant of some part, and a part runs the ones it has."""
        specs = [how.load(self.spec_path(p)) for p in self.specs]
        if how.only is None:
            return specs
        check_labels(how.only, list(dict.fromkeys(x for spec in specs for x in spec.algorithms)))
        chosen = [spec.present(how.only) for spec in specs]
        return [spec.select(labels) for spec, labels in zip(specs, chosen, strict=True) if labels]


def load_study(path_or_name: str | Path, *, quick: bool = False) -> Study:
    """Read a study file (or a built-in study by name); ``quick`` applies its ``[quick]``."""
    raw, source = read_toml(path_or_name)
    if not is_study(raw):
        raise ConfigError(f"{source}: not a study file (it names no 'study' kind)")
    if quick and raw.get("quick"):
        raw = merge(raw, raw["quick"])
    study = parse(Study, {"name": Path(source).stem} | raw | {"source": source}, source)
    if study.study == "scaling":
        return study
    if not study.specs:
        raise ConfigError(f"{source}: a {study.study} study lists its parts, e.g. specs = [...]")
    for part in study.specs:
        if study.spec_path(part) == part and part not in PRESETS:
            raise ConfigError(
                f"{source} specs: no specification {part!r} beside the study and no preset of "
                f"that name; give a .toml file or one of {', '.join(PRESETS)}"
            )
    if study.study == "graphs" and not (study.graphs and study.agents):
        raise ConfigError(f"{source}: a graphs study needs agents = [...] and a [graphs] table")
    for part, sizes in study.sizes.items():
        if part not in study.specs:
            raise ConfigError(
                f"{source} [sizes] {part}: not a part; the parts: {', '.join(study.specs)}"
            )
        if not sizes or min(sizes) < 1:
            raise ConfigError(f"{source} [sizes] {part}: give numbers of agents, e.g. [32, 64]")
    for label, table in study.graphs.items():
        if not isinstance(table, dict) or not isinstance(table.get("name"), str):
            raise ConfigError(
                f'{source} [graphs] {label}: give a [topology] table, e.g. {{name = "ring"}}'
            )
    return study
