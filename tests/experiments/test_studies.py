from __future__ import annotations

import pytest
import torch

from decentopt.cli import main
from decentopt.experiments import load_spec, studies
from tests.experiments.test_spec import BASE, NEURAL, write


@pytest.mark.parametrize("name", studies.METHODS)
def test_methods_presets_compare_the_same_grid_and_name_real_variants(name):
    spec = load_spec(name, quick=True)
    methods = {v.method for v in spec.algorithms.values()}
    assert methods == {"edm", "extra", "nids", "mt", "ed", "dsgt_hb"}
    assert len(spec.algorithms) == 3 * len(methods)  # three step sizes each
    for claim in spec.claims:  # a typo would silently leave a claim unmeasurable
        for label in [w.strip('",.[]') for w in claim.test.split() if "(lr=" in w]:
            assert label in spec.algorithms, (name, label)


@pytest.mark.slow
def test_methods_study_reports_tuned_steps_rounds_and_claims(tmp_path, monkeypatch, capsys):
    grid = "[defaults]\nlr = [0.05, 0.1]\nbeta = 0.8\n[algorithms.edm]\n[algorithms.dsgt_hb]\n"
    convex = BASE.split("[defaults]")[0] + grid
    convex += '[[claims]]\ntext = "x"\ncheck = "steady_not_above"\nalgorithm = "edm(lr=0.05)"\n'
    convex += 'others = ["dsgt_hb(lr=0.05)"]\n'
    neural = NEURAL.split("[defaults]")[0].replace("milestones = [2]\n", "") + grid
    specs = (str(write(tmp_path, convex, "a.toml")), str(write(tmp_path, neural, "b.toml")))
    monkeypatch.setattr(studies, "METHODS", specs)
    torch.set_default_dtype(torch.float32)
    try:
        out = tmp_path / "study"
        assert main(["reproduce", "methods", "--check", "--out", str(out), "--no-progress"]) == 0
    finally:
        torch.set_default_dtype(torch.float64)
    text = (out / "summary.md").read_text()
    assert "Best step size of the grid" in text and "iterations / gossip rounds" in text
    assert "## Claims" in text and "1 of 1 claims" in capsys.readouterr().out
    assert (out / "tiny_rounds.png").is_file() and (out / "tiny-train" / "results.csv").is_file()
    # DSGT-HB gossips twice per iteration: its rounds column says so
    rows = (out / "tiny" / "results.csv").read_text().splitlines()
    header = rows[0].split(",")
    last = [dict(zip(header, r.split(","), strict=True)) for r in rows[1:]][-1]
    assert last["algorithm"].startswith("dsgt_hb") and int(last["rounds"]) == 2 * 50 - 1
