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
