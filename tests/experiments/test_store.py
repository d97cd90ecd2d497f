from __future__ import annotations

import json

import pytest

from decentopt.experiments.store import ResultStore, Unit


def compute_counting(calls: list[str], value: float = 1.0):
    def compute(folder):
        calls.append(folder.name)
        (folder / "checkpoint").write_text("state")  # what a long run leaves behind
        return [{"step": 0, "x": value}, {"step": 1, "x": value / 2}], {"seconds": 0.1}

    return compute


def _edited_with_checksum(folder, table: str) -> None:
    """A table edited by hand, its checksum recomputed to match."""
    import hashlib

    (folder / "rows.csv").write_text(table)
    meta = json.loads((folder / "meta.json").read_text())
    meta["sha256"] = hashlib.sha256((folder / "rows.csv").read_bytes()).hexdigest()
    (folder / "meta.json").write_text(json.dumps(meta))


def test_cached_computes_once_and_records_its_facts(tmp_path):
    store, calls = ResultStore(tmp_path), []
    rows = store.cached(Unit("a", "f1", {"algorithm": "a"}), compute_counting(calls))
    again = ResultStore(tmp_path).cached(Unit("a", "f1"), compute_counting(calls))
    assert calls == ["a"] and rows == again
    meta = json.loads((tmp_path / "a" / "meta.json").read_text())
    assert meta["fingerprint"] == "f1" and meta["rows"] == 2 and meta["seconds"] == 0.1
    assert meta["algorithm"] == "a" and len(meta["sha256"]) == 64


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: (d / "rows.csv").write_text("step,x\n0,1.0\n"),  # truncated table
        lambda d: (d / "rows.csv").write_text("step,x\n0,1.0\n1,0.25\n"),  # edited value
        lambda d: (d / "rows.csv").unlink(),
        lambda d: (d / "rows.csv").write_text(""),  # emptied
        lambda d: (d / "meta.json").write_text(""),  # emptied
        lambda d: (d / "meta.json").write_text('{"fingerprint": "f1", "rows"'),  # half-written
        lambda d: (d / "meta.json").write_text("null"),  # valid JSON that is not a table
        lambda d: (d / "meta.json").write_text("[]"),
        lambda d: (d / "meta.json").write_text("1"),
        lambda d: (d / "meta.json").write_text("[" * 100_000 + "]" * 100_000),  # nested deep
        lambda d: _edited_with_checksum(d, "step,x\n0,1.0\n1,oops\n"),  # not a number
    ],
)
def test_a_corrupt_unit_is_recomputed_with_a_warning(tmp_path, damage):
    calls: list[str] = []
    ResultStore(tmp_path).cached(Unit("a", "f1"), compute_counting(calls))
    damage(tmp_path / "a")
    with pytest.warns(RuntimeWarning, match="computing it again"):
        rows = ResultStore(tmp_path).cached(Unit("a", "f1"), compute_counting(calls))
    assert calls == ["a", "a"] and rows[1]["x"] == 0.5


def test_other_settings_never_resume_old_checkpoints(tmp_path):
    calls: list[str] = []
    ResultStore(tmp_path).cached(Unit("a", "f1"), compute_counting(calls))
    seen = []

    def compute(folder):
        seen.append(sorted(p.name for p in folder.iterdir()))
        return [{"step": 0, "x": 3.0}], {}

    rows = ResultStore(tmp_path).cached(Unit("a", "f2"), compute)
    assert rows == [{"step": 0, "x": 3.0}] and seen == [["started"]]  # old checkpoint wiped
    # an interrupted unit of the same settings keeps its checkpoints (it resumes)
    (tmp_path / "a" / "meta.json").unlink()
    (tmp_path / "a" / "checkpoint").write_text("state")
    ResultStore(tmp_path).cached(Unit("a", "f2"), compute)
    assert "checkpoint" in seen[-1]
    # --force starts afresh
    ResultStore(tmp_path, force=True).cached(Unit("a", "f2"), compute)
    assert seen[-1] == ["started"]


def test_result_files_get_the_usual_permissions(tmp_path):
    import os

    from decentopt.results import write_text_atomic

    path = write_text_atomic(tmp_path / "a.md", "x")
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_an_output_folder_is_written_by_one_run_at_a_time(tmp_path, capsys):
    import os
    import subprocess
    import sys

    from decentopt.cli import main
    from decentopt.results import lock_folder
    from tests.experiments.test_spec import BASE, write

    cfg = str(write(tmp_path, BASE))
    out = tmp_path / "out"
    with lock_folder(out):
        assert main(["run", cfg, "--out", str(out), "--no-progress"]) == 2
    assert f"being written by another run (PID {os.getpid()})" in capsys.readouterr().err
    # a lock left by a process that died is taken over; stale temporary files are removed
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (out / ".lock").write_text(dead)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "runs" / ".decentopt-rows.csv.abc123.tmp").write_text("half a table")
    assert main(["run", cfg, "--out", str(out), "--no-progress"]) == 0
    assert not (out / ".lock").exists() and not list(out.rglob("*.tmp"))


@pytest.mark.parametrize("name", ["..", ".", "", "../elsewhere", "a/b"])
def test_the_store_touches_nothing_outside_its_unit_folders(tmp_path, name):
    root = tmp_path / "out" / "runs"
    (tmp_path / "out" / "precious.txt").parent.mkdir(parents=True)
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    store = ResultStore(root, force=True)
    with pytest.raises(ValueError, match="not a plain folder name"):
        store.cached(Unit(name, "f"), compute_counting([]))
    assert (tmp_path / "out" / "precious.txt").read_text() == "keep me"
