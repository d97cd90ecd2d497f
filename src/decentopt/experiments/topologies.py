"""The topology study: the eight methods over static and time-varying graphs, per byte and second.

``decentopt reproduce topologies`` runs the presets ``topologies_quadratic`` and
``topologies_logistic`` (Figure 1's and Figure 2's problems at one heterogeneity
level) for n = 32 and n = 256 over the ring, the torus, the static exponential
graph, the one-peer exponential graph, the one-peer hypercube, the Base-2 and
Base-3 graphs and the complete graph. Every run goes through the one runner
(resumable, one folder per graph); the study writes ``results.csv`` (all rows,
with ``problem``, ``agents`` and ``graph`` columns), ``summary.md`` (per problem
and n: each graph's peers per round, rate, modelled time per iteration, and every
method's steady error) and figures of error against iterations and against
modelled time (the presets' ``[network]``). ``--check`` judges the claims of
:data:`CLAIMS`, taken from the literature, and says which hold here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from decentopt.analysis import SIGNIFICANCE, compare, settling_step
from decentopt.experiments.claims import Verdict
from decentopt.experiments.reports import markdown_table
from decentopt.experiments.runner import run_spec
from decentopt.experiments.spec import RunSpec, load_spec
from decentopt.experiments.summary import Stat, summarise
from decentopt.plotting import LABELS, plot_curves
from decentopt.results import write_csv_atomic, write_text_atomic

__all__ = ["CLAIMS", "GRAPHS", "PRESETS", "SIZES", "run_topologies"]

PRESETS = ("topologies_quadratic", "topologies_logistic")
SIZES = (32, 256)
#: graph label -> the [topology] table that builds it
GRAPHS: dict[str, dict[str, Any]] = {
    "ring": {"name": "ring"},
    "torus": {"name": "torus"},
    "exponential": {"name": "exponential"},
    "one_peer_exponential": {"name": "one_peer_exponential"},
    "one_peer_hypercube": {"name": "one_peer_hypercube"},
    "base_2": {"name": "base_graph", "base": 2},
    "base_3": {"name": "base_graph", "base": 3},
    "complete": {"name": "complete"},
}
STATIC = ("ring", "torus", "exponential", "complete")
TIME_VARYING = ("one_peer_exponential", "one_peer_hypercube", "base_2", "base_3")
#: The methods drawn in the study's figures.
DRAWN = ("dsgd", "edm")


@dataclass
class Case:
    """One problem at one n: every graph's spec, statistics and mean curves."""

    preset: str
    n: int
    specs: dict[str, RunSpec]
    stats: dict[str, dict[str, Stat]]  # graph -> method -> Stat
    rows: dict[str, list[dict[str, Any]]]  # graph -> rows

    @property
    def name(self) -> str:
        return f"{self.preset.removeprefix('topologies_')}, n = {self.n}"

    def curve(self, graph: str, method: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, mean metric over runs, modelled seconds) of one method on one graph."""
        metric = self.specs[graph].metric
        by_step: dict[int, list[float]] = defaultdict(list)
        time: dict[int, float] = {}
        for r in self.rows[graph]:
            if r["algorithm"] == method:
                by_step[r["step"]].append(r[metric])
                time[r["step"]] = r["model_time"]
        steps = np.array(sorted(by_step))
        return (
            steps,
            np.array([np.mean(by_step[s]) for s in steps]),
            np.array([time[s] for s in steps]),
        )

    def reach_seconds(self, graph: str, method: str, level: float) -> float | None:
        """Modelled seconds until the mean error stays below ``level`` (None: never)."""
        steps, curve, seconds = self.curve(graph, method)
        step = settling_step(steps, curve, level)
        return None if step is None else float(np.interp(step, steps, seconds))


# ------------------------------------------------------------------- claims
@dataclass(frozen=True)
class StudyClaim:
    text: str
    test: str
    check: Callable[[Case], tuple[bool | None, str]]


def _steady(case: Case, graph: str, method: str) -> tuple[float, float]:
    s = case.stats[graph][method]
    return s.steady, s.steady_se


def _one_peer_cheaper(case: Case) -> tuple[bool | None, str]:
    graphs = ("one_peer_exponential", "exponential")
    per_step = {}
    for g in graphs:
        last = max(case.rows[g], key=lambda r: r["step"])
        per_step[g] = last["model_time"] / max(last["step"], 1)
    one, static = (_steady(case, g, "dsgd") for g in graphs)
    if one[0] != one[0] or static[0] != static[0]:
        return None, "a run diverged"
    cheaper = per_step[graphs[0]] < per_step[graphs[1]]
    no_worse = compare(*one, *static) <= 0
    return cheaper and no_worse, (
        f"{per_step[graphs[0]] * 1e3:.3g} vs {per_step[graphs[1]] * 1e3:.3g} ms per iteration; "
        f"error {one[0]:.2e} vs {static[0]:.2e}"
    )


def _base_no_worse(case: Case) -> tuple[bool | None, str]:
    base, one = _steady(case, "base_3", "dsgd"), _steady(case, "one_peer_exponential", "dsgd")
    order = compare(*base, *one)
    return (None if order == 0 else order < 0), f"{base[0]:.2e} vs {one[0]:.2e}"


def _sparser_more_bias(case: Case) -> tuple[bool | None, str]:
    chain = ("complete", "exponential", "torus", "ring")
    values = [_steady(case, g, "dsgd") for g in chain]
    reversed_ = [
        f"{a} > {b}"
        for (a, va), (b, vb) in zip(
            zip(chain, values, strict=True), zip(chain[1:], values[1:], strict=True), strict=False
        )
        if compare(*va, *vb) > 0
    ]
    text = " ≤ ".join(f"{v[0]:.2e}" for v in values)
    return not reversed_, text + (f"; reversed: {', '.join(reversed_)}" if reversed_ else "")


def _exact_diffusion_needs_fixed_w(case: Case) -> tuple[bool | None, str]:
    static_ok = all(case.stats[g][m].diverged == 0 for g in STATIC for m in ("ed", "edm"))
    failed = [g for g in TIME_VARYING if any(case.stats[g][m].diverged for m in ("ed", "edm"))]
    return static_ok and len(failed) == len(TIME_VARYING), (
        f"static graphs: {'none' if static_ok else 'some'} diverged; time-varying graphs where "
        f"ED/EDM diverged: {', '.join(failed) or 'none'}"
    )


def _tracking_exact(case: Case) -> tuple[bool | None, str]:
    lower = []
    for g in TIME_VARYING:
        order = compare(*_steady(case, g, "dsgt"), *_steady(case, g, "dsgd"))
        lower.append(order < 0)
    return all(lower), f"DSGT below DSGD on {sum(lower)} of {len(lower)} time-varying graphs"


CLAIMS = (
    StudyClaim(
        "The one-peer exponential graph costs less modelled time per iteration than the "
        "static exponential graph and leaves DSGD no more error (Ying et al. 2021).",
        f"modelled ms per iteration, and DSGD's steady error not higher by > {SIGNIFICANCE:g} SE",
        _one_peer_cheaper,
    ),
    StudyClaim(
        "With the same two peers per round, the Base-3 graph leaves DSGD less error than the "
        "one-peer exponential graph (Takezawa et al. 2023).",
        f"DSGD's steady error lower by > {SIGNIFICANCE:g} SE",
        _base_no_worse,
    ),
    StudyClaim(
        "DSGD's heterogeneity bias grows as the static graph gets sparser: complete, "
        "exponential, torus, ring (Koloskova et al. 2020).",
        f"no step of the chain higher by > {SIGNIFICANCE:g} SE",
        _sparser_more_bias,
    ),
    StudyClaim(
        "ED and EDM, whose correction assumes one fixed W, converge over every static graph "
        "and diverge over the time-varying ones (measured here; their analyses take W fixed).",
        "runs stopped as diverged",
        _exact_diffusion_needs_fixed_w,
    ),
    StudyClaim(
        "Gradient tracking removes the heterogeneity bias over time-varying graphs too "
        "(Nedić, Olshevsky, Shi 2017): DSGT ends below DSGD on every one-peer graph.",
        f"steady errors, lower by > {SIGNIFICANCE:g} SE",
        _tracking_exact,
    ),
)


def judge(cases: list[Case]) -> list[tuple[StudyClaim, Verdict]]:
    """Every claim over every case: holds when it holds in all, fails when it fails in one."""
    out = []
    for claim in CLAIMS:
        results = [(case, *claim.check(case)) for case in cases]
        holds: bool | None = True
        if any(h is False for _, h, _ in results):
            holds = False
        elif any(h is None for _, h, _ in results):
            holds = None
        evidence = "; ".join(
            f"{c.name}: {'yes' if h else 'no' if h is False else '?'} ({e})" for c, h, e in results
        )
        out.append((claim, Verdict(holds, evidence)))
    return out


# ------------------------------------------------------------------- report
def _graph_table(case: Case) -> str:
    methods = list(next(iter(case.stats.values())))
    header = ["graph", "peers / round", "λ per round", "ms / iteration", *map(LABELS.get, methods)]
    body = []
    for graph, spec in case.specs.items():
        network = spec.build_topology()
        last = max(case.rows[graph], key=lambda r: r["step"])
        cells = []
        for m in methods:
            s = case.stats[graph][m]
            cells.append(f"diverged ({s.diverged})" if s.steady != s.steady else f"{s.steady:.2e}")
        peers = network.max_degree
        per_iteration = last["model_time"] / max(last["step"], 1) * 1e3
        body.append([graph, str(peers), f"{network.lam:.4f}", f"{per_iteration:.3f}", *cells])
    return markdown_table(header, [[str(c) for c in row] for row in body])


def run_topologies(
    out: Path,
    *,
    quick: bool,
    check: bool,
    overrides: list[str],
    force: bool,
    progress: bool,
    jobs: int = 1,
    say: Callable[[str], None] = print,
    sizes: tuple[int, ...] = SIZES,
) -> list[Path]:
    """Run (or resume) the study into ``out``; ``sizes``: the numbers of agents."""
    cases: list[Case] = []
    everything: list[dict[str, Any]] = []
    for preset in PRESETS:
        for n in sizes:
            case = Case(preset, n, {}, {}, {})
            for graph, table in GRAPHS.items():
                sets = [f"agents={n}"] + [f"topology.{k}={json.dumps(v)}" for k, v in table.items()]
                spec = load_spec(preset, quick=quick, overrides=sets + list(overrides))
                folder = out / preset / f"n{n}" / graph
                outcome = run_spec(spec, folder, force=force, progress=progress, jobs=jobs, log=say)
                stats = summarise(outcome.rows, spec)
                case.specs[graph], case.rows[graph] = spec, outcome.rows
                case.stats[graph] = {label: s for (_, label), s in stats.items()}
                everything += [
                    r | {"problem": preset, "agents": n, "graph": graph} for r in outcome.rows
                ]
            cases.append(case)
    columns = list(dict.fromkeys(k for r in everything for k in r))  # problems differ in a few
    everything = [{k: r.get(k, "") for k in columns} for r in everything]
    files = [write_csv_atomic(out / "results.csv", everything)]
    sections = ["# The eight methods over static and time-varying graphs", ""]
    for case in cases:
        spec = next(iter(case.specs.values()))
        network = spec.network
        sections += [
            f"## {case.name}",
            "",
            f"{spec.params.describe()}, {spec.iterations} iterations; steady "
            f"{spec.metric} per method (mean over the last 10 % of iterations and "
            f"{spec.runs} runs); modelled time: {network.bandwidth:g} B/s, "
            f"{network.latency * 1e6:g} µs per message, {network.compute * 1e6:g} µs of "
            "compute per step, the busiest agent setting each round.",
            "",
            _graph_table(case),
            "",
        ]
    for preset in PRESETS:
        rows = [r for r in everything if r["problem"] == preset]
        spec = next(c for c in cases if c.preset == preset).specs["ring"]
        for method in DRAWN:
            chosen = [r | {"algorithm": r["graph"]} for r in rows if r["algorithm"] == method]
            for x, what in (("step", "iterations"), ("model_time", "time")):
                files += plot_curves(
                    chosen,
                    spec.metric,
                    out / f"{preset}_{method}_{what}",
                    panel="agents",
                    panel_title="n = {value}",
                    x=x,
                    xscale="log" if x == "model_time" else "auto",
                    title=f"{LABELS.get(method, method)} on {preset.removeprefix('topologies_')}"
                    f" against {'modelled seconds' if x == 'model_time' else 'iterations'}",
                )
    if check:
        verdicts = judge(cases)
        marks = {True: "holds", False: "**does not hold**", None: "inconclusive"}
        table = markdown_table(
            ["claim", "test", "measured", "verdict"],
            [(c.text, c.test, v.evidence, marks[v.holds]) for c, v in verdicts],
        )
        counts = [sum(v.holds is x for _, v in verdicts) for x in (True, False, None)]
        sections += [
            "## Claims",
            "",
            table,
            "",
            f"{counts[0]} of {len(verdicts)} claims hold in this run, {counts[1]} do not, "
            f"{counts[2]} inconclusive",
            "",
        ]
    text = "\n".join(sections)
    say(text)
    write_text_atomic(out / "summary.md", text)
    return [*files, out / "summary.md"]
