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


def test_graph_pictures_of_static_and_time_varying_topologies(tmp_path, capsys):
    import decentopt as dopt
    from decentopt.cli import main
    from decentopt.drawing import plot_contraction, plot_network

    [one] = plot_network(dopt.topology.ring(8), tmp_path / "ring")
    [rounds] = plot_network(dopt.topology.base_graph(7), tmp_path / "base")
    assert one.stat().st_size > 0 and rounds.stat().st_size > one.stat().st_size  # 5 panels
    [curve] = plot_contraction(
        [dopt.topology.ring(8), dopt.topology.one_peer_hypercube(8)], tmp_path / "c", rounds=6
    )
    assert curve.is_file()
    assert (
        main(["topology", "one_peer_exponential", "--n", "8", "--draw", str(tmp_path / "d.png")])
        == 0
    )
    assert (tmp_path / "d.png").is_file() and "drew" in capsys.readouterr().out


def test_curves_against_rounds_after_a_run_stopped(tmp_path):
    """A run stopped early repeats its last counts on later steps; drawing against them works."""
    from decentopt.plotting import plot_curves

    rows = [
        {"algorithm": "ed", "run": r, "step": s, "rounds": min(s, 10), "err": 1.0 / (1 + s)}
        for r in range(2)
        for s in (0, 5, 10, 20, 40)
    ]
    [png] = plot_curves(rows, "err", tmp_path / "r", x="rounds", formats=("png",))
    assert png.is_file()


def test_directed_graphs_are_drawn_with_every_edge(tmp_path):
    """directed_ring(6) has 6 one-way links (i reads i - 1), not the 1 of its upper
    triangle; each round of the directed one-peer exponential graph has 8 on 8 agents."""
    import decentopt as dopt
    from decentopt.drawing import graphs_of, plot_network

    ring = dopt.topology.directed_ring(6)
    [graph] = graphs_of([ring.W.numpy()])
    assert graph.is_directed() and graph.number_of_edges() == 6
    W = ring.W.numpy()
    assert all(W[i, j] > 0 for j, i in graph.edges)  # j -> i: i reads j
    rounds = graphs_of(dopt.topology.directed_one_peer_exponential(8).matrices())
    assert [g.number_of_edges() for g in rounds] == [8, 8, 8]  # the symmetric round too
    [undirected] = graphs_of([dopt.topology.ring(6).W.numpy()])
    assert not undirected.is_directed() and undirected.number_of_edges() == 6
    [drawn] = plot_network(ring, tmp_path / "dr")
    assert drawn.stat().st_size > 0


def test_a_grid_of_many_variants_draws_a_small_figure_of_its_best(tmp_path):
    """Two hundred variants: the figure keeps its size and draws the twelve lowest curves."""
    import matplotlib.image

    from decentopt.plotting import MOST_CURVES, best_methods, plot_curves

    rows = [
        {"algorithm": f"edm(lr={k})", "step": s, "run": 0, "err": (1 + k) / (1 + s)}
        for k in range(200)
        for s in (0, 10, 100)
    ]
    title = "a grid over " + ", ".join(str(k) for k in range(200))
    (png,) = plot_curves(rows, "err", tmp_path / "grid", title=title, formats=("png",))
    height, width = matplotlib.image.imread(png).shape[:2]
    assert width < 2000 and height < 800, (width, height)
    assert best_methods(rows, "err", MOST_CURVES) == {f"edm(lr={k})" for k in range(MOST_CURVES)}


def test_the_band_is_nanpercentile_row_by_row():
    """Rows free of NaN computed at once, the others one by one: the same numbers."""
    import warnings

    from decentopt.plotting import band

    rng = np.random.default_rng(0)
    values = rng.lognormal(size=(50, 5))
    values[3, 1] = np.nan
    values[7, :] = np.nan  # every run diverged: no band
    values[9, 2] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.nanpercentile(values, [10, 90], axis=1)
    np.testing.assert_array_equal(band(values), want)
    np.testing.assert_array_equal(band(values[:2]), np.percentile(values[:2], [10, 90], axis=1))


def test_a_saved_figure_is_the_one_savefig_cuts_tight(tmp_path):
    """The box measured once gives the pixels of ``bbox_inches="tight"``; no pyplot figure
    is left open."""
    import matplotlib.image
    import matplotlib.pyplot as plt

    from decentopt.plotting import DPI, new_figure, save_figure, tight_layout

    def draw():
        fig, axes = new_figure(1, 2, figsize=(6, 3))
        for k, ax in enumerate(axes[0]):
            ax.semilogy(np.arange(1, 50), 10.0 ** -np.arange(1, 50) * (k + 1), label="a")
            ax.set_ylabel(r"$\|x\|^2$")
            ax.set_title(f"panel {k}")
        fig.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.suptitle("a title")
        tight_layout(fig)
        return fig

    before = plt.get_fignums()
    [png, pdf] = save_figure(draw(), tmp_path / "mine")
    draw().savefig(tmp_path / "tight.png", dpi=DPI, bbox_inches="tight")
    mine, tight = (matplotlib.image.imread(p) for p in (png, tmp_path / "tight.png"))
    assert mine.shape == tight.shape
    np.testing.assert_array_equal(mine, tight)
    assert pdf.read_bytes().startswith(b"%PDF") and plt.get_fignums() == before


def test_markers_of_coinciding_curves_never_sit_on_each_other():
    """DSGD, DmSGD and DecentLaM give one curve on the quadratic: each marks other points."""
    from decentopt.plotting import _draw_curves, new_figure

    for steps in (record_steps(1000, "log"), list(range(0, 300, 3))):
        rows = [
            {"algorithm": alg, "step": s, "run": 0, "err": 1.0 / (s + 1)}
            for alg in ("dsgd", "dmsgd", "decentlam")
            for s in steps
        ]
        _, axes = new_figure(1, 1, (4, 3))
        _draw_curves(axes[0][0], rows, "err", "step", {})
        marked = []
        for line in axes[0][0].get_lines():
            every = line.get_markevery()
            start, step = every if isinstance(every, tuple) else (0, every)
            marked.append(set(range(start, len(line.get_xdata()), step)))
        assert len(marked) == 3 and all(6 <= len(m) <= 10 for m in marked)
        assert all(not (a & b) for k, a in enumerate(marked) for b in marked[k + 1 :])


def test_a_long_title_does_not_shrink_the_panels(tmp_path):
    """The title is wrapped to the panels and legend: the figure is as wide as they are."""
    import matplotlib.image

    from decentopt.figures import DPI, LEGEND_INCHES
    from decentopt.plotting import PANEL_INCHES

    rows = [
        {"algorithm": alg, "step": s, "run": 0, "err": 1.0 / (s + 1)}
        for alg in ("dsgd", "dmsgd", "edm")
        for s in record_steps(100, "log")
    ]
    title = "Quadratic (d = 10, p = 20, sigma2 = 0.05), ring of 32 agents, " * 4
    [png] = plot_curves(rows, "err", tmp_path / "fig", title=title, formats=("png",))
    width = matplotlib.image.imread(png).shape[1] / DPI
    assert PANEL_INCHES < width < PANEL_INCHES + LEGEND_INCHES + 0.8
    for panels in (2, 4):  # several panels: still as wide as they are
        many = [r | {"c": c} for r in rows for c in range(panels)]
        out = tmp_path / f"f{panels}"
        [png] = plot_curves(many, "err", out, panel="c", title=title, formats=("png",))
        width = matplotlib.image.imread(png).shape[1] / DPI
        assert width < panels * PANEL_INCHES + LEGEND_INCHES + 0.8


def test_the_default_comparison_figure_is_the_width_of_its_panel(tmp_path, capsys):
    import matplotlib.image

    from decentopt.cli import main
    from decentopt.figures import DPI, LEGEND_INCHES
    from decentopt.plotting import PANEL_INCHES

    args = ["compare", "--quick", "--set", "agents=8", "--set", "iterations=60"]
    assert main([*args, "--set", "runs=2", "--out", str(tmp_path), "--no-progress"]) == 0
    width = matplotlib.image.imread(tmp_path / "compare.png").shape[1] / DPI
    assert width < PANEL_INCHES + LEGEND_INCHES + 0.8  # was 9 inches: a third of it the panel
