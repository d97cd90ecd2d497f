"""The one study runner: every study file (:mod:`.study`) runs through :func:`run_study`.

A ``tuned`` or ``bytes`` study runs each of its parts (run specifications) into its own
folder, reports it as ``decentopt run`` does (claims included, with ``--check``) and adds
one table per part: for ``tuned`` (the methods study) each method at its best step size
of the grid, with the iterations *and* gossip rounds it needs to settle; for ``bytes``
(the compression study) the bytes each agent sends per iteration and to settle.
``out/summary.md`` gathers the parts. A ``graphs`` study runs its parts over graphs and
numbers of agents (:mod:`.topologies`); the ``scaling`` study is Table 1's
(:mod:`.scaling`); a ``cases`` study runs parts at several numbers of agents and judges
claims across them (:mod:`.cases`: the local-steps study).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from decentopt._registry import Registry
from decentopt.driver import RunOptions
from decentopt.experiments.cases import run_cases, run_part
from decentopt.experiments.claims import bytes_to_settle
from decentopt.experiments.reports import markdown_table, panel_curves
from decentopt.experiments.scaling import run_table1
from decentopt.experiments.spec import RunSpec
from decentopt.experiments.study import Request, Study
from decentopt.experiments.summary import levels_by_zeta, stats_zeta, summarise
from decentopt.experiments.topologies import run_graphs
from decentopt.experiments.trained import final_rank, finals
from decentopt.plotting import LABELS
from decentopt.results import write_text_atomic

__all__ = ["RUNNERS", "run_study"]


def _tuned(
    spec: RunSpec, rows: list[dict[str, Any]], out: Path, modified: bool
) -> tuple[str, str, list[Path]]:
    """Each method at its best step size of the grid -- the one that settles soonest below the
    threshold at the hardest level (panel sweeps; ties and never-settling runs by steady
    error), or with the best final metric of those that finished (training, as a grid's
    tuned member: :mod:`.trained`) -- and, for panel sweeps, the curves of those variants
    against gossip rounds."""
    best: dict[str, tuple[tuple, str, list[str]]] = {}  # method -> (rank key, label, cells)

    def offer(method: str, key: tuple, label: str, cells: list[str]) -> None:
        if method not in best or key < best[method][0]:
            best[method] = (key, label, cells)

    files: list[Path] = []
    if spec.panel is not None:
        stats = summarise(rows, spec)
        levels = levels_by_zeta(stats)
        for (level, label), s in stats.items():
            if level != levels[-1] or s.steady != s.steady:  # another level, or diverged (NaN)
                continue
            reach = "never"
            if s.iters is not None:
                end = max((r for r in rows if r["algorithm"] == label), key=lambda r: r["step"])
                reach = f"{s.iters} / {round(s.iters * end['rounds'] / end['step'])}"
            key = (s.iters is None, s.iters or 0, s.steady)
            cells = [f"{s.steady:.2e} ± {s.steady_se:.1e}", reach]
            offer(spec.algorithms[label].method, key, label, cells)
        header = ["method", "best step", f"steady {spec.metric} (hardest level)"]
        header.append("iterations / gossip rounds to settle")
        # the tuned methods against gossip rounds
        tuned = [r for r in rows if r["algorithm"] in {label for _, label, _ in best.values()}]
        title = spec.title(modified) + ", best step sizes"
        files = panel_curves(spec, tuned, out / f"{spec.name}_rounds", title, levels, x="rounds")
    else:  # the rank of a grid's tuned member (.trained)
        table = finals(rows, spec.metric)
        rank = final_rank(table, spec.metric)
        for label, variant in spec.algorithms.items():
            if label in rank:
                offer(variant.method, (rank[label],), label, [f"{table[label].mean:.4f}"])
        header = ["method", "best step", f"final {spec.metric}"]
    body = [
        [LABELS.get(m, m), str(spec.algorithms[label].hyperparams["lr"]), *cells]
        for m, (_, label, cells) in best.items()
    ]
    return "Best step size of the grid", markdown_table(header, body), files


def _bytes(
    spec: RunSpec, rows: list[dict[str, Any]], _out: Path, _modified: bool
) -> tuple[str, str, list[Path]]:
    """Per method: bytes each agent sends per iteration, and to settle below the threshold
    at every level (mean over runs; "never" if some run does not)."""
    stats = summarise(rows, spec)
    levels = levels_by_zeta(stats)
    body = []
    for label in spec.algorithms:
        per_step = stats[(levels[0], label)].bytes_per_step
        cells = [label, f"{per_step:,.0f}"]
        for level in levels:
            reach = bytes_to_settle(stats[(level, label)])
            never = not reach or float("inf") in reach
            cells.append("never" if never else f"{sum(reach) / len(reach):,.0f}")
        body.append(cells)
    reach = [f"bytes to {spec.threshold:g}, ζ² = {stats_zeta(stats, lv):.3g}" for lv in levels]
    table = markdown_table(["variant", "bytes per iteration", *reach], body)
    return "Bytes sent per agent", table, []


def _run_parts(study: Study, out: Path, options: RunOptions, how: Request) -> list[Path]:
    """Each part into its own folder of ``out``, reported with its claims and the study's
    table; ``out/summary.md`` gathers them."""
    extra = {"tuned": _tuned, "bytes": _bytes}[study.study]  # (heading, table, more files)
    sections = [f"# {study.title}", ""]
    files = []
    for spec in study.parts(how):
        folder = out / spec.name
        modified = how.quick or bool(how.sets)
        case, written = run_part(spec, folder, options, how, how.x or study.x)
        title, table, more = extra(spec, case.rows, out, modified)
        options.log(table)
        files += [*written, *more]
        summary = (folder / "summary.md").read_text().split("\n", 1)[1]
        sections += [f"## {spec.title(modified)}", "", f"{title}:", "", table, summary]
    write_text_atomic(out / "summary.md", "\n".join(sections))
    return [out / "summary.md", *files]


#: How each kind of study (``study`` in the file) runs: see the module docstring.
RUNNERS: Registry[Callable[[Study, Path, RunOptions, Request], list[Path]]] = Registry(
    "study",
    [
        ("tuned", _run_parts),
        ("bytes", _run_parts),
        ("graphs", run_graphs),
        ("scaling", run_table1),
        ("cases", run_cases),
    ],
)


def run_study(
    study: Study,
    out: Path,
    options: RunOptions,
    *,
    quick: bool = False,
    sets: list[str] | None = None,
    only: list[str] | None = None,
    check: bool = False,
    x: str | None = None,
) -> list[Path]:
    """Run (or resume) ``study`` into ``out``; ``sets``: ``--set`` overrides of every part;
    ``only``: the variant labels to run (an unknown one is refused before anything runs);
    ``x``: the curves' axis (``None``: the study's)."""
    how = Request(quick, tuple(sets or ()), None if only is None else tuple(only), check, x)
    return RUNNERS[study.study](study, out, options, how)
