"""Files the earlier releases wrote still load, and resume to the same numbers.

The files in ``data/`` were written by ``make_data.py`` with an earlier version (see its
docstring); this module never rewrites them.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from decentopt.cli import main as cli
from decentopt.results import read_csv
from tests.compat import make_data

DATA = make_data.DATA


@pytest.mark.parametrize("name", list(make_data.RUNS))
def test_a_checkpoint_of_the_earlier_release_resumes_to_the_state_it_reached(name, tmp_path):
    folder = tmp_path / name
    shutil.copytree(DATA / "checkpoints" / name, folder)
    result = make_data.run(name, folder, None)
    assert result.resumed_from == make_data.STOP  # the old checkpoint was read, not skipped
    expected = torch.load(folder / "final.pt", weights_only=True)
    state = result.final_state
    assert set(expected) == set(state.tensors()) | {"t"}
    for key, value in state.tensors().items():
        torch.testing.assert_close(value, expected[key], rtol=0, atol=0, msg=key)
    assert state.t == expected["t"] == make_data.ITERATIONS


@pytest.mark.parametrize("name", list(make_data.OPTIMIZERS))
def test_an_optimizer_state_dict_of_the_earlier_release_loads_and_steps_as_it_did(name):
    saved = torch.load(DATA / "optimizer" / f"{name}.pt", weights_only=True)
    model, x, y = make_data.model_and_data()
    model.load_state_dict(saved["model"])
    opt = make_data.optimizer(name, model)
    opt.load_state_dict(saved["optimizer"])
    make_data.train(opt, model, x, y, 2)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, saved["after"][key], rtol=0, atol=0, msg=key)


def test_a_result_folder_of_the_earlier_release_is_kept_not_computed_again(tmp_path, capsys):
    out = tmp_path / "store"
    shutil.copytree(DATA / "store", out)
    before = read_csv(out / "results.csv")
    spec = str(make_data.HERE / "store.toml")
    assert cli(["run", spec, "--out", str(out), "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert "5 unit(s) computed" not in said and "0 unit(s) computed, 5 resumed" in said
    assert read_csv(out / "results.csv") == before
