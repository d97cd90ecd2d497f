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


# ---------------------------------------------------------------- a store shared by hosts
def _as_host(host: str, work) -> int:
    """Fork a process that presents the host name ``host`` and runs ``work()``."""
    import os

    pid = os.fork()
    if pid == 0:  # the child: never returns into the test
        code = 1
        try:
            os.environ["DECENTOPT_HOST"] = host
            work()
            code = 0
        finally:
            os._exit(code)
    return pid


def _logging_compute(log, seconds: float = 0.0, started=None):
    """A unit's work that appends "HOST UNIT" to ``log`` (one write: lines never mix)."""
    import os
    import time

    def compute(folder):
        if started is not None:
            started.write_text(str(os.getpid()))
        with open(log, "a") as fh:
            fh.write(f"{os.environ.get('DECENTOPT_HOST')} {folder.name}\n")
        time.sleep(seconds)
        return [{"step": 0, "x": float(len(folder.name))}], {"seconds": seconds}

    return compute


def test_two_hosts_racing_for_every_unit_compute_each_once(tmp_path):
    import os

    log = tmp_path / "log"
    units = [Unit(f"u{k}", "f1") for k in range(8)]

    def host(name):
        def work():
            store = ResultStore(tmp_path / "runs", beat=0.05)
            got = [store.claimed(unit, _logging_compute(log, 0.05)) for unit in units]
            (tmp_path / name).write_text(json.dumps([c.rows for c in got]))

        return work

    pids = [_as_host(name, host(name)) for name in ("a", "b")]
    assert all(os.waitpid(pid, 0)[1] == 0 for pid in pids)
    computed = log.read_text().splitlines()
    assert sorted(line.split()[1] for line in computed) == [u.name for u in units]
    assert {line.split()[0] for line in computed} <= {"a", "b"}
    rows = {json.dumps(json.loads((tmp_path / n).read_text())) for n in ("a", "b")}
    assert len(rows) == 1  # both hosts hold every unit's rows
    assert not list((tmp_path / "runs").glob("*/lease"))  # every lease released


@pytest.mark.parametrize("other_host", [True, False], ids=["other-host", "same-host"])
def test_a_lease_whose_holder_was_killed_mid_unit_is_taken_over(tmp_path, monkeypatch, other_host):
    import os
    import signal
    import time

    log, started = tmp_path / "log", tmp_path / "started"
    unit = Unit("u", "f1")

    def holder():
        ResultStore(tmp_path / "runs", beat=0.05).claimed(unit, _logging_compute(log, 60, started))

    pid = _as_host("a", holder)
    deadline = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < deadline, "the holder did not start its unit"
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert (tmp_path / "runs" / "u" / "lease").is_file()  # left behind by the killed holder
    monkeypatch.setenv("DECENTOPT_HOST", "b" if other_host else "a")
    stale = 1.0 if other_host else 60.0
    store = ResultStore(tmp_path / "runs", stale=stale, beat=0.05)
    start = time.monotonic()
    got = store.claimed(unit, _logging_compute(log))
    waited = time.monotonic() - start
    assert got.computed and store.ran == ["u"]
    if other_host:  # its PID means nothing here: taken over once it stopped beating
        assert waited >= stale
    else:  # a process of this host that is gone: at once
        assert waited < 5
    assert [line.split()[0] for line in log.read_text().splitlines()][-1] == os.environ[
        "DECENTOPT_HOST"
    ]


def test_a_beating_holder_keeps_its_unit_and_the_other_host_takes_its_rows(tmp_path, monkeypatch):
    import os
    import time

    log, started = tmp_path / "log", tmp_path / "started"
    unit = Unit("u", "f1")

    def holder():  # computes for 2.5 s, beating every 0.05 s
        ResultStore(tmp_path / "runs", beat=0.05).claimed(unit, _logging_compute(log, 2.5, started))

    pid = _as_host("a", holder)
    while not started.exists():
        time.sleep(0.01)
    monkeypatch.setenv("DECENTOPT_HOST", "b")
    store = ResultStore(tmp_path / "runs", stale=1.0, beat=0.05)  # far below 2.5 s
    got = store.claimed(unit, _logging_compute(log))
    assert os.waitpid(pid, 0)[1] == 0
    assert not got.computed and store.kept == ["u"] and got.rows == [{"step": 0, "x": 1.0}]
    assert log.read_text().splitlines() == ["a u"]


def test_emptying_a_unit_of_other_settings_keeps_its_lease(tmp_path):
    store = ResultStore(tmp_path)
    ResultStore(tmp_path).cached(Unit("a", "f1"), compute_counting([]))
    (tmp_path / "a" / "lease").write_text("{}")
    store.prepare(Unit("a", "f2"))
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["lease", "started"]
