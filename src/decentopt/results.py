"""Tidy result tables: one row per (algorithm, setting, repetition, recorded step).

Tables are CSV files written atomically (a temporary file in the same folder,
then ``os.replace``), so an interrupted run never leaves a half-written table.
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "FolderBusy",
    "lock_folder",
    "read_csv",
    "write_csv_atomic",
    "write_text_atomic",
]


class FolderBusy(RuntimeError):
    """Another live process holds the output folder's lock."""


@contextmanager
def lock_folder(folder: str | Path) -> Iterator[Path]:
    """Hold ``FOLDER/.lock`` (this process's PID) while writing; remove stale temporary files.

    A second run on the same folder stops with the holder's PID instead of
    computing everything twice; a lock that names no live process (left by a dead
    one, empty or damaged) is taken over.
    Temporary files of interrupted atomic writes (``.NAME.*.tmp``) are removed.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / ".lock"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            try:
                pid = int(lock.read_text().strip())
                if pid <= 0:  # os.kill(0 or -1, ...) would signal groups of processes
                    raise ValueError(pid)
                os.kill(pid, 0)  # raises if no such process
            except (ValueError, ProcessLookupError, FileNotFoundError):
                lock.unlink(missing_ok=True)  # empty, damaged, or left by a dead process
                continue
            except PermissionError:
                pass  # alive, another user's
            raise FolderBusy(
                f"{folder} is being written by another run (PID {pid}); wait for it to finish "
                f"or give another --out (remove {lock} if that process is gone)"
            ) from None
    else:
        raise FolderBusy(f"could not take the lock {lock}")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
    except OSError:  # e.g. a full disk: no empty lock is left behind to block later runs
        lock.unlink(missing_ok=True)
        raise
    for stale in folder.rglob(".*.tmp"):
        stale.unlink(missing_ok=True)
    try:
        yield folder
    finally:
        lock.unlink(missing_ok=True)


@contextmanager
def _atomic(path: str | Path, newline: str | None = None) -> Iterator[TextIO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline=newline) as fh:
            yield fh
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would create it (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_csv_atomic(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write rows (dicts with the same keys) to ``path`` atomically."""
    rows = list(rows)
    if not rows:
        raise ValueError(f"no rows to write to {path}")
    with _atomic(path, newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a text file atomically."""
    with _atomic(path) as fh:
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
