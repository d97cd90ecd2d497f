"""Start-up of a rank: a port that is taken, or that answers nothing, is a clear error within
the timeout."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # each test starts a rank process

START = """
import time
import decentopt.distributed as d
start = time.monotonic()
try:
    d.init(timeout=4)
except Exception as exc:
    print(type(exc).__name__, exc)
print(f"after {time.monotonic() - start:.1f}")
"""


def start_rank(rank: int, port: int) -> str:
    env = os.environ | {
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    done = subprocess.run(
        [sys.executable, "-c", START], env=env, capture_output=True, text=True, timeout=120
    )
    return done.stdout


def test_a_silent_listener_on_the_port_fails_a_rank_within_its_timeout():
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)
        out = start_rank(1, listener.getsockname()[1])
    assert "PeerFailure" in out and "no answer from 127.0.0.1" in out, out
    assert "set MASTER_PORT to a free port" in out
    assert float(out.split("after")[1]) < 1.5 * 4 + 3  # about the timeout, not minutes


def test_a_port_in_use_is_named_as_such():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(5)
        port = taken.getsockname()[1]
        out = start_rank(0, port)
    assert f"port {port} is in use by another program" in out, out
    assert "within 0.0 s" not in out


SMALL = """
name = "d2"
problem = "neural"
agents = 2
runs = 1
timeout = 20
[problem_params]
dataset = "digits"
model = "small_cnn"
phi = 0.5
batch_size = 16
epochs = 2
milestones = []
backend = "loop"
[topology]
name = "ring"
[algorithms.edm]
lr = 0.1
beta = 0.9
"""

#: a rank that kills itself (SIGKILL) during gossip round 5, then runs the CLI as asked
DIES = """
import os, signal, sys
from decentopt.comm.distributed import DistributedCommunicator
if os.environ["RANK"] == "1":
    mix = DistributedCommunicator.mix
    def dying(self, *args, **kwargs):
        if self.stats.rounds == 5:
            os.kill(os.getpid(), signal.SIGKILL)
        return mix(self, *args, **kwargs)
    DistributedCommunicator.mix = dying
from decentopt.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_rank_ends_the_launch_with_137_and_no_traceback(tmp_path):
    (tmp_path / "d2.toml").write_text(SMALL)
    (tmp_path / "dies.py").write_text(DIES)
    command = [sys.executable, "-m", "decentopt", "launch", "-n", "2", "--grace", "2"]
    command += [str(tmp_path / "dies.py"), "run", str(tmp_path / "d2.toml")]
    command += ["--out", str(tmp_path / "out"), "--no-progress"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 137, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert all("rank 0" in line and "neighbour 1" in line for line in errors), errors


def test_a_port_in_use_is_one_line_from_the_cli(tmp_path):
    (tmp_path / "d2.toml").write_text(SMALL)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(5)
        port = taken.getsockname()[1]
        env = os.environ | {
            "RANK": "0",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        command = [sys.executable, "-m", "decentopt", "run", str(tmp_path / "d2.toml")]
        command += ["--out", str(tmp_path / "out"), "--no-progress"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().startswith("error:") and len(done.stderr.strip().splitlines()) == 1
    assert f"port {port} is in use" in done.stderr
