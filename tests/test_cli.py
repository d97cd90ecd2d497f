from __future__ import annotations

import numpy as np

from decentopt.cli import main


def test_topology_command(capsys):
    assert main(["topology", "ring", "--n", "32", "--L", "2", "--beta", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "0.990393" in out and "holds" in out
    # Theorem 1: min((1 - sqrt(0.990393)) / 8, 0.1 / 8)
    assert f"{(1 - 0.990393**0.5) / 8:.4g}"[:5] in out


def test_topology_command_reports_a_violation(tmp_path, capsys):
    path = tmp_path / "w.npy"
    np.save(path, np.array([[0.0, 1.0], [1.0, 0.0]]))
    assert main(["topology", "matrix", "--matrix", str(path)]) == 1
    assert "Assumption 1(1) fails" in capsys.readouterr().out
    assert main(["topology", "ring"]) == 2
    assert "--n" in capsys.readouterr().err


def test_compare_command(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--n", "8", "--iterations", "50", "--repetitions", "2", "--out", str(out)]
    assert main([*args, "--algorithms", "ed,edm"]) == 0
    text = capsys.readouterr().out
    assert "| EDM |" in text and (out / "compare.png").is_file()
    assert main([*args, "--algorithms", "adam"]) == 2
    assert main([*args, "--algorithms", "edm", "--topology", "exponential"]) == 0
    assert "exponential(8)" in capsys.readouterr().out
