"""The cases study: parts run at several numbers of agents, with claims across them.

``decentopt reproduce local`` runs the study file ``presets/local.toml`` (kind ``cases``):
each part (a run specification) at every number of agents its entry of ``[sizes]`` lists
(a part not listed: at its own ``agents``), one *case* per part and size, into
``OUT/PART/nN/`` (or ``OUT/PART/`` for a part at its own size). Each case is reported as
``decentopt run`` reports it (``summary.md``, figures against the study's ``x`` or
``--x``, and with ``--check`` the part's ``[[claims]]``, judged in every case) and adds
what it costs each method to reach the part's threshold: iterations (gradient
evaluations), gossip rounds, bytes per agent and modelled seconds, counted where they
happen -- a local step sends nothing, a global average is priced as a ring all-reduce.
``OUT/summary.md`` gathers the cases and judges the study's own ``[[claims]]``, each
naming a check of :data:`decentopt.experiments.claims.CHECKS` that reads the cases (claims
across cases, e.g. ``gap_grows``: a gap growing with ``n``).

A part that trains a network (no panel parameter: the outer optimizers on the digits) is
reported by its variants' final values instead, each grid's tuned member marked, and its
``[[claims]]`` are those that read a training run's final values (:mod:`.trained`). A
further claim on another problem is one more part in ``specs`` with its ``[[claims]]``; a
claim across parts or sizes is one more check that reads the cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from decentopt._renamed import renamed
from decentopt.driver import RunOptions
from decentopt.experiments import claims as _claims
from decentopt.experiments.claims import (
    check_claims,
    claims_markdown,
    claims_report,
    parse_claims,
    tally,
)
from decentopt.experiments.reports import CHANGED_RUN, markdown_table, panel_curves, write_report
from decentopt.experiments.runner import Sweep
from decentopt.experiments.spec import RunSpec
from decentopt.experiments.study import Request, Study
from decentopt.experiments.summary import Stat, Stats, levels_by_zeta, summarise
from decentopt.experiments.trained import final_table
from decentopt.experiments.verdicts import label_name as _name
from decentopt.results import write_csv_atomic, write_text_atomic

__all__ = ["Case", "cost_table", "run_cases", "run_part"]

__getattr__ = renamed(
    __name__, {"CHECKS": (lambda: _claims.CHECKS, "it is decentopt.experiments.claims.CHECKS")}
)


@dataclass
class Case:
    """One part at one number of agents: its specification, rows and statistics (none for a
    training run: its claims read its rows)."""

    spec: RunSpec
    n: int
    rows: list[dict[str, Any]]
    stats: Stats

    @property
    def part(self) -> str:
        return self.spec.name

    @property
    def name(self) -> str:
        return f"{self.part}, n = {self.n}"


# ------------------------------------------------------------------- what reaching the target costs
COSTS = (("step", "iterations"), ("rounds", "gossip rounds"))
COSTS += (("bytes_per_agent", "bytes per agent"), ("model_time", "modelled s"))


def _at_settling(rows: list[dict[str, Any]], stat: Stat, column: str) -> str:
    """The mean over runs of ``column`` at each run's settling iteration, interpolated
    between the recorded steps (the columns counted here are the same in every run), or in
    how many runs it never settles."""
    never = sum(not np.isfinite(v) for v in stat.settle)
    if never:
        return f"never in {never}/{len(stat.settle)}"
    run = min(r["run"] for r in rows)
    points = sorted((r["step"], float(r[column])) for r in rows if r["run"] == run)
    steps, values = np.array(points).T
    return f"{np.mean(np.interp(stat.settle, steps, values)):.3g}"


def cost_table(spec: RunSpec, rows: list[dict[str, Any]], stats: Stats) -> str:
    """Per level and method: the mean over runs of what it took to settle below the
    threshold (iterations, rounds, bytes, modelled seconds) and the steady error."""
    body = []
    for lv in levels_by_zeta(stats):
        for label in spec.algorithms:
            stat = stats.get((lv, label))
            if stat is None:
                continue
            mine = [r for r in rows if r["algorithm"] == label and float(r[spec.panel]) == lv]
            cells = [_at_settling(mine, stat, column) for column, _ in COSTS]
            body.append([f"{stat.zeta2:.3g}", _name(label), *cells, f"{stat.steady:.3g}"])
    header = ["ζ²", "method", *(f"{words} to {spec.threshold:g}" for _, words in COSTS)]
    return markdown_table([*header, f"steady {spec.metric}"], body)


# ------------------------------------------------------------------- running and reporting
def run_part(
    spec: RunSpec, folder: Path, options: RunOptions, how: Request, x: str
) -> tuple[Case, list[Path]]:
    """One part (at one size) into ``folder``: run (or resumed), reported as ``decentopt run``
    reports it, its claims judged with ``--check`` (on a panel sweep's statistics, or on a
    training run's rows: :mod:`.trained`); the case and the files written."""
    rows = Sweep(spec, folder, options).run().rows
    case = Case(spec, spec.agents, rows, {} if spec.panel is None else summarise(rows, spec))
    modified = how.quick or bool(how.sets)
    claims = partial(claims_report, spec.claims) if how.check and spec.claims else None
    files = write_report(spec, rows, folder, modified=modified, claims=claims, say=options.log, x=x)
    return case, files


def run_cases(study: Study, out: Path, options: RunOptions, how: Request) -> list[Path]:
    """Run (or resume) a cases study into ``out``, as ``how`` asks; every part, ``--only``
    label and claim is checked before anything runs."""
    study.parts(how)
    claims = parse_claims(study.claims, study.source, reads="cases")
    x = how.x or study.x
    cases = []
    files = []
    sections = [f"# {study.title}", ""]
    for part in study.specs:
        for n in study.sizes.get(part) or [None]:
            spec = how.load(study.spec_path(part), [] if n is None else [f"agents={n}"])
            if how.only is not None:  # the labels of this part (all checked before)
                if not spec.present(how.only):
                    continue
                spec = spec.select(spec.present(how.only))
            folder = out / spec.name / ("" if n is None else f"n{n}")
            case, written = run_part(spec, folder, options, how, x)
            cases.append(case)
            files += written
            if spec.panel is None:  # a training run: its grids' tuned members marked
                table = final_table(case.rows, list(spec.algorithms), spec.metric)
                costs = ["What each variant reaches and sends:", "", table]
            else:
                table = cost_table(spec, case.rows, case.stats)
                costs = [f"Reaching {spec.threshold:g}:", "", table]
            if spec.panel is not None and x != "bytes_per_agent":  # what local steps save
                title = spec.title(how.quick or bool(how.sets)) + ", against bytes sent"
                order = levels_by_zeta(case.stats)
                path = folder / f"{spec.name}_bytes"
                files += panel_curves(spec, case.rows, path, title, order, x="bytes_per_agent")
            report = (folder / "summary.md").read_text().split("\n", 1)[1]
            report = report.replace("\n## ", "\n### ")  # under the case's heading
            sections += [f"## {case.name}", "", *costs, "", report]
    everything = [r | {"part": c.part, "agents": c.n} for c in cases for r in c.rows]
    files.insert(0, write_csv_atomic(out / "results.csv", everything))
    if how.check:
        verdicts = check_claims(claims, cases)
        judged = ["## Claims across cases", "", claims_markdown(verdicts), ""] if claims else []
        own = [v for c in cases for v in check_claims(c.spec.claims, c.stats or c.rows)]
        judged += [tally([*verdicts, *own]), ""]
        judged += [CHANGED_RUN, ""] if how.quick or how.sets else []
        options.log("\n".join(judged))
        sections += judged
    write_text_atomic(out / "summary.md", "\n".join(sections))
    return [out / "summary.md", *files]
