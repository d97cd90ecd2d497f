from __future__ import annotations

import pytest
import torch

from decentopt.cli import main
from decentopt.experiments import ConfigError, load_spec
from decentopt.experiments.sources import PAPER_PRESETS, PRESET_DIR, STUDIES, tomllib
from decentopt.experiments.study import load_study
from tests.experiments.test_spec import BASE, NEURAL, write

METHODS = load_study("methods").specs
COMPRESSION = load_study("compression").specs


def test_the_built_in_studies_are_study_files_whose_parts_load():
    assert set(STUDIES) == {"methods", "compression", "topologies", "table1", "stragglers", "local"}
    for name in STUDIES:
        study = load_study(name, quick=True)
        for part in study.specs:
            assert load_spec(study.spec_path(part), quick=True).algorithms
    assert load_study("table1", quick=True).seeds == 3 and load_study("table1").seeds == 5
    with pytest.raises(ConfigError, match="a study, not a run specification"):
        load_spec("methods")


def test_a_study_file_with_a_missing_part_or_a_bad_graph_is_refused_in_one_line(tmp_path):
    text = (PRESET_DIR / "topologies.toml").read_text()
    missing = write(tmp_path, text.replace('"topologies_logistic"', '"mine.toml"'), "a.toml")
    with pytest.raises(ConfigError, match=r"no specification 'mine.toml' beside the study"):
        load_study(missing)
    bad = write(tmp_path, text.replace('torus = {name = "torus"}', 'torus = "torus"'), "b.toml")
    with pytest.raises(ConfigError, match=r"\[graphs\] torus: give a \[topology\] table"):
        load_study(bad)
    wrong = write(tmp_path, text.replace('study = "graphs"', 'study = "graph"'), "c.toml")
    with pytest.raises(ConfigError, match="did you mean 'graphs'"):
        load_study(wrong)


@pytest.mark.parametrize("target", [*STUDIES, *PAPER_PRESETS])
def test_every_target_refuses_an_unknown_only_label_in_one_line_before_running(
    target, tmp_path, capsys
):
    out = tmp_path / "out"
    assert main(["reproduce", target, "--only", "nosuch", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--only" in err and not out.exists()
    if target != "table1":  # the scaling study has no labels at all, and says so
        assert "'nosuch'" in err and "choose one of: " in err


def test_a_study_refuses_jobs_below_one(tmp_path, capsys):
    assert main(["reproduce", "compression", "--jobs", "0", "--out", str(tmp_path / "o")]) == 2
    assert "--jobs must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("name", METHODS)
def test_methods_presets_compare_the_same_grid_and_name_real_variants(name):
    spec = load_spec(name, quick=True)
    methods = {v.method for v in spec.algorithms.values()}
    exact = {"edm", "extra", "nids", "mt", "ed", "dsgt_hb"}
    beyond = {"push_diging", "relaysgd"}  # on a directed graph and on a chain
    assert methods == exact | (beyond if spec.panel else set())
    assert len(spec.algorithms) == 3 * len(methods)  # three step sizes each
    for label, variant in spec.algorithms.items():
        own = {"push_diging": "directed_one_peer_exponential", "relaysgd": "chain"}
        assert spec.topology_of(label)["name"] == own.get(variant.method, "ring")
    for claim in spec.claims:  # a typo would silently leave a claim unmeasurable
        for label in [w.strip('",.[]') for w in claim.test.split() if "(lr=" in w]:
            assert label in spec.algorithms, (name, label)


@pytest.mark.parametrize("name", COMPRESSION)
def test_compression_presets_name_real_variants_and_compress_tenfold_and_hundredfold(name):
    spec = load_spec(name, quick=True)
    ratios = {v.hyperparams.get("compression") for v in spec.algorithms.values()}
    assert {"top_k(0.1)", "top_k(0.01)"} <= ratios  # ratios 1/10 and 1/100; 1: the rest
    assert spec.params.d == 100  # a ratio of 1/100 keeps one entry
    for label, variant in spec.algorithms.items():
        directed = variant.method in ("sgp", "push_diging")
        assert ("symmetric" not in spec.build_topology(label).offers) == directed
    raw = tomllib.loads((PRESET_DIR / f"{name}.toml").read_text())
    for table in raw["claims"]:  # a typo would silently leave a claim unmeasurable
        named = [table.get("algorithm"), *table.get("others", []), *table.get("algorithms", [])]
        assert {n for n in named if n} <= set(spec.algorithms), (name, table["text"])
    assert len(spec.claims) == len(raw["claims"]) >= 4


@pytest.mark.slow
def test_a_copied_methods_study_reports_tuned_steps_rounds_and_claims(tmp_path, capsys):
    grid = "[defaults]\nlr = [0.05, 0.1]\nbeta = 0.8\n[algorithms.edm]\n[algorithms.dsgt_hb]\n"
    convex = BASE.split("[defaults]")[0] + grid
    convex += '[[claims]]\ntext = "x"\ncheck = "steady_not_above"\nalgorithm = "edm(lr=0.05)"\n'
    convex += 'others = ["dsgt_hb(lr=0.05)"]\n'
    neural = NEURAL.split("[defaults]")[0].replace("milestones = [2]\n", "") + grid
    write(tmp_path, convex, "a.toml"), write(tmp_path, neural, "b.toml")
    copy = (
        (PRESET_DIR / "methods.toml")
        .read_text()
        .replace("specs = [", 'specs = ["a.toml", "b.toml"]  # [')
    )
    study = write(tmp_path, copy, "study.toml")
    torch.set_default_dtype(torch.float32)
    try:
        out = tmp_path / "study"
        assert main(["run", str(study), "--check", "--out", str(out), "--no-progress"]) == 0
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


@pytest.mark.slow
def test_a_copied_compression_study_draws_errors_against_bytes_and_judges_claims(tmp_path):
    body = BASE.split("[defaults]")[0].replace("d = 3", "d = 20")
    body += "[defaults]\nlr = 0.05\n[algorithms.dsgd]\n"
    body += '[algorithms.choco]\nmethod = "choco_dsgd"\ncompression = "top_k(0.1)"\n'
    body += 'gamma = 0.3\n[algorithms.sgp]\nbeta = 0.0\ntopology = "directed_ring"\n'
    body += '[[claims]]\ntext = "x"\ncheck = "fewer_bytes"\nalgorithm = "choco"\n'
    body += 'others = ["dsgd"]\nthreshold = 10.0\n'
    write(tmp_path, body, "c.toml")
    copy = (PRESET_DIR / "compression.toml").read_text()
    study = write(tmp_path, copy.replace("specs = [", 'specs = ["c.toml"]  # ['), "s.toml")
    out = tmp_path / "study"
    assert main(["run", str(study), "--check", "--out", str(out), "--no-progress"]) == 0
    text = (out / "summary.md").read_text()
    assert "bytes per iteration" in text and "## Claims" in text
    assert "sends fewer bytes per agent than DSGD" in text
    assert (out / "tiny" / "tiny.png").is_file()


@pytest.mark.parametrize("option", [["--check"], ["--set", "seeds=2"]])
def test_table1_refuses_what_it_would_ignore_before_it_runs(tmp_path, capsys, monkeypatch, option):
    def measured(**_):
        raise AssertionError("the study ran")

    monkeypatch.setattr("decentopt.experiments.scaling.run_scaling", measured)
    out = tmp_path / "out"
    assert main(["reproduce", "table1", "--quick", *option, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {option[0]}: table1" in err and not out.exists()


def test_a_grids_label_selects_every_member_in_a_study(tmp_path):
    from decentopt.experiments.study import Request, load_study

    study = load_study("methods", quick=True)
    whole = study.parts(Request(quick=True))
    member = next(k for k in whole[0].algorithms if k.startswith("ed("))
    parts = study.parts(Request(quick=True, only=("edm", member)))
    assert len(parts) == len(whole)
    for spec, full in zip(parts, whole, strict=True):
        edm = [k for k in full.algorithms if k.startswith("edm(")]
        assert len(edm) == 3  # the grid of three step sizes, each part its own
        assert list(spec.algorithms) == [*edm, *([member] if member in full.algorithms else [])]
    assert member in parts[0].algorithms
