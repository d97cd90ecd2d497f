from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from decentopt.cli import main
from decentopt.experiments import ConfigError, load_spec, run_spec
from decentopt.experiments.claims import check_claims
from decentopt.experiments.summary import Stat, summarise
from decentopt.results import read_csv
from tests.experiments.test_spec import BASE, write


@pytest.fixture
def cfg_path(tmp_path):
    return write(tmp_path, BASE)


def quiet(_: str) -> None:
    pass


def test_sweep_rows_are_tidy_and_resume(cfg_path, tmp_path):
    cfg = load_spec(cfg_path)
    out = tmp_path / "out"
    first = run_spec(cfg, out, progress=False, log=quiet)
    assert first.ran == ["ed", "edm"] and first.kept == []
    steps = {row["step"] for row in first.rows}
    assert min(steps) == 0 and max(steps) == 50
    # one row per algorithm, level, run and recorded step
    assert len(first.rows) == 2 * 2 * 2 * len(steps)
    assert {row["c"] for row in first.rows} == {1.0, 0.5}
    assert set(first.rows[0]) >= {"algorithm", "c", "zeta2", "run", "step", "dist_to_opt"}
    on_disk = read_csv(out / "results.csv")
    assert len(on_disk) == len(first.rows)
    np.testing.assert_allclose(
        [r["dist_to_opt"] for r in on_disk], [r["dist_to_opt"] for r in first.rows]
    )
    # rerun: nothing recomputed, same rows
    again = run_spec(cfg, out, progress=False, log=quiet)
    assert again.ran == [] and again.kept == ["ed", "edm"]
    # an interrupted run (no completion record) and a changed hyper-parameter rerun alone
    (out / "runs" / "ed" / "meta.json").unlink()
    changed = load_spec(cfg_path, overrides=["algorithms.edm.beta=0.5"])
    third = run_spec(changed, out, progress=False, log=quiet)
    assert sorted(third.ran) == ["ed", "edm"]
    fourth = run_spec(changed, out, progress=False, log=quiet)
    assert fourth.ran == []
    meta = json.loads((out / "runs" / "edm" / "meta.json").read_text())
    assert meta["hyperparams"]["beta"] == 0.5


def test_all_algorithms_see_the_same_noise(cfg_path, tmp_path):
    """ED and EDM with beta = 0 are the same method: equal rows prove shared data and noise."""
    cfg = load_spec(cfg_path, overrides=["algorithms.edm.beta=0.0"])
    rows = run_spec(cfg, tmp_path / "o", progress=False, log=quiet).rows
    ed = [r["dist_to_opt"] for r in rows if r["algorithm"] == "ed"]
    edm = [r["dist_to_opt"] for r in rows if r["algorithm"] == "edm"]
    np.testing.assert_allclose(ed, edm, rtol=1e-10)


def test_divergence_is_recorded_and_the_sweep_goes_on(cfg_path, tmp_path):
    cfg = load_spec(cfg_path, overrides=["algorithms.ed.lr=3.0", "iterations=200"])
    out = run_spec(cfg, tmp_path / "o", progress=False, log=quiet)
    stats = summarise(out.rows, cfg)
    assert all(stats[(lv, "ed")].diverged == 2 for lv in (1.0, 0.5))
    assert all(stats[(lv, "edm")].diverged == 0 for lv in (1.0, 0.5))


def test_a_diverged_first_variant_leaves_a_clean_summary(cfg_path, tmp_path):
    """The first method diverged everywhere: the caption rests on one that ran, and no
    NumPy warning about all-NaN slices reaches the user."""
    import warnings

    from decentopt.experiments import write_report

    cfg = load_spec(cfg_path, overrides=["algorithms.ed.lr=3.0", "iterations=200"])
    out = run_spec(cfg, tmp_path / "o", progress=False, log=quiet)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_report(cfg, out.rows, tmp_path / "o", modified=True, say=quiet)
    text = (tmp_path / "o" / "summary.md").read_text()
    assert "(0 recorded steps" not in text and "(21 recorded steps, iterations 180-200)" in text


def test_a_sweep_where_everything_diverged_says_so(cfg_path, tmp_path):
    from decentopt.experiments import write_report

    over = ["algorithms.ed.lr=3.0", "algorithms.edm.lr=30.0", "iterations=200"]
    cfg = load_spec(cfg_path, overrides=over)
    out = run_spec(cfg, tmp_path / "o", progress=False, log=quiet)
    write_report(cfg, out.rows, tmp_path / "o", modified=True, say=quiet)
    text = (tmp_path / "o" / "summary.md").read_text()
    assert "every run of every method diverged" in text and "0 recorded steps" not in text


def test_labels_are_shown_with_their_method_and_graphs_in_the_title(tmp_path):
    """A label that is not a method's name keeps its label beside the method's display
    name, never raw beside display names; the title names every graph that ran."""
    from decentopt.experiments.reports import summary_markdown

    text = BASE.replace(
        "[algorithms.ed]",
        '[algorithms.fast]\nmethod = "ed"\n[algorithms.sgp]\nlr = 0.05\ntopology = "directed_ring"',
    )
    text = text.replace("[defaults]\nlr = 0.05\nbeta = 0.8", "[defaults]\nlr = 0.05")
    cfg = load_spec(write(tmp_path, text))
    assert cfg.display_names() == {"fast": "fast (ED/D²)", "sgp": "SGP", "edm": "EDM"}
    assert "ring of 6 agents; directed_ring for sgp" in cfg.title()
    rows = run_spec(cfg, tmp_path / "o", progress=False, log=quiet).rows
    table = summary_markdown(summarise(rows, cfg), cfg)
    assert "| fast (ED/D²) |" in table and "| EDM |" in table and "| fast |" not in table


def fake_stats(values: dict[str, tuple[float, float]], settle=None, se=0.0) -> dict:
    """Two levels (ζ² = 1 and 16), 10 settled repetitions per method at ``settle``."""
    stats = {}
    for alg, (low, high) in values.items():
        for level, zeta, val in ((1.0, 1.0, low), (0.25, 16.0, high)):
            it = (settle or {}).get(alg, 100.0)
            reps = tuple(it + k for k in range(-2, 3)) * 2
            stats[(level, alg)] = Stat(val, se * val, val, int(it), 0, zeta, settle=reps, rate=-0.1)
    return stats


GOOD = {
    "dmsgd": (0.1, 1.6),
    "decentlam": (0.1, 1.6),
    "qg_dsgdm": (0.01, 0.16),
    "ed": (1e-4, 1e-4),
    "edm": (5e-5, 5e-5),
    "dsgt": (1e-4, 1.1e-4),
    "dsgt_hb": (1e-4, 1e-4),
}
FAST = {"edm": 50.0, "ed": 100.0, "dsgt_hb": 200.0, "dsgt": 200.0}


def test_claims_are_decided_by_the_numbers():
    fig1 = load_spec("fig1").claims
    verdicts = check_claims(fig1, fake_stats(GOOD, FAST))
    assert len(verdicts) == len(fig1) == 6
    assert all(v.holds is True for _, v in verdicts)
    bad = fake_stats(GOOD, FAST)
    bad[(0.25, "edm")] = replace(bad[(0.25, "edm")], steady=1e-3, settle=(float("inf"),) * 10)
    verdicts = {c.test: v for c, v in check_claims(fig1, bad)}
    failed = [t for t, v in verdicts.items() if v.holds is False]
    assert len(failed) == 4  # EDM no longer flat, worse than ED, slower than ED and DSGT-HB


def test_three_verdicts_with_a_gap_between_thresholds():
    cfg = load_spec("fig1").claims
    by_claim = lambda stats: [v.holds for _, v in check_claims(cfg, stats)]  # noqa: E731
    # growth x1.5 over the ζ² range: neither trapped (slope 0.15) nor unaffected (> x1.2)
    between = fake_stats(GOOD | {"ed": (1e-4, 1.5e-4)}, FAST)
    assert by_claim(between)[2] is None
    # DmSGD growing x2 over ζ² x16 (slope 0.25) is not "trapped": inconclusive, not a pass
    weak = fake_stats(GOOD | {"dmsgd": (0.1, 0.2)}, FAST)
    assert by_claim(weak)[1] is None
    # a method still decreasing at the end gets no verdict on its growth
    moving = fake_stats(GOOD, FAST)
    moving[(0.25, "dsgt")] = replace(moving[(0.25, "dsgt")], steady=1e-3, decreasing=True)
    verdicts = check_claims(cfg, moving)
    assert verdicts[2][1].holds is None and "DSGT slope" in verdicts[2][1].evidence
    assert verdicts[0][1].holds is None  # its convergence is not finished either
    # within two standard errors: "EDM below ED" is not established, "no worse" still holds
    noisy = fake_stats(GOOD | {"edm": (9e-5, 9e-5)}, FAST, se=0.2)
    fig2 = check_claims(load_spec("fig2").claims, noisy)
    assert fig2[1][1].holds is None and "equal within noise" in fig2[1][1].evidence
    assert check_claims(cfg, noisy)[3][1].holds is True
    # equal settling within noise: "faster" is inconclusive
    tie = fake_stats(GOOD, FAST | {"edm": 100.0})
    assert by_claim(tie)[4] is None
    # a transient that does not fall: not linear convergence
    flat = fake_stats(GOOD, FAST)
    flat[(1.0, "dsgd")] = replace(fake_stats({"dsgd": (0.1, 0.1)})[(1.0, "dsgd")], rate=0.01)
    assert by_claim(flat)[0] is False


def test_claim_tables_are_checked():
    with pytest.raises(ConfigError, match=r"\[\[claims\]\] #1: needs text"):
        load_spec("fig1", overrides=['claims=[{check = "converges_linearly"}]'])
    with pytest.raises(ConfigError, match=r"#1 \(trapped\).*algorithms"):
        load_spec("fig1", overrides=['claims=[{text = "x", check = "trapped"}]'])


def test_cli_run_writes_results_figure_and_summary(cfg_path, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["run", str(cfg_path), "--out", str(out), "--no-progress", "--quick"]) == 0
    for name in ("results.csv", "summary.md", "tiny.png", "tiny.pdf", "runs/edm/rows.csv"):
        assert (out / name).is_file(), name
    text = capsys.readouterr().out
    assert "| ED/D² |" in text and "2 unit(s) computed" in text
    assert main(["run", str(cfg_path), "--out", str(out), "--no-progress", "--quick"]) == 0
    assert "0 unit(s) computed, 2 resumed" in capsys.readouterr().out


def test_cli_check_and_errors(cfg_path, tmp_path, capsys):
    out = tmp_path / "chk"
    claims = (
        'claims=[{text = "EDM is below ED", check = "steady_below", algorithm = "edm", '
        'others = ["ed"]}, {text = "All converge", check = "converges_linearly"}]'
    )
    args = ["run", str(cfg_path), "--out", str(out), "--no-progress", "--set", claims]
    assert main([*args, "--check"]) == 0
    text = capsys.readouterr().out
    # the printed tally is the verdicts of the saved results, whatever they are
    cfg = load_spec(cfg_path, overrides=[claims])
    assert len(cfg.claims) == 2
    verdicts = check_claims(cfg.claims, summarise(read_csv(out / "results.csv"), cfg))
    tally = [sum(v.holds is x for _, v in verdicts) for x in (True, False, None)]
    assert (
        f"{tally[0]} of {len(verdicts)} claims hold in this run, {tally[1]} do not, "
        f"{tally[2]} inconclusive"
    ) in text
    assert text.count("| holds |") == tally[0]
    assert text.count("| **does not hold** |") == tally[1]
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
    run_spec(load_spec(cfg_path), out, progress=False, log=quiet)
    rows = read_csv(out / "results.csv")
    files = plot_curves(rows, "dist_to_opt", out / "again", panel="c")
    assert all(Path(f).stat().st_size > 1000 for f in files)


NEURAL_RUN = ["--no-progress"]


def test_neural_runs_resume_and_report(tmp_path, capsys):
    from tests.experiments.test_spec import NEURAL

    torch.set_default_dtype(torch.float32)
    try:
        path = write(tmp_path, NEURAL)
        out = tmp_path / "o"
        assert main(["run", str(path), "--out", str(out), *NEURAL_RUN]) == 0
        text = capsys.readouterr().out
        assert "| EDM |" in text and (out / "tiny-train.png").is_file()
        assert "2 unit(s) computed" in text
        assert list((out / "runs" / "edm-run0").glob("step-*/rank0.pt"))
        rows = read_csv(out / "results.csv")
        assert {r["epoch"] for r in rows} == {1, 2, 3} and {r["run"] for r in rows} == {0}
        assert main(["run", str(path), "--out", str(out), *NEURAL_RUN]) == 0
        assert "0 unit(s) computed, 2 resumed" in capsys.readouterr().out  # nothing retrained
        assert main(["run", str(path), "--out", str(out), *NEURAL_RUN, "--check"]) == 2
        assert "states no claims" in capsys.readouterr().err
    finally:
        torch.set_default_dtype(torch.float64)


def test_auto_backend_runs_are_exact_reruns_and_resume_exactly(tmp_path):
    """backend = "auto" chooses by rule: two runs of one command give the same rows, and an
    interrupted run resumed gives the rows of an uninterrupted one; the choice is recorded."""
    from tests.experiments.test_spec import NEURAL

    torch.set_default_dtype(torch.float32)
    try:
        spec = load_spec(write(tmp_path, NEURAL.replace('backend = "loop"', 'backend = "auto"')))
        first = run_spec(spec, tmp_path / "a", progress=False, log=quiet)
        second = run_spec(spec, tmp_path / "b", progress=False, log=quiet)

        def numbers(rows):
            return [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]

        assert numbers(first.rows) == numbers(second.rows)
        meta = json.loads((tmp_path / "a" / "runs" / "edm-run0" / "meta.json").read_text())
        assert meta["backend"] == "vmap"  # a small model on the CPU
        # interrupted after the first epoch's checkpoint: resumed, the same rows
        unit = tmp_path / "b" / "runs" / "edm-run0"
        (unit / "meta.json").unlink()
        steps = sorted(unit.glob("step-*"))
        for later in steps[1:]:
            shutil.rmtree(later)
        resumed = run_spec(spec, tmp_path / "b", progress=False, log=quiet)
        assert "edm-run0" in resumed.ran
        assert numbers(resumed.rows) == numbers(first.rows)
    finally:
        torch.set_default_dtype(torch.float64)


def test_missing_cifar_folder_is_a_clear_error(tmp_path, capsys):
    from tests.experiments.test_spec import NEURAL

    text = NEURAL.replace('dataset = "digits"', 'dataset = "cifar10"\ndata_dir = "nope"')
    assert main(["run", str(write(tmp_path, text)), "--out", str(tmp_path / "o")]) == 2
    assert "CIFAR-10 not found in nope" in capsys.readouterr().err


def test_multi_round_gossip_from_a_specification(cfg_path, tmp_path):
    plain = run_spec(load_spec(cfg_path), tmp_path / "a", progress=False, log=quiet)
    with pytest.warns(FutureWarning, match=r"write gossip = \"multi_round\(3, acc.*\[defaults\]"):
        spec = load_spec(cfg_path, overrides=["mix_rounds=3", 'acceleration="chebyshev"'])
    assert spec.fingerprint("edm") != load_spec(cfg_path).fingerprint("edm")
    fast = run_spec(spec, tmp_path / "b", progress=False, log=quiet)
    last = max(r["step"] for r in plain.rows)
    rounds = {r["rounds"] for r in fast.rows if r["step"] == last}
    assert rounds == {3 * last} and {r["rounds"] for r in plain.rows if r["step"] == last} == {last}
    # the old keys are the gossip they name, written as such
    gossip = load_spec(cfg_path, overrides=['defaults.gossip="multi_round(3)"'])
    same = run_spec(gossip, tmp_path / "c", progress=False, log=quiet)
    assert [r[spec.metric] for r in same.rows] == [r[spec.metric] for r in fast.rows]
    with pytest.raises(ConfigError, match="acceleration"):
        load_spec(cfg_path, overrides=['acceleration="nesterov"'])


def test_parallel_units_give_the_serial_results(cfg_path, tmp_path):
    cfg = load_spec(cfg_path, overrides=["algorithms.dsgd.lr=0.05"])
    serial = run_spec(cfg, tmp_path / "s", progress=False, log=quiet)
    parallel = run_spec(cfg, tmp_path / "p", progress=False, jobs=2, log=quiet)
    assert serial.ran == ["ed", "edm", "dsgd"]
    assert sorted(parallel.ran) == sorted(serial.ran)  # stored as each worker finishes

    def numbers(rows):  # everything but the timing columns
        return [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]

    assert numbers(parallel.rows) == numbers(serial.rows)
    again = run_spec(cfg, tmp_path / "p", progress=False, jobs=2, log=quiet)
    assert again.ran == [] and numbers(again.rows) == numbers(serial.rows)


def test_neural_units_in_workers_give_the_serial_rows_and_resume(tmp_path):
    """Units over runs of a CPU network go to forked workers: each builds its problem and
    computes in its own folder (checkpoints there); the rows are those of a serial run."""
    from decentopt.experiments.kinds.neural import NeuralSpec
    from tests.experiments.test_spec import NEURAL

    assert not NeuralSpec("digits", "small_cnn", 0.5, 16, 2, device="cuda").forkable
    torch.set_default_dtype(torch.float32)
    try:
        spec = load_spec(write(tmp_path, NEURAL))
        serial = run_spec(spec, tmp_path / "s", progress=False, log=quiet)
        parallel = run_spec(spec, tmp_path / "p", progress=False, jobs=2, log=quiet)
        assert sorted(parallel.ran) == sorted(serial.ran) == ["ed-run0", "edm-run0"]

        def numbers(rows):
            return [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]

        assert numbers(parallel.rows) == numbers(serial.rows)
        assert list((tmp_path / "p" / "runs" / "edm-run0").glob("step-*/rank0.pt"))
        again = run_spec(spec, tmp_path / "p", progress=False, jobs=2, log=quiet)
        assert again.ran == [] and numbers(again.rows) == numbers(serial.rows)
    finally:
        torch.set_default_dtype(torch.float64)


def test_a_problem_too_large_for_memory_is_a_clear_error(cfg_path, tmp_path, capsys, monkeypatch):
    args = ["run", str(cfg_path), "--out", str(tmp_path / "o"), "--no-progress", "--jobs", "1"]
    assert main([*args, "--set", "runs=100000000"]) == 2  # refused by the estimate
    err = capsys.readouterr().err
    assert "needs about" in err and "lower runs" in err and "Traceback" not in err
    # an estimate that lets it through: the allocator's refusal says the same
    monkeypatch.setattr("decentopt.experiments.runner.check_memory", lambda spec: 0.0)
    assert main([*args, "--set", "runs=100000000"]) == 2
    err = capsys.readouterr().err
    assert "does not fit in memory" in err and "lower runs" in err and "Traceback" not in err
    with pytest.warns(UserWarning, match="will take days"):
        load_spec(cfg_path, overrides=["iterations=1000000000"])


def test_the_table_of_a_large_grid_shows_its_best_rows():
    from decentopt.experiments.reports import MOST_ROWS, summary_markdown
    from decentopt.experiments.spec import load_spec
    from decentopt.experiments.summary import Stat

    spec = load_spec("fig1")
    names = [f"edm(lr={k})" for k in range(100)]
    stats = {}
    for k, name in enumerate(names):
        values = {f: 0 for f in Stat.__dataclass_fields__} | {"steady": float(k), "runs": 1}
        stats[(1.0, name)] = Stat(**values)
    table = summary_markdown(stats, spec)
    assert table.count("| EDM(lr=") + table.count("| edm(lr=") == MOST_ROWS
    assert "edm(lr=0)" in table and "edm(lr=99)" not in table and "of 100 variants" in table


def _square_or_fail(x: int) -> tuple[int, int]:
    if x < 0:
        raise ValueError(f"negative: {x}")
    return x, x * x


def test_forked_map_keeps_the_order_and_raises_what_a_worker_raises():
    from decentopt.experiments.runner import forked_map

    pending = [(x,) for x in range(7)]
    serial = forked_map(1, _square_or_fail, pending)
    assert serial == [(x, x * x) for x in range(7)]
    assert forked_map(2, _square_or_fail, pending) == serial
    with pytest.raises(ValueError, match="negative: -1"):
        forked_map(2, _square_or_fail, [(3,), (-1,)])


def test_a_graph_is_built_once_for_the_same_table_and_afresh_for_another(cfg_path):
    spec = load_spec(cfg_path, overrides=["agents=9", "topology.name=torus"])
    first = spec.build_topology()
    assert spec.build_topology() is first  # frozen: checks, run and report share it
    other = load_spec(cfg_path, overrides=["topology.name=ring"]).build_topology()
    assert other is not first and other.name != first.name
    assert load_spec(cfg_path, overrides=["agents=16"]).build_topology().n == 16
