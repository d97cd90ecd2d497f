"""Result files and the output folder's lock."""

from __future__ import annotations

import errno
import os

import pytest

from decentopt.results import FolderBusy, lock_folder


@pytest.mark.parametrize("content", ["", "0", "-1", "abc", "  "])
def test_a_lock_that_names_no_live_process_is_taken_over(tmp_path, content):
    """An empty lock (a full disk while it was written), 0 or -1 (which os.kill would read as
    process groups) or garbage: stale, not "being written by PID 0"."""
    (tmp_path / ".lock").write_text(content)
    with lock_folder(tmp_path):
        assert (tmp_path / ".lock").read_text() == str(os.getpid())
    assert not (tmp_path / ".lock").exists()


def test_a_live_holder_is_named(tmp_path):
    (tmp_path / ".lock").write_text(str(os.getppid()))  # a live process that is not this one
    with pytest.raises(FolderBusy, match=f"PID {os.getppid()}"):
        with lock_folder(tmp_path):
            pass


def test_a_lock_that_cannot_be_written_is_not_left_behind(tmp_path, monkeypatch):
    def full_disk(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full_disk)
    with pytest.raises(OSError, match="No space left"):
        with lock_folder(tmp_path):
            pass
    monkeypatch.undo()
    assert not (tmp_path / ".lock").exists()
    with lock_folder(tmp_path):  # the next run is not blocked
        pass


def test_only_the_projects_own_temporary_files_are_removed(tmp_path):
    """User files that look temporary (``.notes.tmp``) survive; the project's own leftovers
    go, except inside a nested output folder that another run holds."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "other").mkdir()
    user = [tmp_path / ".notes.tmp", tmp_path / "sub" / ".draft.tmp"]
    ours = [tmp_path / ".decentopt-rows.csv.x1.tmp", tmp_path / "sub" / ".decentopt-meta.y.tmp"]
    theirs = tmp_path / "other" / ".decentopt-rows.csv.z.tmp"
    for f in [*user, *ours, theirs]:
        f.write_text("x")
    (tmp_path / "other" / ".lock").write_text("")  # another run's output folder
    with lock_folder(tmp_path):
        pass
    assert all(f.exists() for f in [*user, theirs]) and not any(f.exists() for f in ours)


def test_atomic_writes_use_the_projects_prefix(tmp_path, monkeypatch):
    import tempfile

    from decentopt import results

    seen = []
    real = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", lambda **kw: seen.append(kw["prefix"]) or real(**kw))
    results.write_text_atomic(tmp_path / "summary.md", "x")
    assert seen and seen[0].startswith(results.TEMP_PREFIX)


def test_a_held_lock_is_respected_before_its_holder_has_written_its_pid(tmp_path):
    """The holder's PID is written after the file exists: a run looking in between must not
    take the (empty) lock over."""
    import fcntl

    lock = tmp_path / ".lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a live holder, its PID not yet written
    try:
        with pytest.raises(FolderBusy, match="another run"):
            with lock_folder(tmp_path):
                pass
    finally:
        os.close(fd)
    with lock_folder(tmp_path):  # released by its holder: free
        pass


def test_a_lock_naming_a_huge_pid_is_stale(tmp_path):
    (tmp_path / ".lock").write_text("99999999999999999999")
    with lock_folder(tmp_path):
        assert (tmp_path / ".lock").read_text() == str(os.getpid())


def _contend(folder: str, start: float, log: str) -> None:
    import time

    time.sleep(max(0.0, start - time.time()))
    try:
        with lock_folder(folder):
            with open(log, "a") as fh:
                fh.write("in\n")
            time.sleep(0.02)
            with open(log, "a") as fh:
                fh.write("out\n")
    except FolderBusy:
        pass


@pytest.mark.slow  # starts processes
def test_three_processes_never_hold_one_lock_together(tmp_path):
    import multiprocessing
    import time

    ctx = multiprocessing.get_context("fork")
    for trial in range(30):
        folder, log = tmp_path / f"f{trial}", tmp_path / f"log{trial}"
        folder.mkdir()
        if trial % 2:
            (folder / ".lock").write_text("99999999")  # a stale lock to take over
        start = time.time() + 0.2
        procs = [ctx.Process(target=_contend, args=(folder, start, log)) for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        lines = log.read_text().split() if log.exists() else []
        depth = 0
        for line in lines:
            depth += 1 if line == "in" else -1
            assert depth <= 1, f"trial {trial}: two processes held the lock together"
        assert lines, f"trial {trial}: nobody took the lock"


def test_an_atomic_write_onto_a_folder_names_the_folder_not_a_temporary_file(tmp_path):
    from decentopt.results import write_csv_atomic

    (tmp_path / "rows.csv").mkdir()
    with pytest.raises(IsADirectoryError) as info:
        write_csv_atomic(tmp_path / "rows.csv", [{"a": 1}])
    assert info.value.filename == str(tmp_path / "rows.csv")
    assert not list(tmp_path.glob(".*.tmp"))


def test_rows_of_different_columns_share_one_header_with_empty_cells(tmp_path):
    from decentopt.results import read_csv, write_csv_atomic

    rows = [{"a": 1, "b": 2.5}, {"a": 3, "c": "x"}]
    path = write_csv_atomic(tmp_path / "rows.csv", rows)
    assert path.read_text().splitlines() == ["a,b,c", "1,2.5,", "3,,x"]
    assert [r["a"] for r in read_csv(path)] == [1, 3]


def _dict_writer_text(rows, fields):
    import csv
    import io

    fh = io.StringIO(newline="")
    writer = csv.DictWriter(fh, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    return fh.getvalue()


def test_the_table_writer_writes_what_dictwriter_writes_byte_for_byte(tmp_path):
    """Floats by their repr (NaN, infinities, -0.0, subnormals), ints, bools, None, text
    that needs quoting, rows with keys in another order or missing (empty cells)."""
    import math

    from decentopt.results import write_csv_atomic

    floats = [0.1, 1 / 3, -0.0, 1e-310, 1e300, math.nan, math.inf, -math.inf, 2.5e-7, 123.0]
    texts = ["edm(lr=0.1, beta=0.9)", 'say "hi"', "two\nlines", "cr\r", "", " spaced ", "ζ²"]
    rows = [
        {"algorithm": texts[i % len(texts)], "step": i, "err": floats[i % len(floats)],
         "ok": i % 2 == 0, "note": None if i % 3 else "x"}
        for i in range(40)
    ]  # fmt: skip
    rows.insert(5, {"err": 1.5, "step": 7, "algorithm": "reordered", "ok": True, "note": "n"})
    rows.insert(9, {"algorithm": "missing", "step": 8})
    rows.append({"algorithm": "last", "step": 9, "err": math.nan})
    fields = list(rows[0])
    path = write_csv_atomic(tmp_path / "t.csv", rows)
    assert path.read_bytes() == _dict_writer_text(rows, fields).encode()
    for one in ([{"a": ""}, {"a": 1.25}], [{"a": "x,y"}], [{"a": 0.1, "b": 2}]):
        path = write_csv_atomic(tmp_path / "one.csv", one)
        assert path.read_bytes() == _dict_writer_text(one, list(one[0])).encode()


def test_the_table_writer_refuses_an_empty_table(tmp_path):
    from decentopt.results import write_csv_atomic

    with pytest.raises(ValueError, match="no rows"):
        write_csv_atomic(tmp_path / "t.csv", [])
    assert not (tmp_path / "t.csv").exists()
