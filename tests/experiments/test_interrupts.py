"""Killed sweeps and launchers: finished units stay on disk, no child process runs on."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.experiments.test_spec import BASE, write

pytestmark = pytest.mark.slow  # each test starts and kills several processes


def children(pid: int) -> set[int]:
    """The processes ``pid`` started (Linux /proc)."""
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        text = (task / "children").read_text() if (task / "children").exists() else ""
        found |= {int(p) for p in text.split()}
    return found


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status  # a zombie has ended


def gone_within(pids: set[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_parallel_sweep_keeps_every_finished_unit(tmp_path):
    """--jobs 2: each unit is stored when its worker returns it, so a kill -9 after
    "done (k/N)" leaves k units on disk; the workers end with their parent."""
    spec = BASE.replace("iterations = 50", "iterations = 40000")
    for name in ("dsgd", "dmsgd", "decentlam", "dsgt"):
        spec += f"[algorithms.{name}]\n"
    path = write(tmp_path, spec)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "decentopt", "run", str(path), "--out", str(out)]
    proc = subprocess.Popen(
        [*command, "--jobs", "2", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    done = 0
    deadline = time.monotonic() + 240
    assert proc.stdout is not None
    for line in proc.stdout:
        if " done (" in line:
            done = int(line.split(" done (")[1].split("/")[0])
            if done >= 2:
                break
        assert time.monotonic() < deadline, "the sweep did not finish two units in time"
    workers = children(proc.pid)
    assert workers, "no worker processes"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stored = [p for p in (out / "runs").iterdir() if (p / "meta.json").is_file()]
    assert len(stored) >= done >= 2
    assert gone_within(workers, 10), "workers ran on after their parent was killed"
    # a rerun keeps them and computes only the rest
    rerun = subprocess.run(
        [*command, "--jobs", "1", "--no-progress"], capture_output=True, text=True
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"{len(stored)} finished unit(s) kept" in rerun.stdout


SLEEPER = """
import os, sys, time
from pathlib import Path
Path(sys.argv[1], os.environ["RANK"]).write_text(str(os.getpid()))
time.sleep(120)
"""


def start_launcher(tmp_path: Path) -> tuple[subprocess.Popen, set[int]]:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    pids = tmp_path / "pids"
    pids.mkdir()
    launcher = subprocess.Popen(
        [sys.executable, "-m", "decentopt", "launch", "-n", "2", "--grace", "1", str(script),
         str(pids)],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while len(list(pids.iterdir())) < 2:
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.1)
    time.sleep(0.2)  # both have written their pid completely
    return launcher, {int(p.read_text()) for p in pids.iterdir()}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_ranks_end_with_their_launcher(tmp_path, how):
    launcher, ranks = start_launcher(tmp_path)
    launcher.send_signal(how)
    code = launcher.wait(timeout=30)
    assert gone_within(ranks, 10), f"ranks {ranks} ran on after the launcher got {how.name}"
    if how == signal.SIGTERM:  # stopped in order: it says so and exits 128 + 15
        assert code == 128 + signal.SIGTERM
        assert "every rank was stopped" in launcher.stderr.read()
