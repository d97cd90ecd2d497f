from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from decentopt.cli import main
from decentopt.experiments import load_config, run_sweep, summarise
from decentopt.experiments.claims import CLAIMS, check_claims
from decentopt.experiments.summary import Stat, settling_step
from decentopt.results import read_csv
from tests.experiments.test_config import BASE, write


@pytest.fixture
def cfg_path(tmp_path):
    return write(tmp_path, BASE)


def quiet(_: str) -> None:
    pass


def test_sweep_rows_are_tidy_and_resume(cfg_path, tmp_path):
    cfg = load_config(cfg_path)
    out = tmp_path / "out"
    first = run_sweep(cfg, out, progress=False, log=quiet)
    assert first.ran == ["ed", "edm"] and first.skipped == []
    steps = {row["step"] for row in first.rows}
    assert min(steps) == 0 and max(steps) == 50
    # one row per algorithm, level, repetition and recorded step
    assert len(first.rows) == 2 * 2 * 2 * len(steps)
    assert {row["c"] for row in first.rows} == {1.0, 0.5}
    assert set(first.rows[0]) >= {"algorithm", "c", "zeta2", "repetition", "step", "dist_to_opt"}
    on_disk = read_csv(out / "results.csv")
    assert len(on_disk) == len(first.rows)
    np.testing.assert_allclose(
        [r["dist_to_opt"] for r in on_disk], [r["dist_to_opt"] for r in first.rows]
    )
    # rerun: nothing recomputed, same rows
    again = run_sweep(cfg, out, progress=False, log=quiet)
    assert again.ran == [] and again.skipped == ["ed", "edm"]
    # an interrupted run (no completion record) and a changed hyper-parameter rerun alone
    (out / "runs" / "ed.json").unlink()
    changed = load_config(cfg_path, overrides=["algorithms.edm.beta=0.5"])
    third = run_sweep(changed, out, progress=False, log=quiet)
    assert sorted(third.ran) == ["ed", "edm"]
    fourth = run_sweep(changed, out, progress=False, log=quiet)
    assert fourth.ran == []
    meta = json.loads((out / "runs" / "edm.json").read_text())
    assert meta["hyperparams"]["beta"] == 0.5


def test_all_algorithms_see_the_same_noise(cfg_path, tmp_path):
    """ED and EDM with beta = 0 are the same method: equal rows prove shared data and noise."""
    cfg = load_config(cfg_path, overrides=["algorithms.edm.beta=0.0"])
    rows = run_sweep(cfg, tmp_path / "o", progress=False, log=quiet).rows
    ed = [r["dist_to_opt"] for r in rows if r["algorithm"] == "ed"]
    edm = [r["dist_to_opt"] for r in rows if r["algorithm"] == "edm"]
    np.testing.assert_allclose(ed, edm, rtol=1e-10)


def test_divergence_is_recorded_and_the_sweep_goes_on(cfg_path, tmp_path):
    cfg = load_config(cfg_path, overrides=["algorithms.ed.lr=3.0", "iterations=200"])
    out = run_sweep(cfg, tmp_path / "o", progress=False, log=quiet)
    stats = summarise(out.rows, cfg)
    assert all(stats[(lv, "ed")].diverged == 2 for lv in (1.0, 0.5))
    assert all(stats[(lv, "edm")].diverged == 0 for lv in (1.0, 0.5))


def test_settling_step():
    steps = np.array([0, 10, 20, 30, 40])
    assert settling_step(steps, np.array([1.0, 0.1, 0.01, 0.001, 0.001]), 0.01) == 20
    # a dip below and back above does not count
    assert settling_step(steps, np.array([1.0, 0.001, 0.1, 0.001, 0.001]), 0.01) == 25
    assert settling_step(steps, np.array([1.0, 0.5, 0.4, 0.3, 0.2]), 0.01) is None


def fake_stats(values: dict[str, tuple[float, float]], iters=None) -> dict:
    stats = {}
    for alg, (low, high) in values.items():
        for level, zeta, val in ((1.0, 1.0, low), (0.25, 16.0, high)):
            it = (iters or {}).get(alg, 100)
            stats[(level, alg)] = Stat(val, 0.0, val, it, 0, zeta)
    return stats


def test_claims_are_decided_by_the_numbers():
    cfg = load_config("fig1")
    good = fake_stats(
        {
            "dmsgd": (0.1, 1.6),
            "decentlam": (0.1, 1.6),
            "qg_dsgdm": (0.01, 0.16),
            "ed": (1e-4, 1e-4),
            "edm": (5e-5, 5e-5),
            "dsgt": (1e-4, 1.1e-4),
            "dsgt_hb": (1e-4, 1e-4),
        },
        iters={"edm": 50, "ed": 100, "dsgt_hb": 200},
    )
    verdicts = check_claims(cfg, good)
    assert len(verdicts) == len(CLAIMS["fig1"])
    assert all(v.holds for _, v in verdicts)
    bad = dict(good)
    bad[(0.25, "edm")] = Stat(1e-3, 0.0, 1e-3, None, 0, 16.0)
    verdicts = {c.test: v for c, v in check_claims(cfg, bad)}
    failed = [t for t, v in verdicts.items() if v.holds is False]
    assert len(failed) == 4  # EDM no longer flat, worse than ED, slower than ED and DSGT-HB
    moving = dict(good)
    moving[(0.25, "dsgt")] = Stat(1e-3, 0.0, 1e-3, 100, 0, 16.0, trend=0.3)
    evidence = {c.test: v for c, v in check_claims(cfg, moving)}
    assert any(
        "still decreasing at the end of the run: DSGT" in v.evidence for v in evidence.values()
    )
    with pytest.raises(ValueError, match="no claims"):
        check_claims(load_config("fig1", overrides=['name="mine"']), good)


def test_cli_run_writes_results_figure_and_summary(cfg_path, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["run", str(cfg_path), "--out", str(out), "--no-progress", "--quick"]) == 0
    for name in ("results.csv", "summary.md", "tiny.png", "tiny.pdf", "runs/edm.csv"):
        assert (out / name).is_file(), name
    text = capsys.readouterr().out
    assert "| ED/D² |" in text and "2 run(s) computed" in text
    assert main(["run", str(cfg_path), "--out", str(out), "--no-progress", "--quick"]) == 0
    assert "0 run(s) computed, 2 resumed" in capsys.readouterr().out


def test_cli_check_and_errors(cfg_path, tmp_path, capsys):
    out = tmp_path / "chk"
    args = ["run", str(cfg_path), "--out", str(out), "--no-progress", "--set", 'name="fig1"']
    assert main([*args, "--check"]) == 0
    text = capsys.readouterr().out
    assert "claims hold in this run" in text and "| claim (paper) |" in text
    assert main(["run", str(tmp_path / "nope.toml")]) == 2
    assert "no configuration file" in capsys.readouterr().err
    assert main(["run", str(cfg_path), "--set", "iterations=-3"]) == 2
    assert "'iterations' must be >= 1" in capsys.readouterr().err


def test_reproduce_accepts_only_presets(capsys):
    with pytest.raises(SystemExit):
        main(["reproduce", "fig9"])
    assert "invalid choice" in capsys.readouterr().err


def test_plotting_reads_saved_results_only(cfg_path, tmp_path):
    from decentopt.plotting import plot_curves

    out = tmp_path / "p"
    run_sweep(load_config(cfg_path), out, progress=False, log=quiet)
    rows = read_csv(out / "results.csv")
    files = plot_curves(rows, "dist_to_opt", out / "again", panel="c")
    assert all(Path(f).stat().st_size > 1000 for f in files)
