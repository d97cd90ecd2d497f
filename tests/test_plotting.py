from __future__ import annotations

import numpy as np

from decentopt.plotting import coincident_groups, plot_curves, style_for, x_scale
from decentopt.simulate import record_steps


def test_log_spaced_records_get_a_log_axis():
    assert x_scale(record_steps(3000, "log")) == "symlog"
    assert x_scale(record_steps(3000, 10)) == "linear"


def test_every_method_has_its_own_style():
    styles = {(s["ls"], s["marker"], s["color"]) for s in (style_for(f"m{i}", i) for i in range(8))}
    assert len(styles) == 8


def test_coincident_curves_are_reported():
    a = np.array([1.0, 0.5, 0.25])
    groups = coincident_groups({"dsgd": a, "dmsgd": a * (1 + 1e-6), "edm": a / 10})
    assert groups == [["dsgd", "dmsgd"], ["edm"]]


def test_plot_writes_files_with_labelled_axes(tmp_path):
    rows = [
        {"algorithm": alg, "step": s, "repetition": 0, "err": 1.0 / (s + 1)}
        for alg in ("dsgd", "dmsgd", "edm")
        for s in record_steps(100, "log")
    ]
    files = plot_curves(rows, "err", tmp_path / "fig", formats=("png",))
    assert files[0].is_file()
