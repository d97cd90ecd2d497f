"""Per-rank checkpoints that are only used once every rank has written its part, intact.

Layout: ``DIR/step-00000123/rank0.pt ... rankN.pt``, beside each a manifest
``rankR.json`` (size and SHA-256 of the ``.pt``, written after it), and a
``COMPLETE`` marker that rank 0 writes after every rank has written its part.
The last two complete steps are kept. Payloads hold tensors and plain data only
(numbers, strings, lists, dicts) and are read with ``torch.load(weights_only=True)``,
so a planted file cannot run code; a file without its manifest is never loaded.
On resume, :func:`load_latest` takes the newest step whose file verifies on
*every* rank; a truncated or altered file is reported with its path and the
previous complete step is used instead, so a crash in the middle of writing, or a
damaged disk block, never resumes ranks at different steps or from corrupt state.
``DIR`` must be visible to every rank.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import json
import re
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import torch
import torch.distributed as dist

from decentopt._process import atomic_file

__all__ = ["latest_checkpoint", "load_checkpoint", "load_latest", "save_checkpoint"]

_MARKER = "COMPLETE"


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def _digest(path: Path) -> str:
    sha256 = hashlib.sha256()
    with path.open("rb") as file:  # by chunks: a checkpoint can be larger than free memory
        for chunk in iter(lambda: file.read(1 << 24), b""):
            sha256.update(chunk)
    return sha256.hexdigest()


class _HashingFile:
    """A binary file that hashes what is written through it: a checkpoint's SHA-256 costs
    no second read of a file that can be gigabytes (16 VGG-11s with their EDM state)."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.sha256 = hashlib.sha256()

    def write(self, data: Any) -> int:
        self.sha256.update(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[IO[bytes]]:
    """A binary file that replaces ``path`` atomically, private to its owner (``0600``); any
    failure (a full disk) is an ``OSError`` naming ``path``, and leaves neither the temporary
    file nor a partial ``path``."""
    try:
        with atomic_file(path, "wb", permissions=0o600) as file:
            yield file
    except (OSError, RuntimeError) as exc:  # torch.save reports a failed write as a RuntimeError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        code, why = (exc.errno, exc.strerror) if isinstance(exc, OSError) else (errno.EIO, first)
        raise OSError(code, f"writing a checkpoint failed ({why})", str(path)) from exc


def save_checkpoint(
    root: str | Path,
    step: int,
    payload: dict[str, Any],
    *,
    keep: int = 2,
    barrier: Callable[[str], None] | None = None,
) -> None:
    """Collective: every rank writes its payload and manifest; rank 0 marks the step complete.

    ``barrier`` (e.g. a communicator's, with a deadline) synchronises the ranks;
    by default ``torch.distributed.barrier`` when a process group exists.
    """
    root = Path(root)
    rank = _rank()
    wait = barrier or (lambda _: dist.barrier() if dist.is_initialized() else None)
    folder = _step_dir(root, step)
    data = folder / f"rank{rank}.pt"
    with _writing(data) as file:
        sink = _HashingFile(file)
        torch.save(payload, sink)
    manifest = {"file": data.name, "bytes": data.stat().st_size, "sha256": sink.sha256.hexdigest()}
    with _writing(folder / f"rank{rank}.json") as file:
        file.write(json.dumps(manifest).encode())
    wait("checkpoint written")
    if rank == 0:
        (folder / _MARKER).touch()
        for old in _complete_steps(root)[keep:]:
            shutil.rmtree(_step_dir(root, old), ignore_errors=True)
    wait("checkpoint marked complete")


def _complete_steps(root: str | Path) -> list[int]:
    """Steps marked complete, newest first; folders not named ``step-NUMBER`` are not ours."""
    return sorted(
        (
            int(p.name[5:])
            for p in Path(root).glob("step-*")
            if re.fullmatch(r"step-[0-9]{1,18}", p.name) and (p / _MARKER).is_file()
        ),
        reverse=True,
    )


def latest_checkpoint(root: str | Path) -> int | None:
    """The newest step whose checkpoint every rank finished, or None."""
    return next(iter(_complete_steps(root)), None)


def load_checkpoint(root: str | Path, step: int) -> dict[str, Any]:
    """This rank's payload of ``step``, verified against its manifest (ValueError if not)."""
    rank = _rank()
    folder = _step_dir(Path(root), step)
    path = folder / f"rank{rank}.pt"
    if not path.is_file():
        raise FileNotFoundError(
            f"rank {rank}: no checkpoint file {path}; was the job restarted with another "
            "number of processes?"
        )
    manifest_path = folder / f"rank{rank}.json"
    if not manifest_path.is_file():  # never trusted: it says what was written
        raise ValueError(f"{path} has no manifest {manifest_path.name}; it is not loaded")
    try:
        manifest = json.loads(manifest_path.read_text())
        size = manifest["bytes"]
        digest = manifest["sha256"]
    except (json.JSONDecodeError, KeyError, TypeError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise ValueError(f"{manifest_path} is damaged ({type(exc).__name__}: {why})") from None
    if manifest.get("file") != path.name:
        raise ValueError(f"{manifest_path} describes {manifest.get('file')!r}, not {path.name}")
    if path.stat().st_size != size or _digest(path) != digest:
        raise ValueError(f"{path} does not match its manifest (truncated or altered)")
    try:  # tensors and plain data only: loading runs no code from the file
        with torch.serialization.safe_globals([collections.Counter]):  # lr schedulers' milestones
            return torch.load(path, weights_only=True)
    except Exception as exc:  # a corrupt archive, or objects that are not plain data
        raise ValueError(f"{path} cannot be read ({type(exc).__name__}: {exc})") from None


def load_latest(
    root: str | Path, agree: Callable[[bool], bool] = lambda ok: ok
) -> tuple[int, dict[str, Any]] | None:
    """The newest complete step that loads intact on every rank (``agree``: all ranks ok?)."""
    for step in _complete_steps(root):
        payload: dict[str, Any] | None = None
        try:
            payload = load_checkpoint(root, step)
        except (ValueError, FileNotFoundError, json.JSONDecodeError, KeyError) as exc:
            warnings.warn(f"{exc}; trying the previous checkpoint", RuntimeWarning, stacklevel=2)
        if agree(payload is not None):
            return step, payload or {}
    return None
