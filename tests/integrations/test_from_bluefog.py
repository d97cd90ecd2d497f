"""The BlueFog page's converted script runs under ``decentopt launch -n 2``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.test_docs import ROOT, snippets

PAGE = ROOT / "docs" / "from-bluefog.md"


def test_the_page_has_one_script_converted_line_by_line():
    (script,) = snippets(PAGE)
    replaced = [line for line in script.splitlines() if "# bf." in line or "bf.init()" in line]
    assert len(replaced) >= 6  # each BlueFog call beside the line that replaces it


@pytest.mark.slow  # two processes
def test_the_converted_script_runs_on_two_processes(tmp_path):
    (script,) = snippets(PAGE)
    path = tmp_path / "converted.py"
    path.write_text(script)
    command = [sys.executable, "-m", "decentopt", "launch", "-n", "2", str(path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "step 24/24" in out and "steps/s" in out  # rank 0's progress line
    gap = float(out.split("distance to the agents' average: ")[1].split()[0])
    assert gap < 1e-5  # a ring of two averages fully: the last round leaves one point
