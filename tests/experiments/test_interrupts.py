"""Killed sweeps and launchers: finished units stay on disk, no child process runs on."""

from __future__ import annotations

import json
import os
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


def _lines_until(proc: subprocess.Popen, marker: str, seconds: float) -> list[str]:
    """The lines ``proc`` prints up to the first one holding ``marker``."""
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if marker in line:
            return lines
        assert time.monotonic() < deadline, f"no {marker!r} in time: {lines}"
    raise AssertionError(f"the sweep ended before {marker!r}: {lines}")


def _ctrl_c(proc: subprocess.Popen) -> float:
    """Ctrl-C as a terminal sends it (to the whole process group); seconds until it ended."""
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    return time.monotonic() - start


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_keeps_finished_units_exits_at_once_and_the_rerun_says_what_it_keeps(tmp_path):
    """--jobs 2, Ctrl-C while both workers are early in long units: the sweep ends at once
    (never waits for the running units), every finished unit is on disk, no worker runs
    on, and a rerun says before it computes anything which units it keeps."""
    spec = BASE.replace("iterations = 50", "iterations = 80000")
    for name in ("dsgd", "dmsgd", "decentlam", "dsgt"):
        spec += f"[algorithms.{name}]\n"
    path = write(tmp_path, spec)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "decentopt", "run", str(path), "--out", str(out)]
    command += ["--jobs", "2", "--no-progress"]
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen(command, start_new_session=True, **options)
    lines = _lines_until(proc, "done (2/6)", 300)
    workers = children(proc.pid)
    time.sleep(1.0)  # both workers are a second into their next units
    took = _ctrl_c(proc)
    assert proc.returncode == 130 and "interrupted" in proc.stderr.read()
    assert took < 3.0, f"the sweep took {took:.1f} s to stop after Ctrl-C"
    assert gone_within(workers, 5), "workers ran on after Ctrl-C"
    finished = {line.split()[0] for line in lines if " done (" in line}
    stored = {p.name for p in (out / "runs").iterdir() if (p / "meta.json").is_file()}
    assert finished <= stored and len(stored) >= 2
    rerun = subprocess.Popen(command, start_new_session=True, **options)
    first = _lines_until(rerun, "resuming", 120)
    assert not any(" done (" in line for line in first)  # said before anything is computed
    assert f"{len(stored)} finished unit(s) kept" in first[-1]
    assert f"{6 - len(stored)} to compute" in first[-1]
    assert _ctrl_c(rerun) < 3.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_worker_killed_from_outside_costs_only_its_unit(tmp_path, how):
    """One --jobs worker killed mid-unit: one line names its unit, which is computed again;
    the sweep finishes with every unit."""
    spec = BASE.replace("iterations = 50", "iterations = 20000")
    for name in ("dsgd", "dmsgd", "decentlam", "dsgt"):
        spec += f"[algorithms.{name}]\n"
    path = write(tmp_path, spec)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "decentopt", "run", str(path), "--out", str(out)]
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen([*command, "--jobs", "2", "--no-progress"], **options)
    deadline = time.monotonic() + 300
    while not (leases := list(out.glob("runs/*/lease"))):  # a worker holds a unit
        assert time.monotonic() < deadline and proc.poll() is None, "no unit started"
        time.sleep(0.05)
    unit = leases[0].parent.name
    os.kill(json.loads(leases[0].read_text())["pid"], how)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    died = [line for line in stdout.splitlines() if "died" in line]
    assert len(died) == 1 and died[0].split()[0] == unit, stdout
    assert f"killed by {how.name}" in died[0] and "computing it again" in died[0]
    stored = [p for p in (out / "runs").iterdir() if (p / "meta.json").is_file()]
    assert len(stored) == 6 and "6 unit(s) computed" in stdout


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
