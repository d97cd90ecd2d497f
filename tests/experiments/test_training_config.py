from __future__ import annotations

import pytest
import torch

from decentopt.cli import main
from decentopt.experiments import ConfigError, load_config
from decentopt.experiments.training_config import TrainingConfig

TINY = """
name = "tiny-train"
problem = "neural"
dataset = "digits"
model = "small_cnn"
agents = 4
phi = 0.5
batch_size = 16
epochs = 3
milestones = [2]
eval_every = 1
runs = 1
backend = "loop"
[topology]
name = "ring"
[defaults]
lr = 0.1
beta = 0.9
[algorithms.ed]
[algorithms.edm]
"""


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(TINY)
    return path


def test_paper_presets_are_sized_as_the_paper():
    for name, phi, milestones in (("fig3", 1.0, (60, 80)), ("fig4", 0.1, (150, 180))):
        cfg = load_config(name)
        assert isinstance(cfg, TrainingConfig)
        assert (cfg.dataset, cfg.model, cfg.agents, cfg.batch_size) == ("cifar10", "vgg11", 16, 32)
        assert cfg.phi == phi and cfg.milestones == milestones and cfg.runs == 3
        assert all(hp["lr"] == 0.1 for hp in cfg.algorithms.values())
        quick = load_config(name, quick=True)
        assert (quick.dataset, quick.model, quick.device) == ("digits", "small_cnn", "cpu")


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (('dataset = "digits"', 'dataset = "mnist"'), "unknown dataset"),
        (('dataset = "digits"', 'dataset = "cifar10"'), "needs data_dir"),
        (('model = "small_cnn"', 'model = "resnet"'), "unknown model"),
        (("milestones = [2]", "milestones = [5]"), "milestones"),
        (("phi = 0.5", "phi = 0.0"), "'phi' must be > 0"),
        (('name = "ring"', 'name = "ring"\nn = 4'), "top-level 'agents'"),
        (("runs = 1", "rounds = 1"), "unknown key 'rounds'"),
    ],
)
def test_bad_training_configs(tmp_path, change, pattern):
    path = tmp_path / "bad.toml"
    path.write_text(TINY.replace(*change))
    with pytest.raises(ConfigError, match=pattern):
        load_config(path)


def test_missing_cifar_folder_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text(TINY.replace('dataset = "digits"', 'dataset = "cifar10"\ndata_dir = "nope"'))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "CIFAR-10 not found in nope" in capsys.readouterr().err


def test_cli_trains_resumes_and_reports(tiny, tmp_path, capsys):
    torch.set_default_dtype(torch.float32)
    try:
        out = tmp_path / "o"
        assert main(["run", str(tiny), "--out", str(out), "--no-progress"]) == 0
        text = capsys.readouterr().out
        assert "| EDM |" in text and (out / "tiny-train.png").is_file()
        assert list((out / "runs" / "edm-run0").glob("step-*/rank0.pt"))
        assert main(["run", str(tiny), "--out", str(out), "--no-progress"]) == 0
        assert "run 0:" not in capsys.readouterr().out  # nothing retrained
    finally:
        torch.set_default_dtype(torch.float64)
