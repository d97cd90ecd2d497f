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
``--check`` judges the study's ``[[claims]]``, each naming one of :data:`CHECKS`, and each
part's own ``[[claims]]`` on every number of agents and graph (the stragglers study).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decentopt._registry import Registry
from decentopt.analysis import ALPHA
from decentopt.distributed import runtime
from decentopt.driver import RunOptions
from decentopt.experiments.claims import (
    Claim,
    Factory,
    Verdict,
    check_claims,
    claims_markdown,
    combine,
    ordered_verdict,
    parse_claims,
    tally,
)
from decentopt.experiments.measures import STEADY
from decentopt.experiments.reports import CHANGED_RUN, markdown_table
from decentopt.experiments.runner import Sweep, forked_map, memory_parts
from decentopt.experiments.spec import RunSpec
from decentopt.experiments.study import Request, Study
from decentopt.experiments.summary import Stat, summarise
from decentopt.perf import MEMORY_MARGIN, available_memory
from decentopt.plotting import LABELS, plot_curves
from decentopt.results import write_csv_atomic, write_text_atomic

__all__ = ["CHECKS", "Case", "run_graphs"]

#: The graph labels the checks compare (the built-in study's [graphs]).
STATIC = ("ring", "torus", "exponential", "complete")
TIME_VARYING = ("one_peer_exponential", "one_peer_hypercube", "base_2", "base_3")


@dataclass
class Case:
    """One problem at one n: every graph's spec, statistics and mean curves."""

    preset: str
    n: int
    specs: dict[str, RunSpec]
    stats: dict[str, dict[str, Stat]]  # graph -> method -> Stat
    rows: dict[str, list[dict[str, Any]]]  # graph -> rows
    judged: dict[str, list] = field(default_factory=dict)  # graph -> the part's own verdicts
    built: dict[str, Any] = field(default_factory=dict)  # graph -> the network it ran on

    @property
    def name(self) -> str:
        return f"{self.preset.split('_', 1)[-1]}, n = {self.n}"


# ------------------------------------------------------------------- claims
# Each claim is judged on every case (problem, n) with the statistics of every other
# claim (claims.py): a comparison is decided by Welch's t-test at the claim's
# family-wise level, Bonferroni-corrected over its comparisons in all cases;
# within noise a strict claim is inconclusive.


def _order(case: Case, a: tuple[str, str], b: tuple[str, str], k: int) -> tuple[int | None, str]:
    """Compare the steady errors of (graph, method) ``a`` and ``b`` in one case: the order
    (:func:`ordered_verdict` reads it) and its word."""
    order = STEADY.order(case.stats[a[0]][a[1]], case.stats[b[0]][b[1]], k)
    return order, "unknown" if order is None else STEADY.words[order + 1]


def _per_iteration(case: Case, graph: str) -> float:
    """Modelled seconds per iteration over ``graph``, at the last recorded step."""
    last = max(case.rows[graph], key=lambda r: r["step"])
    return last["model_time"] / max(last["step"], 1)


Judge = Callable[[Case, int], tuple[bool | None, str]]
#: Checks a graph study's ``[[claims]]`` can name (``text`` and ``check``, no arguments).
CHECKS: Registry[Factory] = Registry("graph claim check")
_TEST = f"at a {ALPHA:.0%} family-wise level over every case"


def _per_case(comparisons: int, test: str) -> Callable[[Judge], Judge]:
    """Register a claim's check, named after ``judge`` (one case, with the comparisons of
    all): ``judge`` over every case, holding when it holds in every case and failing when it
    fails in one (three-way)."""

    def register(judge: Judge) -> Judge:
        def check(cases: list[Case]) -> Verdict:
            try:
                results = [(case, *judge(case, comparisons * len(cases))) for case in cases]
            except KeyError as exc:  # a copy of the study without a graph or method it compares
                return Verdict(None, f"needs {exc.args[0]!r} in every case")
            mark = {True: "yes", False: "no", None: "?"}
            evidence = "; ".join(f"{c.name}: {mark[h]} ({e})" for c, h, e in results)
            return Verdict(combine([h for _, h, _ in results]), evidence)

        CHECKS.add(judge.__name__, lambda: (check, test))
        return judge

    return register


@_per_case(1, f"modelled ms per iteration, and DSGD's steady error not higher, {_TEST}")
def one_peer_cheaper(case: Case, k: int) -> tuple[bool | None, str]:
    graphs = ("one_peer_exponential", "exponential")
    one, static = (_per_iteration(case, g) for g in graphs)
    order, word = _order(case, (graphs[0], "dsgd"), (graphs[1], "dsgd"), k)
    errors = [case.stats[g]["dsgd"].steady for g in graphs]
    return (ordered_verdict(order, strict=False) if one < static else False), (
        f"{one * 1e3:.3g} vs {static * 1e3:.3g} ms per iteration; error {errors[0]:.2e} vs "
        f"{errors[1]:.2e} ({word})"
    )


@_per_case(1, f"DSGD's steady error lower, {_TEST}")
def base_no_worse(case: Case, k: int) -> tuple[bool | None, str]:
    order, word = _order(case, ("base_3", "dsgd"), ("one_peer_exponential", "dsgd"), k)
    base, one = (case.stats[g]["dsgd"].steady for g in ("base_3", "one_peer_exponential"))
    return ordered_verdict(order, strict=True), f"{base:.2e} vs {one:.2e} ({word})"


SPARSER = ("complete", "exponential", "torus", "ring")


@_per_case(len(SPARSER) - 1, f"every step of the chain higher, {_TEST}")
def sparser_more_bias(case: Case, k: int) -> tuple[bool | None, str]:
    steps = list(itertools.pairwise(SPARSER))
    judged = [_order(case, (a, "dsgd"), (b, "dsgd"), k) for a, b in steps]
    values = " < ".join(f"{case.stats[g]['dsgd'].steady:.2e}" for g in SPARSER)
    words = ", ".join(f"{a} vs {b}: {w}" for (a, b), (_, w) in zip(steps, judged, strict=True))
    return combine([ordered_verdict(o, strict=True) for o, _ in judged]), f"{values} ({words})"


@_per_case(1, "runs stopped as diverged")
def exact_diffusion_needs_fixed_w(case: Case, k: int) -> tuple[bool | None, str]:
    static_ok = all(case.stats[g][m].diverged == 0 for g in STATIC for m in ("ed", "edm"))
    failed = [g for g in TIME_VARYING if any(case.stats[g][m].diverged for m in ("ed", "edm"))]
    return static_ok and len(failed) == len(TIME_VARYING), (
        f"static graphs: {'none' if static_ok else 'some'} diverged; time-varying graphs "
        f"where ED/EDM diverged: {', '.join(failed) or 'none'}"
    )


@_per_case(len(TIME_VARYING), f"DSGT's steady error lower on every time-varying graph, {_TEST}")
def tracking_exact(case: Case, k: int) -> tuple[bool | None, str]:
    judged = [_order(case, (g, "dsgt"), (g, "dsgd"), k) for g in TIME_VARYING]
    words = ", ".join(f"{g}: {w}" for g, (_, w) in zip(TIME_VARYING, judged, strict=True))
    return combine([ordered_verdict(o, strict=True) for o, _ in judged]), f"DSGT vs DSGD: {words}"


# ------------------------------------------------------------------- report
def _graph_sweep(
    spec: RunSpec, folder: Path, options: RunOptions
) -> tuple[list[dict[str, Any]], Any]:
    """One part at one n over one graph, its units one after the other: its rows and the
    graph it ran on."""
    sweep = Sweep(spec, folder, options.but(jobs=1))
    return sweep.run().rows, sweep.topology


def _workers(specs: list[RunSpec], jobs: int) -> int:
    """How many sweeps run at once: ``jobs`` for convex parts in one process, as many as
    fit in memory (one sweep each); 1 under torchrun or for a kind that cannot fork."""
    if jobs < 2 or not all(s.params.batch_runs for s in specs) or runtime.job().world > 1:
        return 1
    free = available_memory()
    need = max(MEMORY_MARGIN * sum(memory_parts(s).values()) for s in specs)
    return jobs if free is None else max(1, min(jobs, int(free // need)))


def _run_cases(study: Study, out: Path, options: RunOptions, how: Request) -> list[Case]:
    """Every part at every n over every graph. The graphs' sweeps run in ``--jobs`` workers,
    largest first, each computing its units one after the other: a quick sweep's units are
    too short and too few to share out evenly."""
    cases, pending = [], []
    for part, n in itertools.product(study.specs, study.agents):
        case = Case("", n, {}, {}, {})
        for graph, table in study.graphs.items():
            sets = [f"agents={n}"] + [f"topology.{k}={json.dumps(v)}" for k, v in table.items()]
            spec = how.load(study.spec_path(part), sets)
            if how.only is not None:  # the labels of this part (all checked before)
                spec = spec.select(spec.present(how.only))
            case.preset, case.specs[graph] = spec.name, spec
            pending.append((spec, out / spec.name / f"n{n}" / graph, options))
        cases.append(case)
    jobs = _workers([spec for spec, _, _ in pending], options.jobs)
    done = iter(forked_map(jobs, _graph_sweep, pending[::-1])[::-1])
    for case in cases:
        for graph, spec in case.specs.items():
            case.rows[graph], case.built[graph] = next(done)
            stats = summarise(case.rows[graph], spec)
            case.stats[graph] = {label: s for (_, label), s in stats.items()}
            if how.check and spec.claims:
                case.judged[graph] = check_claims(spec.claims, stats)
    return cases


def _case_section(case: Case) -> list[str]:
    """One problem at one n: per graph, its peers per round, rate, modelled time per
    iteration and every method's steady error."""
    spec, methods = next(iter(case.specs.values())), list(next(iter(case.stats.values())))
    body = []
    for graph in case.specs:
        built, stats = case.built[graph], [case.stats[graph][m] for m in methods]
        errors = [
            f"diverged ({s.diverged})" if s.steady != s.steady else f"{s.steady:.2e}" for s in stats
        ]
        ms = f"{_per_iteration(case, graph) * 1e3:.3f}"
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
    """Per part and drawn method: every graph's curves against iterations and modelled time
    (drawn in ``jobs`` workers)."""
    figures: list[tuple] = []
    for preset in dict.fromkeys(c.preset for c in cases):
        mine = [r for r in rows if r["problem"] == preset]
        spec = next(iter(next(c for c in cases if c.preset == preset).specs.values()))
        for method in [m for m in study.drawn if any(r["algorithm"] == m for r in mine)]:
            chosen = [r | {"algorithm": r["graph"]} for r in mine if r["algorithm"] == method]
            for x, what in (("step", "iterations"), ("model_time", "time")):
                title = (
                    f"{LABELS.get(method, method)} on {preset.removeprefix('topologies_')}"
                    f" against {'modelled seconds' if x == 'model_time' else 'iterations'}"
                )
                figures.append((chosen, spec.metric, out / f"{preset}_{method}_{what}", x, title))
    return [file for files in forked_map(jobs, _figure, figures) for file in files]


def _figure(rows: list[dict[str, Any]], metric: str, path: Path, x: str, title: str) -> list[Path]:
    """One figure of the study: every graph's curves, a panel per n."""
    scale = "log" if x == "model_time" else "auto"
    return plot_curves(
        rows,
        metric,
        path,
        panel="agents",
        panel_title="n = {value}",
        x=x,
        xscale=scale,
        title=title,
    )


def _claims_section(claims: tuple[Claim, ...], cases: list[Case]) -> list[str]:
    verdicts = check_claims(claims, cases) if claims else []
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
    claims = parse_claims(study.claims, study.source, CHECKS)
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
