"""Tidy result tables: one row per (algorithm, setting, repetition, recorded step).

Tables are CSV files written atomically (:func:`~decentopt._process.atomic_file`): an
interrupted run never leaves a half-written one, and the next run on the folder sweeps
its temporary files away (:func:`lock_folder`).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from decentopt._process import TEMP_PREFIX, alive, atomic_file, temporary_file

try:  # POSIX: the lock is an OS file lock, released by the kernel when its holder dies
    import fcntl
except ImportError:  # pragma: no cover - Windows: exclusive creation only
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "TEMP_PREFIX",
    "FolderBusy",
    "lock_folder",
    "read_csv",
    "temporary_file",
    "write_csv_atomic",
    "write_text_atomic",
]


class FolderBusy(RuntimeError):
    """Another live process holds the output folder's lock."""


def _busy(folder: Path, lock: Path, pid: int | str) -> FolderBusy:
    return FolderBusy(
        f"{folder} is being written by another run (PID {pid}); wait for it to finish "
        f"or give another --out (remove {lock} if that process is gone)"
    )


def _take(folder: Path, lock: Path) -> int:
    """An open descriptor of ``lock``, held exclusively (``flock``) and naming this process."""
    for _ in range(100):
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        held = False
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # the holder may have removed the file meanwhile: then lock the new one
            if os.fstat(fd).st_ino != os.stat(lock).st_ino:
                continue
            # a lock written without flock (another file system, an older version): its PID
            text = os.pread(fd, 64, 0).decode(errors="replace").strip()
            pid = int(text) if text.isdecimal() else 0  # empty, garbage or -1: none
            if alive(pid) and pid != os.getpid():
                raise _busy(folder, lock, pid)
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
            except OSError:  # e.g. a full disk: no empty lock is left behind to block later runs
                lock.unlink(missing_ok=True)
                raise
            held = True
            return fd
        except BlockingIOError:
            text = lock.read_text() if lock.is_file() else ""
            raise _busy(folder, lock, text.strip() or "unknown") from None
        except FileNotFoundError:
            continue
        finally:
            if not held:
                os.close(fd)
    raise FolderBusy(f"could not take the lock {lock}")


@contextmanager
def lock_folder(folder: str | Path) -> Iterator[Path]:
    """Hold ``FOLDER/.lock`` (this process's PID) while writing; remove stale temporary files.

    Taking the lock is atomic: an OS file lock (``flock``) on ``.lock``, which the
    kernel releases when its holder dies, so a lock left by a dead process (or one
    that is empty, damaged or names an impossible PID) is taken over and two runs
    never hold it together. A second run on the same folder stops with the
    holder's PID. Temporary files of interrupted writes (``.decentopt-*.tmp``)
    are removed; no other file is touched.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / ".lock"
    fd = _take(folder, lock)
    try:  # stale temporary files go, in the folders below too (not in a locked one: another run's)
        for here, dirs, files in os.walk(folder):
            if Path(here) != folder and ".lock" in files:
                dirs.clear()
                continue  # (links to folders are not followed either)
            for name in files:
                if name.startswith(TEMP_PREFIX) and name.endswith(".tmp"):
                    Path(here, name).unlink(missing_ok=True)
        yield folder
    finally:
        lock.unlink(missing_ok=True)  # while still held: a waiting run then locks a new file
        os.close(fd)


def write_csv_atomic(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write rows to ``path`` atomically: a column for every key, in order of appearance,
    and an empty cell where a row lacks one (``csv.DictWriter``'s bytes; a row whose keys
    are the header, in its order, goes to the C writer as its values)."""
    rows = list(rows)
    if not rows:
        raise ValueError(f"no rows to write to {path}")
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with atomic_file(path, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(fields)
        writer.writerows(
            row.values() if list(row) == fields else [row.get(key, "") for key in fields]
            for row in rows
        )
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a text file atomically."""
    with atomic_file(path) as fh:
        fh.write(text)
    return Path(path)


def _parse(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    """Read a tidy table back, converting numeric fields."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no result table at {path}; run the experiment first")
    with path.open(newline="") as fh:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(fh)]
