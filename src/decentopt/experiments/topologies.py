"""The graph study: methods over static and time-varying graphs, per byte and second.

``decentopt reproduce topologies`` runs the study file ``presets/topologies.toml``
(:mod:`.study`, kind ``graphs``): each of its parts (``topologies_quadratic`` and
``topologies_logistic``: Figure 1's and Figure 2's problems at one heterogeneity
level) for every number of agents in ``agents`` over every graph of ``[graphs]``.
Every run goes through the one runner (resumable, one folder per graph); the study
writes ``results.csv`` (all rows, with ``problem``, ``agents`` and ``graph``
columns), ``summary.md`` (per problem and n: each graph's peers per round, rate,
modelled time per iteration, and every method's steady error) and figures of error
against iterations and against modelled time (the parts' ``[network]``).
``--check`` judges the study's ``[[claims]]`` -- checks of
:data:`decentopt.experiments.claims.CHECKS`, the graphs' labels their case axis, on every
part and n together -- and each part's own ``[[claims]]`` on every number of agents and
graph (the stragglers study).
"""

from __future__ import annotations

import itertools
import json
import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from decentopt._renamed import renamed
from decentopt.distributed import runtime
from decentopt.driver import RunOptions
from decentopt.experiments import claims as _claims
from decentopt.experiments.claims import (
    Claim,
    check_claims,
    check_panels,
    claims_markdown,
    parse_claims,
    tally,
)
from decentopt.experiments.reports import CHANGED_RUN, markdown_table
from decentopt.experiments.runner import Sweep, forked_map
from decentopt.experiments.spec import RunSpec
from decentopt.experiments.study import Request, Study, load_study
from decentopt.experiments.summary import Stat, summarise
from decentopt.experiments.units import parallel_jobs
from decentopt.plotting import LABELS, plot_curves
from decentopt.results import write_csv_atomic, write_text_atomic

__all__ = ["Case", "run_graphs"]

__getattr__ = renamed(
    __name__,
    {"CHECKS": (lambda: _claims.CHECKS, "its claims name decentopt.experiments.claims.CHECKS")},
)


@dataclass
class Case:
    """One problem at one n: every graph's spec, statistics and mean curves."""

    preset: str
    n: int
    specs: dict[str, RunSpec]
    stats: dict[tuple[str, str], Stat]  # a panel whose case axis is the graph: (graph, method)
    rows: dict[str, list[dict[str, Any]]]  # graph -> rows
    judged: dict[str, list] = field(default_factory=dict)  # graph -> the part's own verdicts
    built: dict[str, Any] = field(default_factory=dict)  # graph -> the network it ran on

    @property
    def name(self) -> str:
        return f"{self.preset.split('_', 1)[-1]}, n = {self.n}"


# ------------------------------------------------------------------- claims
# The study's [[claims]] are the shared checks (claims.CHECKS) on each case's panel, its
# graphs the case axis, judged on every problem and n together (claims.check_panels).

#: Check names of earlier releases, each standing for the claim in its place in the built-in
#: study (``presets/topologies.toml``): a copy of the study that still names one loads, with
#: a warning naming its replacement.
_OLD_CHECKS = (
    "one_peer_cheaper",
    "base_no_worse",
    "sparser_more_bias",
    "exact_diffusion_needs_fixed_w",
    "tracking_exact",
)


def _current(tables: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """``[[claims]]`` tables with a check name of an earlier release spelled as it is now."""
    current = []
    for table in tables:
        old = table.get("check")
        if old in _OLD_CHECKS:
            claim = load_study("topologies").claims[_OLD_CHECKS.index(old)]
            new = {key: value for key, value in claim.items() if key != "text"}
            warnings.warn(
                f"{where}: check = {old!r} is spelled {json.dumps(new)} now",
                DeprecationWarning,
                stacklevel=2,
            )
            table = {**table, **new}
        current.append(table)
    return current


# ------------------------------------------------------------------- report
def _graph_sweep(
    spec: RunSpec, folder: Path, options: RunOptions
) -> tuple[list[dict[str, Any]], Any]:
    """One part at one n over one graph, its units one after the other: its rows and the
    graph it ran on."""
    sweep = Sweep(spec, folder, options.but(jobs=1))
    return sweep.run().rows, sweep.topology


def _run_cases(study: Study, out: Path, options: RunOptions, how: Request) -> list[Case]:
    """Every part at every n over every graph. The graphs' sweeps run in ``--jobs`` workers,
    largest first, each computing its units one after the other: a quick sweep's units are
    too short and too few to share out evenly."""
    cases = []
    pending = []
    for part, n in itertools.product(study.specs, study.agents):
        case = Case("", n, {}, {}, {})
        for graph, table in study.graphs.items():
            sets = [f"agents={n}"] + [f"topology.{k}={json.dumps(v)}" for k, v in table.items()]
            spec = how.load(study.spec_path(part), sets)
            if how.only is not None:  # the labels of this part (all checked before)
                spec = spec.select(spec.present(how.only))
            case.preset = spec.name
            case.specs[graph] = spec
            pending.append((spec, out / spec.name / f"n{n}" / graph, options))
        cases.append(case)
    # as many sweeps at once as fit in memory; one after another under torchrun or for a
    # kind that cannot fork
    specs = [spec for spec, _, _ in pending]
    forks = all(s.params.batch_runs for s in specs) and runtime.job().world == 1
    jobs = parallel_jobs(specs, options.jobs) if forks else 1
    done = iter(forked_map(jobs, _graph_sweep, pending[::-1])[::-1])
    for case in cases:
        for graph, spec in case.specs.items():
            case.rows[graph], case.built[graph] = next(done)
            stats = summarise(case.rows[graph], spec)
            case.stats |= {(graph, label): s for (_, label), s in stats.items()}
            if how.check and spec.claims:
                case.judged[graph] = check_claims(spec.claims, stats)
    return cases


def _case_section(case: Case) -> list[str]:
    """One problem at one n: per graph, its peers per round, rate, modelled time per
    iteration and every method's steady error."""
    spec = next(iter(case.specs.values()))
    methods = list(dict.fromkeys(m for _, m in case.stats))
    body = []
    for graph in case.specs:
        built = case.built[graph]
        stats = [case.stats[(graph, m)] for m in methods]
        errors = [
            f"diverged ({s.diverged})" if s.steady != s.steady else f"{s.steady:.2e}" for s in stats
        ]
        last = max(case.rows[graph], key=lambda r: r["step"])  # modelled s per iteration there
        ms = f"{last['model_time'] / max(last['step'], 1) * 1e3:.3f}"
        body.append([graph, built.max_degree, f"{built.lam:.4f}", ms, *errors])
    header = ["graph", "peers / round", "λ per round", "ms / iteration"]
    network = spec.network
    return [
        f"## {case.name}",
        "",
        f"{spec.params.describe()}, {spec.iterations} iterations; steady "
        f"{spec.metric} per method (mean over the last 10 % of iterations and "
        f"{spec.runs} runs); modelled time: {network.bandwidth:g} B/s, "
        f"{network.latency * 1e6:g} µs per message, {network.compute * 1e6:g} µs of "
        "compute per step, the busiest agent setting each round.",
        "",
        markdown_table([*header, *(LABELS.get(m, m) for m in methods)], body),
        "",
    ]


def _figures(
    study: Study, cases: list[Case], rows: list[dict[str, Any]], out: Path, jobs: int
) -> list[Path]:
    """Per part and drawn method: every graph's curves against iterations and modelled time,
    a panel per n (drawn in ``jobs`` workers)."""
    figures: list[tuple[Callable[[], list[Path]]]] = []
    axes = (
        ("step", "iterations", "auto", "iterations"),
        ("model_time", "time", "log", "modelled seconds"),
    )
    for preset in dict.fromkeys(c.preset for c in cases):
        mine = [r for r in rows if r["problem"] == preset]
        spec = next(iter(next(c for c in cases if c.preset == preset).specs.values()))
        for method in [m for m in study.drawn if any(r["algorithm"] == m for r in mine)]:
            chosen = [r | {"algorithm": r["graph"]} for r in mine if r["algorithm"] == method]
            drawn = f"{LABELS.get(method, method)} on {preset.removeprefix('topologies_')}"
            for x, what, scale, words in axes:
                title = f"{drawn} against {words}"
                options = {"panel": "agents", "panel_title": "n = {value}", "x": x, "xscale": scale}
                path = out / f"{preset}_{method}_{what}"
                figures.append(
                    (partial(plot_curves, chosen, spec.metric, path, title=title, **options),)
                )
    return [file for files in forked_map(jobs, operator.call, figures) for file in files]


def _claims_section(claims: tuple[Claim, ...], cases: list[Case]) -> list[str]:
    verdicts = check_panels(claims, {c.name: c.stats for c in cases}) if claims else []
    lines = ["## Claims", "", *([claims_markdown(verdicts), ""] if claims else [])]
    for case in cases:
        for graph, own in case.judged.items():
            lines += [f"### {case.name}, {graph}", "", claims_markdown(own), ""]
            verdicts = [*verdicts, *own]
    return [*lines, tally(verdicts), ""]


def run_graphs(study: Study, out: Path, options: RunOptions, how: Request) -> list[Path]:
    """Run (or resume) a graph study into ``out``, as ``how`` asks; every part, ``--only``
    label and claim is checked before anything runs."""
    study.parts(how)
    claims = parse_claims(_current(study.claims, study.source), study.source, reads="panel")
    cases = _run_cases(study, out, options, how)
    everything = [
        r | {"problem": c.preset, "agents": c.n, "graph": g}
        for c in cases
        for g, rows in c.rows.items()
        for r in rows
    ]
    files = [write_csv_atomic(out / "results.csv", everything)]
    sections = [f"# {study.title}", "", *(line for c in cases for line in _case_section(c))]
    files += _figures(study, cases, everything, out, options.jobs)
    if how.check:
        sections += _claims_section(claims, cases)
        sections += [CHANGED_RUN, ""] if how.quick or how.sets else []
    text = "\n".join(sections)
    options.log(text)
    write_text_atomic(out / "summary.md", text)
    return [*files, out / "summary.md"]
