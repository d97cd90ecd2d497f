"""The monitor: rank 0 logs the agents' mean and every rank's scalars; a progress line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from decentopt.integrations.loggers.jsonl import read_jsonl
from decentopt.integrations.monitor import Monitor
from tests.integrations import readers

WORKER = Path(__file__).with_name("monitor_worker.py")


def test_one_process_logs_every_log_every_steps_and_the_last(tmp_path):
    lines: list[str] = []
    monitor = Monitor([f"jsonl:{tmp_path}"], log_every=3, total=7, name="m", say=lines.append)
    for t in range(1, 8):
        monitor.step(loss=float(t))
    monitor.close()
    logged = [e for e in read_jsonl(tmp_path / "m.jsonl") if e["event"] == "scalars"]
    assert [e["step"] for e in logged] == [3, 6, 7]
    assert [e["values"] for e in logged] == [
        {"mean/loss": t, "rank0/loss": t} for t in (3.0, 6.0, 7.0)
    ]
    assert [line.split("  ")[0] for line in lines] == ["step 3/7", "step 6/7", "step 7/7"]
    with pytest.raises(ValueError, match="log_every must be a positive number"):
        Monitor(log_every=0)


@pytest.mark.slow  # two processes
def test_two_gloo_ranks_log_their_mean_and_each_ranks_scalars_on_rank_0(tmp_path):
    command = [sys.executable, "-m", "decentopt", "launch", "-n", "2", str(WORKER), str(tmp_path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0][-1]["loss"] != ranks[1][-1]["loss"]  # the agents' data differ
    lines = read_jsonl(tmp_path / "lines" / "edm.jsonl")
    logged = {e["step"]: e["values"] for e in lines if e["event"] == "scalars"}
    assert sorted(logged) == [4, 8, 10]
    board = readers.tensorboard_scalars(tmp_path / "tb" / "edm")
    for step, values in logged.items():
        for name in ("loss", "norm"):
            own = [ranks[r][step - 1][name] for r in range(2)]
            assert [values[f"rank{r}/{name}"] for r in range(2)] == own
            assert values[f"mean/{name}"] == pytest.approx(np.mean(own), rel=1e-15)
            tb = dict(board[f"mean/{name}"])
            assert tb[step] == pytest.approx(np.mean(own), rel=1e-6)
    progress = (tmp_path / "progress-rank0.txt").read_text().splitlines()
    assert [line.split("  ")[0] for line in progress] == ["step 4/10", "step 8/10", "step 10/10"]
    assert all("steps/s" in line for line in progress)
    assert not (tmp_path / "progress-rank1.txt").exists()  # rank 0 alone reports
    assert not (tmp_path / "lines" / "rank1").exists()
