"""How methods are named and drawn: display names, the order of a legend, each method's
colour, line style and marker, and where its markers sit.

Every method has its own colour, line style and marker; the markers of the ``k``-th of
``m`` methods sit ``k / m`` of the way between the marked points of the first, so that
curves that coincide (DSGD, DmSGD and DecentLaM on the quadratic, whose bias is the same)
still show every method's marks rather than one method's on top of the others'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

from decentopt.algorithms.registry import PAPER_ORDER

__all__ = [
    "LABELS",
    "METRIC_LABELS",
    "display_name",
    "marks",
    "ordered",
    "shown",
    "style_for",
]

LABELS = {
    "dsgd": "DSGD",
    "dmsgd": "DmSGD",
    "decentlam": "DecentLaM",
    "qg_dsgdm": "QG-DSGDm",
    "dsgt": "DSGT",
    "dsgt_hb": "DSGT-HB",
    "ed": "ED/D²",
    "edm": "EDM",
    "extra": "EXTRA",
    "nids": "NIDS",
    "mt": "Momentum Tracking",
    "choco_dsgd": "CHOCO-SGD",
    "choco_ed": "CHOCO-ED",
    "choco_edm": "CHOCO-EDM",
    "sgp": "SGP",
    "osgp": "OSGP",
    "ad_psgd": "AD-PSGD",
    "push_diging": "Push-DIGing",
    "relaysgd": "RelaySGD",
}
METRIC_LABELS = {
    "dist_to_opt": r"$\frac{1}{n}\sum_i \|x_i - x^\star\|^2$",
    "grad_norm": r"$\|\nabla f(\bar x)\|^2$",
    "consensus": r"$\frac{1}{n}\sum_i \|x_i - \bar x\|^2$",
    "opt_gap": r"$f(\bar x) - f^\star$",
    "train_loss": r"training loss $\sum_i f_i(x_i)$",
    "test_loss": "test loss (averaged model)",
    "test_acc": "test accuracy (averaged model)",
}

_LINESTYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">")
#: Marked points along a curve.
MARKS = 8


def display_name(label: str, method: str) -> str:
    """How a variant is shown: ``EDM``, a grid point ``EDM(beta=0.5)``, or its own label
    with the method's name, ``choco_top10 (CHOCO-SGD)``."""
    name = LABELS.get(method)
    if name is None or label == method:  # no display name (a plugin's): the label itself
        return name or label
    if label.startswith(method + "("):
        return name + label[len(method) :]
    return f"{label} ({name})"


def shown(label: str, names: dict[str, str] | None) -> str:
    """A label as ``names`` shows it, else the method's display name, else itself."""
    return (names or {}).get(label) or LABELS.get(label, label)


def ordered(names: Sequence[str]) -> list[str]:
    """Distinct labels: the paper's methods in its order (variants ``edm(lr=...)`` by their
    method), then the rest sorted."""
    rank = {name: i for i, name in enumerate(PAPER_ORDER)}
    return sorted(set(names), key=lambda s: (rank.get(s.split("(")[0], len(rank)), s))


def style_for(name: str, index: int) -> dict[str, Any]:
    """Colour, line style and marker of a method (EDM: thick black solid line)."""
    if name == "edm":
        return {"color": "black", "lw": 2.2, "ls": "-", "marker": "o", "ms": 4}
    return {
        "color": matplotlib.colormaps["tab10"](index % 10),
        "lw": 1.3,
        "ls": _LINESTYLES[index % len(_LINESTYLES)],
        "marker": _MARKERS[index % len(_MARKERS)],
        "ms": 4,
    }


def marks(points: int, index: int, methods: int) -> tuple[int, int]:
    """``markevery`` of the ``index``-th of ``methods`` curves of ``points`` points: about
    :data:`MARKS` marks, the curves' marks offset from each other along the curve."""
    every = max(1, points // MARKS)
    return (index * every) // max(1, methods) % every, every
