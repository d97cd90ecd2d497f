"""Experiment configuration files (TOML), validated with clear errors.

A configuration describes one sweep: a problem generated as in the paper, a
topology, the heterogeneity levels (one figure panel each), the algorithms with
their hyper-parameters, iterations, repetitions and seeds. Example::

    name = "my-sweep"
    problem = "quadratic"          # or "logistic"
    iterations = 2000
    repetitions = 10
    metric = "dist_to_opt"         # plotted and summarised
    also_report = ["consensus"]    # further metrics summarised in tables
    threshold = 1e-3               # "iterations to reach" in the summary

    [seeds]                        # split by role: all algorithms share data and noise
    data = 0
    noise = 1
    graph = 0

    [topology]
    name = "ring"
    n = 32

    [problem_params]               # keyword arguments of the problem's paper() generator
    sigma2 = 0.05

    [heterogeneity]
    values = [1.0, 0.5]            # of the problem's heterogeneity parameter (c or sigma_h2)

    [defaults]                     # applied to every algorithm that has the field
    lr = 0.05
    beta = 0.9

    [algorithms.ed]
    [algorithms.edm]
    beta = 0.95

    [quick]                        # overrides applied by --quick
    iterations = 300
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import inspect
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from decentopt import algorithms, topology
from decentopt._checks import as_count, unknown_name
from decentopt.problems import PAPER_PROBLEMS

__all__ = [
    "PRESETS",
    "ConfigError",
    "ExperimentConfig",
    "apply_overrides",
    "load_config",
    "parse_override",
    "validate",
]

PRESET_DIR = Path(__file__).with_name("presets")
PRESETS = sorted(p.stem for p in PRESET_DIR.glob("*.toml"))

_TOP_KEYS = {
    "name": str,
    "description": str,
    "reproduces": str,
    "problem": str,
    "iterations": int,
    "repetitions": int,
    "record_points": int,
    "metric": str,
    "also_report": list,
    "threshold": float,
    "seeds": dict,
    "topology": dict,
    "problem_params": dict,
    "heterogeneity": dict,
    "defaults": dict,
    "algorithms": dict,
    "quick": dict,
}
_SEED_KEYS = ("data", "noise", "graph")
_METRICS = ("dist_to_opt", "grad_norm", "opt_gap", "consensus")
_DTYPES = ("float32", "float64")


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message says where and why."""


@dataclass(frozen=True)
class ExperimentConfig:
    """A validated sweep description (see the module docstring for the file format)."""

    name: str
    problem: str
    iterations: int
    repetitions: int
    topology: dict[str, Any]
    problem_params: dict[str, Any]
    heterogeneity: list[float]
    algorithms: dict[str, dict[str, Any]]
    seeds: dict[str, int] = field(default_factory=lambda: {"data": 0, "noise": 1, "graph": 0})
    record_points: int = 100
    metric: str = "dist_to_opt"
    also_report: list[str] = field(default_factory=list)
    threshold: float = 1e-3
    description: str = ""
    reproduces: str = ""
    source: str = ""

    def title(self, modified: bool = False) -> str:
        """A title built from what runs (not from the preset's prose).

        ``modified``: the run was changed by ``--quick`` or ``--set``, so it is
        not the paper's experiment and the title does not claim to be.
        """
        label = {"quadratic": "Quadratic", "logistic": "Logistic regression"}[self.problem]
        params = ", ".join(
            f"{k} = {v}"
            for k, v in self.problem_params.items()
            if k not in ("dtype", "compute_dtype")
        )
        topo = ", ".join(f"{k} = {v}" for k, v in self.topology.items() if k not in ("name", "n"))
        topo_text = f"{self.topology['name']} n = {self.topology['n']}" + (
            f" ({topo})" if topo else ""
        )
        hp = []
        for key, sym in (("lr", "α"), ("beta", "β")):
            values = sorted({str(h[key]) for h in self.algorithms.values() if key in h})
            if values:
                hp.append(f"{sym} = {'/'.join(values)}")
        text = (
            f"{label}" + (f" ({params})" if params else "") + f", {topo_text}, "
            f"{self.iterations} iterations × {self.repetitions} repetitions"
            + (", " + ", ".join(hp) if hp else "")
        )
        if self.reproduces and not modified:
            text += f" — the paper's {self.reproduces}"
        return text

    @property
    def heterogeneity_param(self) -> str:
        return PAPER_PROBLEMS[self.problem][1]

    def fingerprint(self, algorithm: str) -> str:
        """Hash of everything that determines one algorithm's results."""
        payload = {
            "problem": self.problem,
            "iterations": self.iterations,
            "repetitions": self.repetitions,
            "topology": self.topology,
            "problem_params": self.problem_params,
            "heterogeneity": self.heterogeneity,
            "seeds": self.seeds,
            "record_points": self.record_points,
            "algorithm": algorithm,
            "hyperparams": self.algorithms[algorithm],
        }
        blob = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def _check_type(where: str, key: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int:
        try:
            return as_count(value, f"'{key}'", minimum=-(2**63))
        except TypeError:
            raise _fail(where, f"'{key}' must be a whole number, got {value!r}") from None
    if not isinstance(value, kind):
        raise _fail(where, f"'{key}' must be {kind.__name__}, got {type(value).__name__} {value!r}")
    return value


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
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
    nested: dict[str, Any] = {}
    node = nested
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return nested


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        raw = _deep_merge(raw, parse_override(text))
    return raw


def _read(path_or_preset: str | Path) -> tuple[dict[str, Any], str]:
    path = Path(path_or_preset)
    if not path.suffix and str(path_or_preset) in PRESETS:
        path = PRESET_DIR / f"{path_or_preset}.toml"
    if not path.is_file():
        raise ConfigError(
            f"no configuration file at {path}; give a TOML file or a preset ({', '.join(PRESETS)})"
        )
    try:
        return tomllib.loads(path.read_text()), str(path)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


def load_config(
    path_or_preset: str | Path, *, quick: bool = False, overrides: list[str] | None = None
) -> ExperimentConfig:
    """Read, merge (``--quick`` then ``--set`` overrides) and validate a configuration."""
    raw, source = _read(path_or_preset)
    quick_table = raw.get("quick", {})
    if quick:
        if not isinstance(quick_table, dict) or not quick_table:
            raise ConfigError(f"{source}: --quick needs a [quick] table of overrides")
        raw = _deep_merge(raw, quick_table)
    raw = apply_overrides(raw, overrides or [])
    return validate(raw, source)


def check_keys(
    raw: dict[str, Any], schema: dict[str, type], required: tuple[str, ...], where: str
) -> None:
    """Unknown keys, wrong types (ints accepted as floats) and missing keys, in place."""
    for key in raw:
        if key not in schema:
            raise _fail(where, unknown_name("key", key, schema))
    for key, kind in schema.items():
        if key in raw:
            raw[key] = _check_type(where, key, raw[key], kind)
    for key in required:
        if key not in raw:
            raise _fail(where, f"missing required key '{key}'")


def validate_algorithms(raw: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """``[algorithms.NAME]`` tables merged with ``[defaults]``, each instantiated once."""
    if not isinstance(raw.get("algorithms"), dict):
        raise _fail(where, "missing table [algorithms]; add e.g. [algorithms.edm]")
    defaults = dict(raw.get("defaults", {}))
    algs: dict[str, dict[str, Any]] = {}
    if not raw["algorithms"]:
        raise _fail(f"{where} [algorithms]", "list at least one algorithm, e.g. [algorithms.edm]")
    for name, hp in raw["algorithms"].items():
        if name not in algorithms.REGISTRY:
            raise _fail(
                f"{where} [algorithms]", unknown_name("algorithm", name, algorithms.names())
            )
        if not isinstance(hp, dict):
            raise _fail(f"{where} [algorithms.{name}]", "must be a table of hyper-parameters")
        fields_ = algorithms.hyperparameters(name)
        merged = {k: v for k, v in defaults.items() if k in fields_} | hp
        try:
            algorithms.make(name, **merged)
        except (TypeError, ValueError) as exc:
            raise _fail(f"{where} [algorithms.{name}]", str(exc)) from None
        algs[name] = merged
    unused = [k for k in defaults if not any(k in algorithms.hyperparameters(a) for a in algs)]
    if unused:
        raise _fail(f"{where} [defaults]", f"no listed algorithm has the field(s) {unused}")

    return algs


def validate(raw: dict[str, Any], source: str = "<config>") -> Any:
    """Check every key and value; raise :class:`ConfigError` naming the first problem.

    Returns an :class:`ExperimentConfig` for the convex problems and a
    :class:`~decentopt.experiments.training_config.TrainingConfig` for
    ``problem = "neural"``.
    """
    where = source
    if raw.get("problem") == "neural":
        from decentopt.experiments.training_config import validate_training

        return validate_training(raw, source)
    check_keys(
        raw, _TOP_KEYS, ("problem", "iterations", "repetitions", "topology", "algorithms"), where
    )

    problem = raw["problem"]
    if problem not in PAPER_PROBLEMS:
        raise _fail(where, unknown_name("problem", problem, PAPER_PROBLEMS))
    generator, het_param = PAPER_PROBLEMS[problem]
    if raw["iterations"] < 1:
        raise _fail(where, f"'iterations' must be >= 1, got {raw['iterations']}")
    if raw["repetitions"] < 1:
        raise _fail(where, f"'repetitions' must be >= 1, got {raw['repetitions']}")
    if raw.get("record_points", 100) < 2:
        raise _fail(where, "'record_points' must be >= 2")
    metric = raw.get("metric", "dist_to_opt")
    if metric not in _METRICS:
        raise _fail(where, unknown_name("metric", metric, _METRICS))
    for extra in raw.get("also_report", []):
        if extra not in _METRICS:
            raise _fail(where, "'also_report': " + unknown_name("metric", extra, _METRICS))
    if not raw.get("threshold", 1e-3) > 0:
        raise _fail(where, "'threshold' must be > 0")

    seeds = dict(raw.get("seeds", {}))
    for key, value in seeds.items():
        if key not in _SEED_KEYS:
            raise _fail(f"{where} [seeds]", unknown_name("key", key, _SEED_KEYS))
        seeds[key] = _check_type(f"{where} [seeds]", key, value, int)
    seeds = {"data": 0, "noise": 1, "graph": 0} | seeds

    topo = dict(raw["topology"])
    if "name" not in topo or "n" not in topo:
        raise _fail(f"{where} [topology]", "needs 'name' and 'n', e.g. name = \"ring\", n = 32")
    if topo["name"] not in topology.REGISTRY:
        raise _fail(
            f"{where} [topology]",
            unknown_name("topology", topo["name"], topology.REGISTRY),
        )
    topo["n"] = _check_type(f"{where} [topology]", "n", topo["n"], int)
    builder = topology.REGISTRY[topo["name"]]
    params = inspect.signature(builder).parameters
    for key in topo:
        if key not in ("name", "n") and key not in params:
            valid = [p for p in params if p not in ("n", "seed")]
            raise _fail(
                f"{where} [topology]",
                f"unknown key '{key}' for {topo['name']}; valid: name, n, {', '.join(valid)}",
            )

    problem_params = dict(raw.get("problem_params", {}))
    sig = inspect.signature(generator).parameters
    allowed = [p for p in sig if p not in ("n", "repetitions", "seed", het_param)]
    for key, value in problem_params.items():
        if key not in allowed:
            raise _fail(
                f"{where} [problem_params]",
                f"unknown key '{key}' for problem {problem!r}; valid: {', '.join(allowed)}"
                + (f" (set {het_param} in [heterogeneity] values)" if key == het_param else ""),
            )
        if key in ("dtype", "compute_dtype") and value not in _DTYPES:
            raise _fail(f"{where} [problem_params]", f"{key} must be one of {_DTYPES}")

    het = raw.get("heterogeneity", {})
    for key in het:
        if key != "values":
            raise _fail(f"{where} [heterogeneity]", f"unknown key '{key}'; valid: values")
    values = het.get("values")
    if (
        not isinstance(values, list)
        or not values
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    ):
        raise _fail(
            f"{where} [heterogeneity]",
            f"'values' must be a non-empty list of numbers (values of {het_param})",
        )

    algs = validate_algorithms(raw, where)

    return ExperimentConfig(
        name=raw.get("name", Path(source).stem),
        description=raw.get("description", ""),
        reproduces=raw.get("reproduces", ""),
        problem=problem,
        iterations=raw["iterations"],
        repetitions=raw["repetitions"],
        topology=topo,
        problem_params=problem_params,
        heterogeneity=[float(v) for v in values],
        algorithms=algs,
        seeds=seeds,
        record_points=raw.get("record_points", 100),
        metric=metric,
        also_report=list(raw.get("also_report", [])),
        threshold=float(raw.get("threshold", 1e-3)),
        source=source,
    )
