"""Reports of a finished run: Markdown tables, figures and ``summary.md``; they read rows only.

Panel sweeps (a kind with a panel parameter, e.g. the convex figures) get the
steady-state table of :func:`~decentopt.experiments.summary.summarise` per
metric and one figure panel per level; other runs (e.g. neural training) get
the final value of every metric, mean ± spread over runs, and curves against
epochs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from decentopt.experiments.summary import Stats, Swept, levels_by_zeta, stats_zeta, summarise
from decentopt.plotting import ordered, plot_curves, plot_epochs
from decentopt.results import write_text_atomic
from decentopt.styles import shown


class Reported(Swept, Protocol):
    """What a report reads of a run specification (a :class:`~.spec.RunSpec`)."""

    name: str
    also_report: Any
    reproduces: Any

    def title(self, modified: bool = False) -> str: ...

    def display_names(self) -> dict[str, str]: ...


__all__ = [
    "final_markdown",
    "markdown_table",
    "panel_curves",
    "summary_markdown",
    "write_report",
]

#: Most rows of a steady-state table: a grid of a thousand variants shows its best.
MOST_ROWS = 30


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """The one Markdown table builder of the package."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _finite_mean(values: Sequence[float]) -> float:
    """The mean of the finite values; infinity when a method diverged everywhere."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("inf")


def summary_markdown(stats: Stats, spec: Reported, metric: str | None = None) -> str:
    """One row per algorithm, one column per panel level: steady state ± standard error.

    ``reach`` (the settling iteration) is shown for the main metric only, whose
    threshold the specification sets.
    """
    metric = metric or spec.metric
    with_reach = metric == spec.metric
    levels = levels_by_zeta(stats)
    # a stat of a method that ran to the end (the first may have diverged: no window)
    some = max(stats.values(), key=lambda s: (s.tail_points > 0, s.runs))
    names = spec.display_names()
    if some.tail_points == 0:  # no method ran to the end: there is no window to describe
        caption = f"Steady-state {metric}: every run of every method diverged"
    else:
        caption = (
            f"Steady-state {metric}: mean over the last 10 % of iterations ({some.tail_points} "
            f"recorded steps, iterations {some.tail_from}-{some.tail_to}) and over "
            f"{some.runs + some.diverged} runs, ± standard error over runs"
        )
    if with_reach:
        caption += f"; reach: the iteration from which the mean stays below {spec.threshold:g}"
    body = []
    listed = ordered(list(dict.fromkeys(a for _, a in stats)))
    if len(listed) > MOST_ROWS:  # a large grid: its best rows (all are in results.csv)
        mean = {a: _finite_mean([stats[(lv, a)].steady for lv in levels]) for a in listed}
        best = sorted(listed, key=lambda a: mean[a])[:MOST_ROWS]
        caption += (
            f"; the {MOST_ROWS} of {len(listed)} variants with the lowest mean steady state "
            "(every one is in results.csv)"
        )
        listed = [a for a in listed if a in best]
    for alg in listed:
        cells = [shown(alg, names)]
        for lv in levels:
            s = stats[(lv, alg)]
            if np.isnan(s.steady):
                cells.append(f"diverged ({s.diverged})")
                continue
            cell = f"{s.steady:.2e} ± {s.steady_se:.1e}"
            if with_reach:
                cell += f"; reach: {s.iters if s.iters is not None else 'never'}"
            cells.append(cell + (f", {s.diverged} diverged" if s.diverged else ""))
        body.append(cells)
    header = ["method"] + [
        f"{spec.panel} = {lv:g} (ζ² = {stats_zeta(stats, lv):.3g})" for lv in levels
    ]
    return caption + ".\n\n" + markdown_table(header, body)


def final_markdown(
    rows: Sequence[dict[str, Any]], metrics: Sequence[str], names: dict[str, str] | None = None
) -> str:
    """Final value of each metric per algorithm, mean ± spread over runs, and time per epoch
    (``names``: how each label is shown, :meth:`RunSpec.display_names`)."""
    unit = "epoch" if rows and "epoch" in rows[0] else "step"
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        key = (row["algorithm"], row.get("run", 0))
        if key not in last or row["step"] >= last[key]["step"]:
            last[key] = row
    body = []
    for alg in ordered([a for a, _ in last]):
        finals = [r for (a, _), r in last.items() if a == alg]
        if any(r["diverged_at"] >= 0 for r in finals):
            body.append([shown(alg, names), "diverged"] + [""] * len(metrics))
            continue
        cells = [
            f"{np.mean(v):.4g} ± {np.std(v):.1g}"
            for v in ([float(r[k]) for r in finals] for k in metrics)
        ]
        per = np.array([max(r.get(unit, r["step"]), 1) for r in finals])
        grad = np.mean([r["grad_seconds"] for r in finals] / per)
        total = np.mean([r["grad_seconds"] + r["other_seconds"] for r in finals] / per)
        body.append([shown(alg, names), *cells, f"{total:.3g} ({grad:.3g} + {total - grad:.3g})"])
    header = ["method", *metrics, f"s / {unit} (gradient + other)"]
    return markdown_table(header, body)


def panel_curves(
    spec: Reported,
    rows: Sequence[dict[str, Any]],
    path: Path,
    title: str,
    order: Sequence[float],
    **options: Any,
) -> list[Path]:
    """A panel sweep's curves, one panel per level in ``order`` titled with its ζ²;
    ``options``: :func:`~decentopt.plotting.plot_curves`'s (``x``, ``names``)."""
    scale = "auto" if options.get("x", "step") in ("step", "rounds") else "log"
    return plot_curves(
        rows,
        spec.metric,
        path,
        panel=spec.panel,
        panel_order=order,
        panel_title="{key} = {value:g}  (ζ² = {zeta2:.3g})",
        title=title,
        xscale=scale,
        **options,
    )


#: Beside the verdicts of a run changed by ``--quick`` or ``--set``.
CHANGED_RUN = (
    "These verdicts judge a run changed from the specification by --quick or --set (fewer "
    "runs or iterations, other settings); the full run's verdicts may differ."
)


def write_report(
    spec: Reported,
    rows: Sequence[dict[str, Any]],
    out: Path,
    *,
    modified: bool,
    claims: Callable[[Any], str] | None = None,
    say: Callable[[str], None] = print,
    x: str = "step",
) -> list[Path]:
    """Print and write ``summary.md`` and the figures; ``claims`` renders the claim checks.

    ``x``: the column the curves of a panel sweep are drawn against (see
    :data:`~decentopt.plotting.X_LABELS`)."""
    title = spec.title(modified)
    names = spec.display_names()
    if spec.panel is None:
        tables = final_markdown(rows, spec.params.metrics, names)
        drawn = [m for m in ("train_loss", "test_loss", spec.metric) if m in rows[0]]
        files = plot_epochs(rows, drawn or [spec.metric], out / spec.name, title, names)
        stats = None
    else:
        stats = summarise(rows, spec)
        tables = "\n".join(
            [summary_markdown(stats, spec)]
            + [summary_markdown(summarise(rows, spec, m), spec, m) for m in spec.also_report]
        )
        order = levels_by_zeta(stats)
        files = panel_curves(spec, rows, out / spec.name, title, order, x=x, names=names)
    say(tables)
    report = [f"# {spec.name}: {title}", "", tables]
    if claims is not None:  # a panel sweep's statistics, or a training run's rows
        text = claims(rows if stats is None else stats) + (f"\n{CHANGED_RUN}\n" if modified else "")
        say(text)
        report += ["## The paper's claims" if spec.reproduces else "## Claims", "", text]
    write_text_atomic(out / "summary.md", "\n".join(report))
    return [out / "results.csv", out / "summary.md", *files]
