"""The run specification: one TOML schema for every kind of experiment.

A specification names a problem kind (``problem``, with its own section
``[problem_params]``: the dataclass registered in :data:`decentopt.experiments.kinds.KINDS`),
the ``agents`` and their ``[topology]``, the algorithms (``[algorithms.LABEL]``
with ``[defaults]``; a ``method`` key makes a labelled variant, a list value a
grid of variants), seeds by role, how many independent ``runs``, what to record and
report; ``[quick]`` holds ``--quick``'s overrides, ``[[claims]]`` what ``--check``
judges, ``plugins`` users' methods to load first. ``docs/experiments.md`` has every key.

Typed with dataclasses (:mod:`decentopt._schema`) rather than key-by-key checks:
every error names the file, the table, the key, what was found and the fix.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from decentopt import algorithms, plugins, topology
from decentopt._checks import unknown_name
from decentopt._schema import ConfigError, bounded, parse, prefixed
from decentopt.comm.cost import NetworkModel
from decentopt.driver.timeline import TimeModel, staleness
from decentopt.experiments import kinds, sources
from decentopt.experiments.claims import Claim, parse_claims
from decentopt.experiments.sources import PRESETS, is_study, merge, parse_override, read_toml
from decentopt.experiments.variants import (
    Variant,
    check_labels,
    present,
    rounds_as_gossip,
    variants,
)
from decentopt.integrations import loggers
from decentopt.perf import MEMORY_MARGIN, available_memory, gib
from decentopt.styles import display_name
from decentopt.topology.footprint import build_bytes

__all__ = ["PRESETS", "ConfigError", "RunSpec", "Seeds", "Variant", "load_spec", "read_toml"]

#: Fields that change how results are shown, not what they are: outside the fingerprint.
PRESENTATION = frozenset(
    "claims name description reproduces source metric also_report threshold timeout threads "
    "network timing checkpoint_every checkpoint_minutes logging executor".split()
)
#: The layout of result rows; stored units of another layout are recomputed.
ROW_FORMAT = 3


#: Seeds are offset by runs, ranks and roles: kept well inside torch's 64-bit seeds.
MAX_SEED = 2**62
#: Gossip rounds of a run (iterations x rounds per step) beyond which it is warned of: each
#: round is about a step's work, and 10^8 take days.
MOST_ROUNDS = 10**8
#: Graphs kept built (:func:`_built`): a study's part checks, runs and reports one graph
#: after the other, and a few variants name graphs of their own.
GRAPHS_KEPT = 8


@dataclass(frozen=True)
class Seeds:
    """Seeds by role: ``data`` (problem instance, split, model init, mini-batch order),
    ``noise`` (gradient noise, augmentation, dropout), ``graph`` (random topologies)."""

    data: int = bounded(0, minimum=0, maximum=MAX_SEED)
    noise: int = bounded(1, minimum=0, maximum=MAX_SEED)
    graph: int = bounded(0, minimum=0, maximum=MAX_SEED)


@dataclass(frozen=True, kw_only=True)
class _Shared:
    """The keys every kind of run shares."""

    problem: str
    topology: dict[str, Any]
    agents: int = bounded(minimum=1)
    runs: int = bounded(1, minimum=1)
    iterations: int | None = bounded(None, minimum=1)
    seeds: Seeds = field(default_factory=Seeds)
    record_points: int = bounded(100, minimum=2)
    metric: str = ""
    also_report: tuple[str, ...] = ()
    threshold: float = bounded(1e-3, above=0)
    timeout: float = bounded(120.0, above=0)
    threads: int | None = bounded(None, minimum=1, maximum=1024)
    mix_rounds: int = bounded(1, minimum=1)
    acceleration: Literal["none", "chebyshev"] = "none"
    network: NetworkModel = field(default_factory=NetworkModel)
    timing: TimeModel | None = None
    checkpoint_every: int | None = bounded(None, minimum=1)
    checkpoint_minutes: float | None = bounded(None, above=0)
    logging: dict[str, Any] = field(default_factory=dict)  # logger name -> its target
    executor: dict[str, Any] = field(default_factory=dict)  # engines.py: where units run
    name: str = ""
    description: str = ""
    reproduces: str = ""


@dataclass(frozen=True, kw_only=True)
class _File(_Shared):
    """A specification file as written: the kind's section and the algorithms still raw."""

    algorithms: dict[str, Any]
    plugins: tuple[str, ...] = ()
    claims: tuple[dict[str, Any], ...] = ()
    problem_params: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    quick: dict[str, Any] = field(default_factory=dict)


@functools.lru_cache(maxsize=GRAPHS_KEPT)
def _built(name: str, agents: int, options: str) -> topology.Network:
    """The graph ``name`` over ``agents`` with the JSON ``options``, built once: a study
    loads, checks, runs and reports each of its graphs (they are frozen, so shared)."""
    return topology.REGISTRY[name](agents, **json.loads(options))


@dataclass(frozen=True, kw_only=True)
class RunSpec(_Shared):
    """A validated specification (see the module docstring for the file format)."""

    params: Any  # the kind's ProblemSpec dataclass
    algorithms: dict[str, Variant]
    claims: tuple[Claim, ...] = ()
    source: str = ""

    @property
    def panel(self) -> str | None:
        """The parameter whose values give one panel each (None: a single panel)."""
        return self.params.panel

    def fingerprint(self, label: str, run: int | None = None) -> str:
        """Hash of the whole specification minus presentation, for one variant (and run)."""
        whole = dataclasses.asdict(dataclasses.replace(self, claims=()))
        payload = {k: v for k, v in whole.items() if k not in PRESENTATION}
        payload["algorithms"] = dataclasses.asdict(self.algorithms[label])
        payload["algorithms"].pop("label")
        if payload["algorithms"]["topology"] is None:  # the shared graph: hashed above
            payload["algorithms"].pop("topology")
        if self.timing is not None and staleness(self.algorithms[label].make()):
            payload["timing"] = whole["timing"]  # it sets the ages of bounded staleness
        payload["run"] = run
        payload["rows"] = ROW_FORMAT
        blob = json.dumps(payload, sort_keys=True, default=repr)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def select(self, labels: list[str]) -> RunSpec:
        """Only the variants ``labels`` (e.g. ``--only ed,edm``), in that order; a grid's
        label (``edm`` of ``[algorithms.edm] lr = [...]``) selects all its members."""
        check_labels(labels, list(self.algorithms))
        chosen = present(labels, list(self.algorithms))
        return dataclasses.replace(self, algorithms={k: self.algorithms[k] for k in chosen})

    def present(self, labels: tuple[str, ...] | list[str]) -> list[str]:
        """The variants of this specification that the ``--only`` labels name (a grid's
        label: its members); labels of other specifications' variants are left out."""
        return present(labels, list(self.algorithms))

    def build_problem(
        self, runs: tuple[int, ...] | None = None, rank: int | range | None = None
    ) -> Any:
        """The problem of all runs (``None``, batched kinds) or of the runs ``runs``
        (consecutive; run r has data seed ``seeds.data + r``); ``rank``: only that agent,
        or that range of agents (torchrun, one or several agents per process)."""
        first = 0 if runs is None else runs[0]
        count = self.runs if runs is None else len(runs)
        seed = self.seeds.data + first
        return self.params.build(agents=self.agents, runs=count, seed=seed, rank=rank)

    def topology_of(self, label: str | None = None) -> dict[str, Any]:
        """The ``[topology]`` table the variant ``label`` runs on (None: the shared one)."""
        own = None if label is None else self.algorithms[label].topology
        return self.topology if own is None else own

    def build_topology(self, label: str | None = None) -> topology.Network:
        """The graph of ``[topology]`` (or of the variant ``label``'s own ``topology``) over
        ``agents``; a bad option is a :class:`ConfigError` naming the file, the table and
        the fix."""
        spec = dict(self.topology_of(label))
        table = "[topology]" if spec == self.topology else f"[algorithms.{label}] topology"
        name = spec.pop("name", None)
        with prefixed(f"{self.source} {table}", ValueError, ConfigError):
            topology.check_arguments(name, spec)
        need = build_bytes(name, self.agents, spec)
        room = available_memory()
        if room is not None and need * MEMORY_MARGIN > room:  # refused before it is built
            raise ConfigError(
                f"{self.source} {table}: {name} over {self.agents:,} agents needs about "
                f"{gib(need)} to build but {gib(room)} of memory are available; lower agents "
                "(ring and exponential cost a few bytes per agent; complete and graphs under "
                "1,024 agents are dense)"
            )
        if "seed" in inspect.signature(topology.REGISTRY[name]).parameters:
            spec.setdefault("seed", self.seeds.graph)
        with prefixed(f"{self.source} {table} ({name})", into=ConfigError):
            network = _built(name, self.agents, json.dumps(spec, sort_keys=True))
        if network.n != self.agents:
            options = ", ".join(f"{k} = {v!r}" for k, v in spec.items())
            raise ConfigError(
                f"{self.source} {table}: {name} with {options} has {network.n} agents, not "
                f"agents = {self.agents}; choose options for {self.agents} agents (a grid's "
                "cols must divide agents, or leave cols out for the squarest shape)"
            )
        return network

    def display_names(self) -> dict[str, str]:
        """How each variant's label is shown in tables and legends (``display_name``)."""
        return {label: display_name(label, v.method) for label, v in self.algorithms.items()}

    def graphs_text(self) -> str:
        """``ring of 16 agents``, and the graphs variants run on instead, by label."""
        extra = ", ".join(f"{k} = {v}" for k, v in self.topology.items() if k != "name")
        text = f"{self.topology['name']} of {self.agents} agents" + (f" ({extra})" if extra else "")
        own: dict[str, list[str]] = {}
        for label, v in self.algorithms.items():
            if v.topology is not None:
                own.setdefault(v.topology["name"], []).append(label)
        return text + "".join(f"; {g} for {', '.join(labels)}" for g, labels in own.items())

    def title(self, modified: bool = False) -> str:
        """A title built from what runs; "the paper's ..." only for an unmodified preset."""
        runs = (f"{self.iterations} iterations × " if self.iterations else "") + f"{self.runs} runs"
        parts = [self.params.describe(), self.graphs_text(), runs]
        for key, sym, whose in (("lr", "α", "step size"), ("beta", "β", "momentum")):
            having = [v for v in self.algorithms.values() if key in v.hyperparams]
            values = "/".join(sorted({str(v.hyperparams[key]) for v in having}))
            some = f" (the methods with {whose})" if len(having) < len(self.algorithms) else ""
            if having:  # ``some``: not every method has one
                parts.append(f"{sym} = {values}{some}")
        paper = f" — the paper's {self.reproduces}" if self.reproduces and not modified else ""
        return ", ".join(parts) + paper


def load_spec(
    path_or_preset: str | Path, *, quick: bool = False, overrides: list[str] | None = None
) -> RunSpec:
    """Read, merge (``--quick`` then ``--set`` overrides) and validate a specification."""
    try:
        raw, source = read_toml(path_or_preset)
        if is_study(raw):
            raise ConfigError(
                f"{source}: a study, not a run specification; run it with decentopt run"
            )
        if quick and (not isinstance(raw.get("quick"), dict) or not raw["quick"]):
            raise ConfigError(f"{source}: --quick needs a [quick] table of overrides")
        extras = [raw["quick"]] if quick else []
        for extra in extras + [parse_override(t) for t in overrides or []]:
            raw = merge(raw, extra)
        if isinstance(raw.get("problem"), dict):
            raise ConfigError(
                f'{source}: problem is a name, e.g. problem = "quadratic", with its settings in '
                "[problem_params]; found a [problem] table"
            )
        return validate(raw, source)
    except RecursionError:  # a file or --set value of thousands of nested arrays or tables
        raise sources.too_deep(path_or_preset) from None


def _check_graphs(spec: RunSpec) -> None:
    """Build every graph once (its options checked) and refuse a method on a graph it
    cannot run on (relaying needs a tree, exact gossip a symmetric graph, ...)."""
    for label, variant in spec.algorithms.items():
        method = variant.make()
        network = spec.build_topology(label)  # each graph is built once (:func:`_built`)
        try:
            algorithms.check_network(method, network)
        except ValueError as exc:
            tree = "chain" if "tree" in method.needs else "ring"
            example = "directed_ring" if "symmetric" not in method.needs else tree
            raise ConfigError(
                f"{spec.source} [algorithms.{label}]: {exc}; give the variant a graph of its "
                f'own, e.g. topology = "{example}"'
            ) from None


def validate(raw: dict[str, Any], source: str = "<config>") -> RunSpec:
    """Check every key and value; raise :class:`ConfigError` naming the first problem."""
    top = parse(_File, raw, source)
    if not re.fullmatch(r"[\w.+-]*", top.name) or top.name.startswith("."):
        # the name becomes file names: everything a run writes stays in its folder
        raise ConfigError(
            f"{source}: 'name' must be a plain file name (letters, digits, "
            f"'_', '-', '.', '+'; no path), found {top.name!r}"
        )
    if top.problem not in kinds.KINDS:
        raise ConfigError(f"{source}: {unknown_name('problem', top.problem, kinds.KINDS)}")
    kind = kinds.KINDS[top.problem]
    late = [a for a in (top.timing.slow if top.timing else ()) if a >= top.agents]
    if late:  # the [timing] table's slow agents must exist
        raise ConfigError(
            f"{source} [timing]: slow agent {late[0]} does not exist among agents = "
            f"{top.agents} (numbered 0 to {top.agents - 1}); name agents below {top.agents}"
        )
    if top.mix_rounds > 1 or top.acceleration != "none":  # the keys of earlier releases
        tables = rounds_as_gossip(top.algorithms, top.mix_rounds, top.acceleration, source)
        top = dataclasses.replace(top, algorithms=tables, mix_rounds=1, acceleration="none")
    params = parse(kind, top.problem_params, f"{source} [problem_params]")
    missing = kinds.missing_members(params)
    if missing:
        raise ConfigError(
            f"{source}: the problem kind {top.problem!r} ({kind.__name__}) lacks "
            f"{', '.join(missing)} of decentopt.experiments.kinds.ProblemSpec; add them"
        )
    with prefixed(f"{source} [problem_params]", ValueError, ConfigError):
        params.check(top.iterations)
    metric = top.metric or kind.metrics[0]
    for m in (metric, *top.also_report):
        if m not in kind.metrics:
            raise ConfigError(f"{source}: {unknown_name('metric', m, kind.metrics)}")
    trained = params.panel is None  # a training run: judged on its final values
    claims = parse_claims(top.claims, source, reads="finals" if trained else "panel")
    with prefixed(f"{source} [logging]", ValueError, ConfigError):
        loggers.check_table(top.logging)
    base = Path(source).parent if Path(source).is_file() else None
    for plugin in top.plugins:  # users' methods (modules, or files beside it) come first
        with prefixed(f"{source} plugins", plugins.PluginError, ConfigError):
            plugins.load(plugin, base=base)
    shared = {f.name: getattr(top, f.name) for f in dataclasses.fields(_Shared)}
    spec = RunSpec(
        **shared | {"name": top.name or Path(source).stem, "metric": metric},
        params=params,
        algorithms=variants(top.algorithms, top.defaults, source),
        claims=claims,
        source=source,
    )
    _warn_of_days(spec)
    spec.build_topology()  # every option checked, with the file and table named
    _check_graphs(spec)
    return spec


def _warn_of_days(spec: RunSpec) -> None:
    """Warn of a run of more than :data:`MOST_ROUNDS` gossip rounds: each round is about a
    step's work, however many a gossip (``multi_round(k)``) asks for."""
    if not spec.iterations:
        return
    rounds = {label: v.make().rounds_per_step for label, v in spec.algorithms.items()}
    label = max(rounds, key=rounds.__getitem__)
    if spec.iterations * rounds[label] > MOST_ROUNDS:
        each = f" × {rounds[label]:,} gossip rounds each ({label})" if rounds[label] > 1 else ""
        warnings.warn(
            f"{spec.source}: {spec.iterations:.3g} iterations{each} will take days; is that meant?",
            stacklevel=4,
        )
