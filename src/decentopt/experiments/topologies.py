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

import itertools
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from decentopt.analysis import ALPHA, compare, settling_step
from decentopt.experiments.claims import (
    Claim,
    Verdict,
    check_claims,
    claims_markdown,
    combine,
    ordered_verdict,
)
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
# Each claim is judged on every case (problem, n) with the statistics of every other
# claim (claims.py): a comparison is decided by Welch's t-test at the claim's
# family-wise level, Bonferroni-corrected over its comparisons in all cases;
# within noise a strict claim is inconclusive.


def _order(case: Case, a: tuple[str, str], b: tuple[str, str], comparisons: int) -> int | None:
    """Compare the steady errors of (graph, method) ``a`` and ``b`` in one case."""
    x, y = case.stats[a[0]][a[1]], case.stats[b[0]][b[1]]
    return compare(
        x.steady, x.steady_se, y.steady, y.steady_se, runs=(x.runs, y.runs),
        comparisons=comparisons,
    )  # fmt: skip


def _word(order: int | None) -> str:
    return {None: "unknown", -1: "lower", 0: "equal within noise", 1: "higher"}[order]


def _per_case(
    cases: list[Case], judge: Callable[[Case, int], tuple[bool | None, str]], comparisons: int
) -> Verdict:
    """Holds when it holds in every case, fails when it fails in one (three-way)."""
    results = [(case, *judge(case, comparisons * len(cases))) for case in cases]
    mark = {True: "yes", False: "no", None: "?"}
    evidence = "; ".join(f"{c.name}: {mark[h]} ({e})" for c, h, e in results)
    return Verdict(combine([h for _, h, _ in results]), evidence)


def _one_peer_cheaper(cases: list[Case]) -> Verdict:
    def judge(case: Case, k: int) -> tuple[bool | None, str]:
        graphs = ("one_peer_exponential", "exponential")
        per_step = {}
        for g in graphs:
            last = max(case.rows[g], key=lambda r: r["step"])
            per_step[g] = last["model_time"] / max(last["step"], 1)
        order = _order(case, (graphs[0], "dsgd"), (graphs[1], "dsgd"), k)
        cheaper = per_step[graphs[0]] < per_step[graphs[1]]
        holds = False if not cheaper else ordered_verdict(order, strict=False)
        one, static = (case.stats[g]["dsgd"].steady for g in graphs)
        return holds, (
            f"{per_step[graphs[0]] * 1e3:.3g} vs {per_step[graphs[1]] * 1e3:.3g} ms per "
            f"iteration; error {one:.2e} vs {static:.2e} ({_word(order)})"
        )

    return _per_case(cases, judge, 1)


def _base_no_worse(cases: list[Case]) -> Verdict:
    def judge(case: Case, k: int) -> tuple[bool | None, str]:
        order = _order(case, ("base_3", "dsgd"), ("one_peer_exponential", "dsgd"), k)
        base, one = (case.stats[g]["dsgd"].steady for g in ("base_3", "one_peer_exponential"))
        return ordered_verdict(order, strict=True), f"{base:.2e} vs {one:.2e} ({_word(order)})"

    return _per_case(cases, judge, 1)


SPARSER = ("complete", "exponential", "torus", "ring")


def _sparser_more_bias(cases: list[Case]) -> Verdict:
    def judge(case: Case, k: int) -> tuple[bool | None, str]:
        steps = list(itertools.pairwise(SPARSER))
        orders = [_order(case, (a, "dsgd"), (b, "dsgd"), k) for a, b in steps]
        values = " < ".join(f"{case.stats[g]['dsgd'].steady:.2e}" for g in SPARSER)
        words = ", ".join(
            f"{a} vs {b}: {_word(o)}" for (a, b), o in zip(steps, orders, strict=True)
        )
        return combine([ordered_verdict(o, strict=True) for o in orders]), f"{values} ({words})"

    return _per_case(cases, judge, len(SPARSER) - 1)


def _exact_diffusion_needs_fixed_w(cases: list[Case]) -> Verdict:
    def judge(case: Case, k: int) -> tuple[bool | None, str]:
        static_ok = all(case.stats[g][m].diverged == 0 for g in STATIC for m in ("ed", "edm"))
        failed = [g for g in TIME_VARYING if any(case.stats[g][m].diverged for m in ("ed", "edm"))]
        return static_ok and len(failed) == len(TIME_VARYING), (
            f"static graphs: {'none' if static_ok else 'some'} diverged; time-varying graphs "
            f"where ED/EDM diverged: {', '.join(failed) or 'none'}"
        )

    return _per_case(cases, judge, 1)


def _tracking_exact(cases: list[Case]) -> Verdict:
    def judge(case: Case, k: int) -> tuple[bool | None, str]:
        orders = [_order(case, (g, "dsgt"), (g, "dsgd"), k) for g in TIME_VARYING]
        words = ", ".join(f"{g}: {_word(o)}" for g, o in zip(TIME_VARYING, orders, strict=True))
        return combine([ordered_verdict(o, strict=True) for o in orders]), f"DSGT vs DSGD: {words}"

    return _per_case(cases, judge, len(TIME_VARYING))


_TEST = f"at a {ALPHA:.0%} family-wise level over every case"
CLAIMS = (
    Claim(
        "The one-peer exponential graph costs less modelled time per iteration than the "
        "static exponential graph and leaves DSGD no more error (Ying et al. 2021).",
        f"modelled ms per iteration, and DSGD's steady error not higher, {_TEST}",
        _one_peer_cheaper,
    ),
    Claim(
        "With the same two peers per round, the Base-3 graph leaves DSGD less error than the "
        "one-peer exponential graph (Takezawa et al. 2023).",
        f"DSGD's steady error lower, {_TEST}",
        _base_no_worse,
    ),
    Claim(
        "DSGD's heterogeneity bias grows as the static graph gets sparser: complete, "
        "exponential, torus, ring (Koloskova et al. 2020).",
        f"every step of the chain higher, {_TEST}",
        _sparser_more_bias,
    ),
    Claim(
        "ED and EDM, whose correction assumes one fixed W, converge over every static graph "
        "and diverge over the time-varying ones (measured here; their analyses take W fixed).",
        "runs stopped as diverged",
        _exact_diffusion_needs_fixed_w,
    ),
    Claim(
        "Gradient tracking removes the heterogeneity bias over time-varying graphs too "
        "(Nedić, Olshevsky, Shi 2017): DSGT ends below DSGD on every one-peer graph.",
        f"DSGT's steady error lower on every time-varying graph, {_TEST}",
        _tracking_exact,
    ),
)


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
        verdicts = check_claims(CLAIMS, cases)
        table = claims_markdown(verdicts)
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
