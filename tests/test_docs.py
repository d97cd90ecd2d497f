"""Every Python snippet in README.md and docs/*.md runs, so none can drift from the code.

The snippets of one file run in order in one fresh process (later snippets may
use names defined by earlier ones), as a single-process torch.distributed job
so that the distributed examples run too.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def snippets(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text())


def test_every_doc_with_code_is_collected():
    names = {p.name for p in DOCS if snippets(p)}
    assert {"README.md", "problems.md", "distributed.md", "theory.md"} <= names


#: Docs whose snippets run for more than ~10 s (whole studies): in the slow step.
LONG = {"problems.md"}


@pytest.mark.parametrize(
    "doc",
    [pytest.param(p, marks=pytest.mark.slow) if p.name in LONG else p for p in DOCS if snippets(p)],
    ids=lambda p: p.name,
)
def test_snippets_run(doc, tmp_path):
    code = "\n\n".join(snippets(doc))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"{doc.name}:\n{proc.stderr[-3000:]}"


TOML = re.compile(r"^```toml\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_specification_examples_are_valid(doc, tmp_path):
    """Every TOML example that is a whole specification loads as written."""
    from decentopt.experiments import load_spec

    for k, text in enumerate(TOML.findall(doc.read_text())):
        if "problem =" in text:
            path = tmp_path / f"example{k}.toml"
            path.write_text(text)
            load_spec(path)


def test_the_distributed_guide_gives_wrap_every_method_it_takes():
    """``wrap`` takes any method whose gradient is a step direction, composed ones too: the
    guide says so, not an older list of three."""
    text = (ROOT / "docs" / "distributed.md").read_text()
    assert '"dsgd" | "ed" | "edm"' not in text
    assert "any registered method" in text and 'gossip="choco(qsgd(4))"' in text
