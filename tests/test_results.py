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
    real = os.fdopen

    def full_disk(fd, *args, **kwargs):
        handle = real(fd, *args, **kwargs)

        class Full:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                handle.close()

            def write(self, _text):
                raise OSError(errno.ENOSPC, "No space left on device")

        return Full()

    monkeypatch.setattr(os, "fdopen", full_disk)
    with pytest.raises(OSError, match="No space left"):
        with lock_folder(tmp_path):
            pass
    monkeypatch.undo()
    assert not (tmp_path / ".lock").exists()
    with lock_folder(tmp_path):  # the next run is not blocked
        pass
