"""Figure plumbing: an Agg canvas without pyplot, a title that fits the figure, one layout
and one measured box for every format a figure is saved in."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import TightLayoutEngine

__all__ = [
    "DPI",
    "FORMATS",
    "LEGEND_INCHES",
    "new_figure",
    "save_figure",
    "suptitle",
    "tight_box",
    "tight_layout",
]

#: Resolution of the saved figures (dots per inch).
DPI = 130
#: The formats written by default.
FORMATS = ("png", "pdf")
#: About the width of a legend beside the panels (8-point names of about 15 characters).
LEGEND_INCHES = 1.5
#: The size of a figure's title, and about how wide its characters are on average (in
#: points, for the default sans-serif font).
TITLE_POINTS = 10
CHARACTER_POINTS = 0.55 * TITLE_POINTS


def new_figure(rows: int, cols: int, figsize: tuple[float, float]) -> tuple[Figure, np.ndarray]:
    """A figure on an Agg canvas (no pyplot: nothing to close) and its axes, a 2-D array."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False)


def suptitle(fig: Figure, title: str, inches: float) -> None:
    """``title`` above the panels, each line wrapped to ``inches`` (the width of what is
    drawn: panels and legend), so that a long title never sets the width of the figure
    and leaves the panels a fraction of it; at most three lines per line given."""
    width = max(30, int(inches * 72 / CHARACTER_POINTS))
    lines = [
        wrapped
        for line in title.splitlines()
        for wrapped in textwrap.wrap(line, width, max_lines=3, placeholder=" …")
    ]
    fig.suptitle("\n".join(lines), fontsize=TITLE_POINTS)


def tight_layout(fig: Figure) -> None:
    """``fig.tight_layout()`` leaving no layout engine: a save then draws the figure once."""
    TightLayoutEngine(rect=None).execute(fig)  # as fig.tight_layout() does


def tight_box(fig: Figure, dpi: float = DPI) -> Any:
    """``bbox_inches="tight"``'s padded box (inches) as a PNG at ``dpi`` measures it, measured
    once on the Agg renderer (another canvas: ``"tight"``, measured by each format)."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        return "tight"
    previous = fig.dpi
    fig.dpi = dpi
    try:
        box = fig.get_tightbbox(fig.canvas.get_renderer())
    finally:
        fig.dpi = previous
    pad = matplotlib.rcParams["savefig.pad_inches"]
    return box.padded(pad, pad)


def save_figure(fig: Figure, out: str | Path, formats: Sequence[str] = FORMATS) -> list[Path]:
    """Write ``fig`` as ``out.<fmt>`` for each format, all cut to one :func:`tight_box` (not
    measured again per format); returns the paths."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = [out.with_suffix(f".{fmt}") for fmt in formats]
    box = tight_box(fig) if written else None
    for path in written:
        fig.savefig(path, dpi=DPI, bbox_inches=box)
    return written
