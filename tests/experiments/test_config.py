from __future__ import annotations

from pathlib import Path

import pytest

from decentopt.experiments import PRESETS, ConfigError, load_config
from decentopt.experiments.config import parse_override

BASE = """
name = "tiny"
problem = "quadratic"
iterations = 50
repetitions = 2
[topology]
name = "ring"
n = 6
[problem_params]
d = 3
p = 4
[heterogeneity]
values = [1.0, 0.5]
[defaults]
lr = 0.05
beta = 0.8
[algorithms.ed]
[algorithms.edm]
[quick]
iterations = 10
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.toml"
    path.write_text(text)
    return path


def test_presets_load_and_follow_the_paper():
    assert {"fig1", "fig2"} <= set(PRESETS)
    fig1 = load_config("fig1")
    assert fig1.topology == {"name": "ring", "n": 32}
    assert fig1.repetitions == 20
    assert fig1.problem_params["sigma2"] == 0.05
    assert all(hp["lr"] == 0.05 for hp in fig1.algorithms.values())
    assert len(fig1.algorithms) == 8
    fig2 = load_config("fig2")
    assert fig2.problem_params["m"] == 2000 and fig2.problem_params["sigma_s2"] == 0.01
    assert all(hp["lr"] == 0.5 for hp in fig2.algorithms.values())
    assert set(fig2.algorithms) == {"dmsgd", "dsgt", "dsgt_hb", "ed", "edm"}


def test_presets_document_every_unsaid_choice():
    from decentopt.experiments.config import PRESET_DIR

    # identifiers and the tables whose header comment explains them need no per-line reason
    exempt_keys = {"name", "description", "problem"}
    exempt_tables = {"seeds", "quick", "quick.problem_params"}
    for name in PRESETS:
        table, previous = "", ""
        for line in (PRESET_DIR / f"{name}.toml").read_text().splitlines():
            body = line.split("#")[0].strip()
            if body.startswith("["):
                table = body.strip("[]")
            elif "=" in body and table not in exempt_tables:
                key = body.split("=")[0].strip()
                if key not in exempt_keys:
                    commented = "#" in line or previous.lstrip().startswith("#")
                    assert commented, f"{name}: '{body}' has no reason comment"
            previous = line


def test_defaults_apply_only_where_valid(tmp_path):
    cfg = load_config(write(tmp_path, BASE))
    assert cfg.algorithms["ed"] == {"lr": 0.05}
    assert cfg.algorithms["edm"] == {"lr": 0.05, "beta": 0.8}
    assert cfg.heterogeneity_param == "c"


def test_quick_and_overrides(tmp_path):
    path = write(tmp_path, BASE)
    assert load_config(path, quick=True).iterations == 10
    cfg = load_config(path, overrides=["iterations=7", "algorithms.edm.beta=0.95", "name=x"])
    assert cfg.iterations == 7 and cfg.algorithms["edm"]["beta"] == 0.95 and cfg.name == "x"
    assert parse_override("topology.name=star") == {"topology": {"name": "star"}}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(path, overrides=["iterations"])


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (("iterations = 50", "iteratons = 50"), "unknown key 'iteratons'"),
        (("iterations = 50", 'iterations = "many"'), "'iterations' must be a whole number"),
        (("iterations = 50", "iterations = 0"), "'iterations' must be >= 1"),
        (('problem = "quadratic"', 'problem = "lasso"'), "unknown problem 'lasso'"),
        (('name = "ring"', 'name = "mesh"'), "unknown topology 'mesh'"),
        (("p = 4", "q = 4"), r"\[problem_params\]: unknown key 'q'"),
        (("p = 4", "c = 4"), "set c in \\[heterogeneity\\]"),
        (("values = [1.0, 0.5]", "values = []"), "non-empty list"),
        (("[algorithms.ed]", "[algorithms.adam]"), "unknown algorithm 'adam'"),
        (("lr = 0.05", "lr = -1.0"), r"\[algorithms.ed\].*step size"),
        (("beta = 0.8", "beta = 1.5"), r"\[algorithms.edm\].*beta"),
        (("[quick]", "[quick]\nfoo = 1\n[seeds]\nshuffle = 3"), r"\[seeds\]: unknown key"),
        (("[algorithms.edm]", "[algorithms.edm]\nmomentum = 0.9"), "unknown hyper-parameter"),
        (("n = 6", "n = 6\nweight = 2"), r"\[topology\]: unknown key 'weight'"),
    ],
)
def test_bad_configs_name_the_problem(tmp_path, change, pattern):
    old, new = change
    assert old in BASE
    with pytest.raises(ConfigError, match=pattern):
        load_config(write(tmp_path, BASE.replace(old, new, 1)))


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="no configuration file"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "iterations = = 3"))
    with pytest.raises(ConfigError, match=r"needs a \[quick\] table"):
        load_config(write(tmp_path, BASE.replace("[quick]\niterations = 10", "")), quick=True)


def test_fingerprint_tracks_what_matters(tmp_path):
    path = write(tmp_path, BASE)
    a = load_config(path)
    b = load_config(path, overrides=["algorithms.edm.beta=0.9"])
    c = load_config(path, overrides=["threshold=1e-5"])
    assert a.fingerprint("ed") == b.fingerprint("ed")
    assert a.fingerprint("edm") != b.fingerprint("edm")
    assert a.fingerprint("edm") == c.fingerprint("edm")
