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
