"""Per-rank checkpoints: nothing is loaded that could run code or that lacks its manifest,
and a failed write names its path."""

from __future__ import annotations

import hashlib
import json
import os
import warnings

import pytest
import torch

import decentopt as dopt
from decentopt.cli import main
from decentopt.comm import SimulatedCommunicator
from decentopt.distributed import checkpoint
from decentopt.distributed.checkpoint import load_latest, save_checkpoint
from decentopt.driver import RunOptions, run_loop
from decentopt.plan import Plan


def planted(marker: str):
    """An object whose unpickling runs a shell command (what a hostile file would hold)."""

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    return Payload()


def write_step(root, step: int, payload: object, manifest: bool = True) -> None:
    folder = root / f"step-{step:08d}"
    folder.mkdir(parents=True)
    data = folder / "rank0.pt"
    torch.save(payload, data)
    if manifest:
        digest = hashlib.sha256(data.read_bytes()).hexdigest()
        record = {"file": data.name, "bytes": data.stat().st_size, "sha256": digest}
        (folder / "rank0.json").write_text(json.dumps(record))
    (folder / "COMPLETE").touch()


def test_a_planted_pickle_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    write_step(tmp_path / "ck", 10, {"state": planted(str(marker))})
    with pytest.warns(RuntimeWarning, match="cannot be read"):
        assert load_latest(tmp_path / "ck") is None
    assert not marker.exists()


def test_a_checkpoint_without_its_manifest_is_not_loaded(tmp_path):
    write_step(tmp_path / "ck", 10, {"step": 10}, manifest=False)
    with pytest.warns(RuntimeWarning, match="has no manifest"):
        assert load_latest(tmp_path / "ck") is None


def test_a_run_resumes_from_plain_data_only(tmp_path):
    """What the loop writes loads with weights_only=True: an interrupted run resumes."""
    prob = dopt.problems.Quadratic.paper(n=4, d=2, p=3, sigma2=0.1, repetitions=2, seed=0)
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    plan = Plan(20, (0, 10, 20), period=5)

    def run(**kw):
        comm = SimulatedCommunicator(dopt.topology.ring(4))
        grad = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731
        return run_loop(alg, prob, comm, plan, RunOptions(log=lambda _: None, **kw), gradient=grad)

    full = run()
    run(checkpoint_dir=tmp_path, stop_after=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing falls back: the newest checkpoint loads
        resumed = run(checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 10
    assert torch.equal(resumed.final_state.x, full.final_state.x)


def test_a_full_disk_while_a_checkpoint_is_written_names_the_path(tmp_path, monkeypatch):
    def full_disk(obj, path, *args, **kwargs):
        raise RuntimeError(
            "[enforce fail at inline_container.cc:626] . PytorchStreamWriter failed writing "
            "file data/0: file write failed"
        )

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError, match="writing a checkpoint failed") as info:
        save_checkpoint(tmp_path, 3, {"x": torch.ones(2)})
    assert info.value.filename == str(tmp_path / "step-00000003" / "rank0.pt")
    assert not list((tmp_path / "step-00000003").glob(".*.tmp"))  # no temporary left


def test_the_cli_reports_a_failed_checkpoint_in_one_line(tmp_path, monkeypatch, capsys):
    from tests.experiments.test_spec import NEURAL, write

    def full_disk(obj, path, *args, **kwargs):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    path = write(tmp_path, NEURAL)
    code = main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "writing a checkpoint failed" in err and "rank0.pt" in err
    assert "Traceback" not in err


def test_a_manifest_nested_too_deeply_is_a_damaged_checkpoint(tmp_path):
    from decentopt.distributed.checkpoint import load_latest, save_checkpoint

    save_checkpoint(tmp_path, 1, {"x": torch.ones(2)})
    save_checkpoint(tmp_path, 2, {"x": torch.zeros(2)})
    (tmp_path / "step-00000002" / "rank0.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.warns(RuntimeWarning, match=r"rank0.json is damaged .*nested too deeply"):
        step, payload = load_latest(tmp_path)
    assert step == 1 and torch.equal(payload["x"], torch.ones(2))


def test_the_manifest_digest_is_that_of_the_bytes_on_disk(tmp_path):
    """The SHA-256 is taken while writing (no second read): it must equal the file's."""
    payload = {"x": torch.randn(3, 1000), "step": 7, "nested": {"m": torch.arange(50)}}
    save_checkpoint(tmp_path, 7, payload)
    folder = tmp_path / "step-00000007"
    manifest = json.loads((folder / "rank0.json").read_text())
    on_disk = (folder / "rank0.pt").read_bytes()
    assert manifest["sha256"] == hashlib.sha256(on_disk).hexdigest()
    assert manifest["bytes"] == len(on_disk)
    assert torch.equal(checkpoint.load_checkpoint(tmp_path, 7)["x"], payload["x"])
