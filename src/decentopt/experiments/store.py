"""The result store: each unit of work computed once, written atomically, checked on read.

A unit (one algorithm variant of a sweep, or one run of it) lives in its own
folder ``ROOT/UNIT/``: ``started`` (the fingerprint it is being computed for,
so that checkpoints of other settings are never resumed), any checkpoints,
``rows.csv``, and last ``meta.json`` (fingerprint, row count and SHA-256 of the
table). :meth:`ResultStore.cached` returns the stored rows only when all of
that agrees; a corrupt or partial unit is recomputed with a warning, never
trusted, and a unit of other settings is recomputed from scratch.

A store may be shared by processes on several hosts (a cluster's network file
system): :meth:`ResultStore.claimed` computes a unit under its ``lease``
(:mod:`~decentopt.experiments.lease`), so that no two processes compute it at once
unless one of them died, and every file is published by writing it under a unique
name and renaming it into place (atomic on NFS too).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from decentopt.experiments.lease import BEAT, POLL, STALE, Lease
from decentopt.results import read_csv, write_csv_atomic, write_text_atomic

__all__ = ["Claimed", "ResultStore", "Unit"]

#: The lease of a unit, in its folder (kept when the folder is emptied for other settings).
LEASE = "lease"

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Unit:
    name: str
    fingerprint: str
    info: dict[str, Any] = field(default_factory=dict)  # recorded in meta.json


def _check_columns(rows: Rows) -> None:
    """A column of numbers holds numbers only (empty cells aside): a table edited by hand
    and given a matching checksum is refused, not read into the statistics."""
    for key in rows[0] if rows else ():
        values = [row[key] for row in rows]
        words = [v for v in values if isinstance(v, str) and v != ""]
        if words and len(words) < len(values) and any(isinstance(v, int | float) for v in values):
            raise ValueError(f"rows.csv: column {key!r} holds {words[0]!r} among numbers")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Claimed(NamedTuple):
    """What :meth:`ResultStore.claimed` returns: the unit's rows, and whether this process
    computed them (False: they were stored, by an earlier run or another process)."""

    rows: Rows
    computed: bool


@dataclass
class ResultStore:
    """``cached(unit, compute)`` for every kind of run.

    ``writer``: this process writes (rank 0 of a distributed job; every rank
    computes). ``barrier`` synchronises the ranks around decisions and wipes.
    """

    root: Path
    force: bool = False
    writer: bool = True
    barrier: Callable[[], None] = lambda: None
    ran: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    stale: float = STALE  # seconds without a beat after which a lease is taken over
    beat: float = BEAT  # seconds between a holder's beats

    def inside(self, name: str) -> Path:
        """The unit folder ``ROOT/name``, refused unless it is a folder right inside ``ROOT``:
        the store writes and removes nothing anywhere else."""
        folder = self.root / name
        if not name or name in (".", "..") or folder.resolve().parent != self.root.resolve():
            raise ValueError(
                f"the unit name {name!r} is not a plain folder name inside {self.root}; "
                "nothing is written or removed outside it"
            )
        return folder

    def stored(self, unit: Unit, warn: bool = True) -> Rows | None:
        """The unit's rows if stored intact for these settings, else None; an unusable one is
        warned of unless ``warn`` is False (a unit another process is writing is not corrupt)."""
        folder = self.inside(unit.name)
        meta_path = folder / "meta.json"
        table = folder / "rows.csv"
        if not meta_path.is_file():
            return None  # never finished (or never started)
        try:
            meta = json.loads(meta_path.read_text())
            if not isinstance(meta, dict):
                raise ValueError(f"meta.json holds {type(meta).__name__}, not a table of facts")
            if meta.get("fingerprint") != unit.fingerprint:
                return None  # other settings: recomputed
            if _digest(table) != meta["sha256"]:
                raise ValueError("its table does not match the checksum recorded with it")
            rows = read_csv(table)
            if len(rows) != meta["rows"]:
                raise ValueError(f"{len(rows)} rows instead of {meta['rows']}")
            _check_columns(rows)
            return rows
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            if warn:
                why = "meta.json is nested too deeply" if isinstance(exc, RecursionError) else exc
                message = f"{folder}: stored result unusable ({why}); computing it again"
                warnings.warn(message, RuntimeWarning, stacklevel=3)
            return None

    def prepare(self, unit: Unit) -> Path:
        """The unit's folder, ready for it to be computed: emptied if it was started for other
        settings (or ``force``), marked ``started`` for these (its checkpoints are resumed)."""
        folder = self.inside(unit.name)
        started = folder / "started"
        if self.writer:
            stale = self.force or not started.is_file() or started.read_text() != unit.fingerprint
            if stale and folder.exists():  # all but the lease of the process computing it
                for path in folder.iterdir():
                    if path.is_dir():
                        shutil.rmtree(path)
                    elif path.name != LEASE and not path.name.startswith(f".{LEASE}."):
                        path.unlink(missing_ok=True)
            (folder / "meta.json").unlink(missing_ok=True)
            write_text_atomic(started, unit.fingerprint)
        return folder

    def cached(self, unit: Unit, compute: Callable[[Path], tuple[Rows, dict[str, Any]]]) -> Rows:
        """The unit's rows: stored ones if intact and of these settings, else ``compute(folder)``.

        ``compute`` receives the unit's folder (for checkpoints) and returns the
        rows and any facts to record beside them (seconds, divergences). No lease: for
        the ranks of a distributed job, which compute a unit together (``barrier``).
        """
        return self.claimed(unit, compute, lease=False).rows

    def claimed(
        self,
        unit: Unit,
        compute: Callable[[Path], tuple[Rows, dict[str, Any]]],
        lease: bool = True,
    ) -> Claimed:
        """:meth:`cached` for a store that several processes or hosts share: the unit is
        computed under its lease, so that while its holder beats no other process computes
        it; one that finds it held waits, and takes the stored rows once they are published
        (or the lease, once its holder stopped beating)."""
        held = Lease(self.inside(unit.name) / LEASE, self.stale, self.beat, min(POLL, self.beat))
        rows = None if self.force else self.stored(unit)  # a corrupt one is warned of
        self.barrier()  # every rank has decided before anything is wiped

        def done() -> bool:  # another process published it while this one waited
            nonlocal rows
            rows = None if self.force else self.stored(unit, warn=False)
            return rows is not None

        try:
            if rows is None and (not lease or (held.claim(done) and not done())):
                with held.beating() if lease else contextlib.nullcontext():
                    folder = self.prepare(unit)
                    self.barrier()
                    return Claimed(self.record(unit, *compute(folder)), True)
        finally:
            held.release()
        self.kept.append(unit.name)
        return Claimed(rows, False)

    def record(self, unit: Unit, rows: Rows, facts: dict[str, Any]) -> Rows:
        """Store the rows of a unit computed in its :meth:`prepare`-d folder, with its facts
        (``meta.json`` last: a unit is finished once that is written)."""
        if self.writer:
            folder = self.inside(unit.name)
            table = write_csv_atomic(folder / "rows.csv", rows)
            meta = {"fingerprint": unit.fingerprint, "rows": len(rows), "sha256": _digest(table)}
            meta |= unit.info | facts
            write_text_atomic(folder / "meta.json", json.dumps(meta, indent=2, default=str))
        self.ran.append(unit.name)
        return rows
