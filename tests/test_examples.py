"""The examples run as users run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def launch(*args: str, cwd: Path) -> str:
    command = [sys.executable, "-m", "decentopt", "launch", "-n", "2"]
    script = str(ROOT / "examples" / "train_dirichlet.py")
    done = subprocess.run(
        [*command, script, "--epochs", "1", "--checkpoints", str(cwd / "ck"), *args],
        capture_output=True, text=True, timeout=300, cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    return done.stdout


@pytest.mark.slow
def test_the_training_example_resumes_only_its_own_checkpoints(tmp_path):
    first = launch("--lr", "0.1", cwd=tmp_path)
    assert "epoch   1" in first and "resuming" not in first
    again = launch("--lr", "0.1", "--epochs", "1", cwd=tmp_path)
    assert "resuming from epoch 1" in again  # the same settings: nothing retrained
    other_lr = launch("--lr", "0.2", cwd=tmp_path)
    assert "resuming" not in other_lr and "epoch   1" in other_lr
    other_method = launch("--algorithm", "dsgd", cwd=tmp_path)
    assert "resuming" not in other_method and "epoch   1" in other_method
    assert len(list((tmp_path / "ck").iterdir())) == 3


def test_the_local_steps_example_counts_the_rounds_it_saves(tmp_path):
    """examples/local_steps.toml runs; local steps and K-GT/LED gossip every 4th step, and
    Gossip-PGA's averages are rounds of their own."""
    from decentopt.cli import main
    from decentopt.results import read_csv

    spec = Path(__file__).resolve().parents[1] / "examples" / "local_steps.toml"
    assert main(["run", str(spec), "--quick", "--out", str(tmp_path)]) == 0
    rows = read_csv(tmp_path / "results.csv")
    last = {r["algorithm"]: r for r in rows if int(r["step"]) == 400}
    assert last["dsgd"]["rounds"] == 400
    for name in ("dsgd_local4", "dsgt_local4", "k_gt", "led"):
        assert last[name]["rounds"] == 100
    assert last["dsgd_pga4"]["rounds"] == 400
    # 300 gossip rounds of 2 messages of 5 float64, 100 ring all-reduces over 16 agents:
    # 30 messages of ceil(40 / 16) bytes each
    assert last["dsgd_pga4"]["bytes_per_agent"] == 300 * 2 * 40 + 100 * 30 * 3
    assert last["led"]["dist_to_opt"] < 1e-3 < last["dsgd_local4"]["dist_to_opt"]


def test_the_outer_digits_example_compares_at_equal_bytes(tmp_path):
    """examples/outer_digits.toml runs; the outer optimizers' all-reduces every 4th step cost
    what local(4)'s gossip rounds do (30 messages of 1/16 of the model against 2 of it),
    a quarter of DSGD's."""
    from decentopt.cli import main
    from decentopt.results import read_csv

    spec = ROOT / "examples" / "outer_digits.toml"
    short = ["--set", "problem_params.epochs=2", "--set", "problem_params.milestones=[]"]
    assert main(["run", str(spec), "--quick", *short, "--out", str(tmp_path)]) == 0
    rows = read_csv(tmp_path / "results.csv")
    steps = max(int(r["step"]) for r in rows)
    last = {r["algorithm"]: r for r in rows if int(r["step"]) == steps}
    assert last["dsgd"]["rounds"] == steps and steps % 4 == 0
    for name in ("dsgd_local4", "diloco4", "average4"):
        assert last[name]["rounds"] == steps // 4
    gossip, reduce = last["dsgd_local4"]["bytes_per_agent"], last["diloco4"]["bytes_per_agent"]
    assert reduce == last["average4"]["bytes_per_agent"]
    assert reduce / gossip == pytest.approx(30 / 16 / 2, rel=1e-3)
    assert last["dsgd"]["bytes_per_agent"] == 4 * gossip
