"""The cost of building a graph, estimated from its name and size before it is built,
against the memory that building it takes (peak resident memory of a fresh process over
what it held before): a dense ``W`` and an Erdős–Rényi graph through networkx."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from decentopt.topology.footprint import build_bytes

ROOT = Path(__file__).resolve().parents[2]

MEASURE = """
import json, resource, sys
import networkx  # loaded before the baseline: a library, not the graph
import decentopt as dopt
with open("/proc/self/statm") as f:
    before = int(f.read().split()[1]) * resource.getpagesize()
name, n, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
graph = dopt.topology.make(name, n, **options)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before)
"""


def measured(name: str, n: int, options: dict) -> float:
    path = str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, name, str(n), json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": path},
        check=True,
    )
    return float(done.stdout.split()[-1])


@pytest.mark.parametrize(
    ("name", "n", "options"),
    [("complete", 1500, {}), ("erdos_renyi", 3000, {"p": 0.02})],
)
def test_the_estimate_covers_building_the_graph_and_not_twice_over(name, n, options):
    """Measured here: complete(1500) 59 MB against 72 MB estimated (dense W, 32 n^2 bytes);
    erdos_renyi(3000, p=0.02) 39 MB against 57 MB (1,000 bytes per agent, 600 per link)."""
    used = measured(name, n, options)
    estimate = build_bytes(name, n, options)
    assert 0.5 <= used / estimate <= 1.25, (used, estimate)
