"""Reproduction targets made of more than one run: Table 1's scaling study, the methods
study and the compression study.

``methods`` runs EDM against EXTRA, NIDS, Momentum Tracking, ED and DSGT-HB on
Figure 1's and Figure 2's problems and on digits training (three presets, each
over a small grid of step sizes), judges the presets' claims at the paper's
step size with ``--check``, and adds, per method, its best step size of the
grid with the iterations *and* gossip rounds it needs to settle (DSGT-HB
gossips twice per iteration).

``compression`` runs compressed gossip (CHOCO-SGD at compression ratios 1/10 and
1/100, compressed EDM), push-sum over a directed graph (SGP, Push-DIGing) and the
uncompressed methods on Figure 1's and Figure 2's problems, draws every error
against the bytes each agent sends, and judges claims of the CHOCO-SGD, SGP and
Push-DIGing papers with ``--check``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decentopt.experiments.claims import bytes_to_settle
from decentopt.experiments.reports import markdown_table, write_report
from decentopt.experiments.runner import run_spec
from decentopt.experiments.scaling import run_scaling, scaling_markdown, scaling_table
from decentopt.experiments.spec import RunSpec, load_spec
from decentopt.experiments.store import ResultStore
from decentopt.experiments.summary import levels_by_zeta, summarise
from decentopt.plotting import LABELS, plot_curves, plot_scaling
from decentopt.results import lock_folder, write_csv_atomic, write_text_atomic

__all__ = [
    "COMPRESSION",
    "METHODS",
    "StudyRun",
    "bytes_markdown",
    "run_compression",
    "run_methods",
    "run_table1",
    "tuned_markdown",
]

#: The presets of the methods study.
METHODS = ("methods_quadratic", "methods_logistic", "methods_digits")
#: The presets of the compression study.
COMPRESSION = ("compression_quadratic", "compression_logistic")


def run_table1(
    out: Path, *, quick: bool, force: bool = False, say: Callable[[str], None] = print
) -> list[Path]:
    """Table 1's scaling study into ``out``; each simulation a unit of ``out/runs``."""
    with lock_folder(out):
        store = ResultStore(out / "runs", force=force)
        rows = run_scaling(seeds=3 if quick else 5, quick=quick, log=say, store=store)
    if store.kept:
        say(f"resumed: {len(store.kept)} finished measurement(s) kept")
    md = scaling_markdown(rows)
    say(md)
    write_text_atomic(out / "table1.md", md)
    table = write_csv_atomic(out / "table1.csv", scaling_table(rows))
    return [table, out / "table1.md", *plot_scaling(rows, out / "table1")]


def tuned_markdown(spec: RunSpec, rows: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """Each method at its best step size of the grid -- the one that settles soonest below the
    threshold at the hardest level (panel sweeps; ties and never-settling runs by steady
    error), or with the best final metric (training) -- with the labels of those variants."""
    best: dict[str, tuple[tuple, str, list[str]]] = {}  # method -> (rank key, label, cells)

    def offer(method: str, key: tuple, label: str, cells: list[str]) -> None:
        if method not in best or key < best[method][0]:
            best[method] = (key, label, cells)

    if spec.panel is not None:
        stats = summarise(rows, spec)
        hard = levels_by_zeta(stats)[-1]
        for (level, label), s in stats.items():
            if level != hard or s.steady != s.steady:  # another level, or diverged (NaN)
                continue
            reach = "never"
            if s.iters is not None:
                end = max((r for r in rows if r["algorithm"] == label), key=lambda r: r["step"])
                reach = f"{s.iters} / {round(s.iters * end['rounds'] / end['step'])}"
            cells = [f"{s.steady:.2e} ± {s.steady_se:.1e}", reach]
            offer(
                spec.algorithms[label].method,
                (s.iters is None, s.iters or 0, s.steady),
                label,
                cells,
            )
        header = [
            "method",
            "best step",
            f"steady {spec.metric} (hardest level)",
            "iterations / gossip rounds to settle",
        ]
    else:
        last = max(r["step"] for r in rows)
        sign = -1 if "acc" in spec.metric else 1  # accuracies: higher is better
        for label, variant in spec.algorithms.items():
            finals = [r[spec.metric] for r in rows if r["algorithm"] == label and r["step"] == last]
            mean = sum(finals) / len(finals)
            offer(variant.method, (sign * mean,), label, [f"{mean:.4f}"])
        header = ["method", "best step", f"final {spec.metric}"]
    body = [
        [LABELS.get(m, m), str(spec.algorithms[label].hyperparams["lr"]), *cells]
        for m, (_, label, cells) in best.items()
    ]
    return markdown_table(header, body), [label for _, label, _ in best.values()]


@dataclass(frozen=True)
class StudyRun:
    """What a preset study runs with: ``--quick``, ``--set`` overrides, and how it reports."""

    quick: bool
    claims: Callable[[RunSpec], Callable[[dict], str] | None]
    overrides: list[str]
    force: bool
    progress: bool
    jobs: int = 1
    say: Callable[[str], None] = print


#: One preset's extra section: (its heading, a markdown table, further files).
Extra = Callable[[RunSpec, list[dict[str, Any]], Path, bool], tuple[str, str, list[Path]]]


def _run_presets(
    out: Path, names: Sequence[str], heading: str, how: StudyRun, extra: Extra, x: str = "step"
) -> list[Path]:
    """Each preset of ``names`` into its own folder of ``out``, reported with its claims and
    ``extra``'s table; ``out/summary.md`` gathers them."""
    sections, files = [f"# {heading}", ""], []
    for name in names:
        spec = load_spec(name, quick=how.quick, overrides=how.overrides)
        folder, modified = out / spec.name, how.quick or bool(how.overrides)
        outcome = run_spec(
            spec, folder, force=how.force, progress=how.progress, jobs=how.jobs, log=how.say
        )
        files += write_report(
            spec, outcome.rows, folder, modified=modified, claims=how.claims(spec), say=how.say,
            x=x,
        )  # fmt: skip
        title, table, more = extra(spec, outcome.rows, out, modified)
        how.say(table)
        files += more
        summary = (folder / "summary.md").read_text().split("\n", 1)[1]
        sections += [f"## {spec.title(modified)}", "", f"{title}:", "", table, summary]
    write_text_atomic(out / "summary.md", "\n".join(sections))
    return [out / "summary.md", *files]


def _tuned(
    spec: RunSpec, rows: list[dict[str, Any]], out: Path, modified: bool
) -> tuple[str, str, list[Path]]:
    table, labels = tuned_markdown(spec, rows)
    files: list[Path] = []
    if spec.panel is not None:  # the tuned methods against gossip rounds
        tuned = [r for r in rows if r["algorithm"] in labels]
        zeta = {r[spec.panel]: r["zeta2"] for r in tuned}  # panels from low to high zeta^2
        files = plot_curves(
            tuned,
            spec.metric,
            out / f"{spec.name}_rounds",
            panel=spec.panel,
            panel_order=sorted(zeta, key=zeta.__getitem__),
            panel_title="{key} = {value:g}  (ζ² = {zeta2:.3g})",
            x="rounds",
            title=spec.title(modified) + ", best step sizes",
        )
    return "Best step size of the grid", table, files


def run_methods(out: Path, **how: Any) -> list[Path]:
    """The methods study into ``out`` (``how``: the fields of :class:`StudyRun`): each
    preset of :data:`METHODS` in its own folder, with the best step size of its grid per
    method and those methods against gossip rounds."""
    heading = "EDM against EXTRA, NIDS, Momentum Tracking, ED, DSGT-HB, Push-DIGing and RelaySGD"
    return _run_presets(out, METHODS, heading, StudyRun(**how), _tuned)


def bytes_markdown(spec: RunSpec, rows: list[dict[str, Any]]) -> str:
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
            cells.append(
                "never"
                if not reach or any(v == float("inf") for v in reach)
                else f"{sum(reach) / len(reach):,.0f}"
            )
        body.append(cells)
    zeta = [f"ζ² = {stats[(lv, next(iter(spec.algorithms)))].zeta2:.3g}" for lv in levels]
    reach = [f"bytes to {spec.threshold:g}, {z}" for z in zeta]
    header = ["variant", "bytes per iteration", *reach]
    return markdown_table(header, body)


def _bytes(
    spec: RunSpec, rows: list[dict[str, Any]], _out: Path, _modified: bool
) -> tuple[str, str, list[Path]]:
    return "Bytes sent per agent", bytes_markdown(spec, rows), []


def run_compression(out: Path, **how: Any) -> list[Path]:
    """The compression study into ``out`` (``how``: the fields of :class:`StudyRun`): each
    preset of :data:`COMPRESSION` in its own folder, its curves drawn against the bytes
    sent per agent, with the bytes each method needs."""
    heading = "Compressed and directed gossip against the bytes sent"
    return _run_presets(out, COMPRESSION, heading, StudyRun(**how), _bytes, x="bytes_per_agent")
