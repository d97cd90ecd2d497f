"""Leases: which process, on which host, computes a unit; safe on a network file system.

A lease is a small file (``UNIT/lease``) naming its holder: the host, the PID (with
the time its process started) and a random token. It is written under a unique
temporary name and then *linked* into place: ``link`` fails when the name exists,
atomically on NFS as on a local disk, so two claimants never both hold it. The
holder beats: it touches the lease every ``beat`` seconds. A claimant that finds
the lease held watches it; when neither its holder nor its time of modification
changed for ``stale`` seconds of the claimant's own clock (the clocks of two hosts
are never compared), the holder stopped and the lease is taken over -- at once when
the holder is a process of the claimant's own host that no longer exists, or whose
PID a process started later has. A PID alone is never trusted: it means nothing on
another host, and one that is alive may be another process by now.

Taking over moves the stale lease aside under a unique name (``rename``: of two
claimants, one moves it and the other finds it gone) and checks that what was moved
is what was watched; a lease that beat meanwhile is put back.

The host name is ``socket.gethostname()``, or ``DECENTOPT_HOST`` where that is set
(containers that share one name, tests that play several hosts).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from decentopt._process import alive

__all__ = ["BEAT", "STALE", "Holder", "Lease", "host_name"]

#: Seconds between a holder's beats.
BEAT = 5.0
#: Seconds without a beat after which a lease is taken over (several beats: a busy file
#: server or a paused process is not taken for a dead one).
STALE = 60.0
#: Seconds between two looks of a claimant at a lease held by another.
POLL = 0.5


def host_name() -> str:
    """This host's name as leases record it (``DECENTOPT_HOST`` overrides)."""
    return os.environ.get("DECENTOPT_HOST") or socket.gethostname()


def _started(pid: int) -> int | None:
    """When the process ``pid`` of this host started (clock ticks since boot; Linux), or
    None where that cannot be read: with the PID, it names one process, even after the
    PID is given to another."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: host, PID (and when that process started) and a token no other
    claim shares."""

    host: str
    pid: int
    token: str
    started: int | None = None

    @staticmethod
    def me() -> Holder:
        return Holder(host_name(), os.getpid(), uuid.uuid4().hex, _started(os.getpid()))

    def gone(self) -> bool:
        """Whether it is a process of this host that no longer exists, or whose PID another
        process has now (else: unknown, and only its beats tell)."""
        if self.host != host_name():
            return False
        if not alive(self.pid):
            return True
        now = _started(self.pid)
        return self.started is not None and now is not None and now != self.started


def _read(path: Path) -> tuple[Holder | None, int, int] | None:
    """``(holder, inode, mtime_ns)`` of the lease, or None when there is none; a lease
    that cannot be read (being written, damaged) has holder None."""
    try:
        info = os.stat(path)
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
        started = None if data.get("started") is None else int(data["started"])
        holder = Holder(str(data["host"]), int(data["pid"]), str(data["token"]), started)
    except (ValueError, KeyError, TypeError, AttributeError):  # (JSON, but no object)
        holder = None
    return holder, info.st_ino, info.st_mtime_ns


@dataclass
class Lease:
    """The lease ``path`` for one claim: :meth:`claim` it, :meth:`beating` while working,
    :meth:`release` it. ``stale`` and ``beat`` in seconds (see the module docstring)."""

    path: Path
    stale: float = STALE
    beat: float = BEAT
    poll: float = POLL
    me: Holder = field(default_factory=Holder.me)

    def _write(self) -> bool:
        """Link a lease naming this holder into place; False if one is there."""
        temporary = self.path.with_name(f".{self.path.name}.{self.me.token}.tmp")
        try:
            temporary.write_text(json.dumps(dataclasses.asdict(self.me)))
            os.link(temporary, self.path)
            return True
        except (FileExistsError, FileNotFoundError):  # held; or its folder was just emptied
            return False
        finally:
            temporary.unlink(missing_ok=True)

    def holds(self) -> bool:
        seen = _read(self.path)
        return seen is not None and seen[0] == self.me

    def claim(self, done: Callable[[], bool] = lambda: False) -> bool:
        """Hold the lease, waiting while a live holder beats; False as soon as ``done()``
        (the unit was published meanwhile), True once this claimant holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        watched: tuple[Holder | None, int, int] | None = None
        since = time.monotonic()
        while True:
            if self._write():
                return True
            seen = _read(self.path)
            if seen is None:
                continue  # released meanwhile: claim it now
            if seen != watched:  # it beat, or another holder came: watch it afresh
                watched = seen
                since = time.monotonic()
            holder = seen[0]
            if (holder is not None and holder.gone()) or time.monotonic() - since >= self.stale:
                self._take_over(seen)
                continue
            if done():
                return False
            time.sleep(self.poll)

    def _take_over(self, seen: tuple[Holder | None, int, int]) -> None:
        """Move the lease ``seen`` aside; one that changed meanwhile is put back."""
        aside = self.path.with_name(f".{self.path.name}.{self.me.token}.stale")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return  # another claimant moved it first, or its holder released it
        try:
            if _read(aside) != seen:  # it beat, or it is a new holder's: put it back
                with suppress(FileExistsError):
                    os.link(aside, self.path)
        finally:
            aside.unlink(missing_ok=True)

    def touch(self) -> None:
        """One beat (a lease taken over by another claimant is left to it)."""
        with suppress(FileNotFoundError):
            if self.holds():
                os.utime(self.path)  # modified now

    def release(self) -> None:
        """Give the lease up (one held by another claimant by now is left alone)."""
        if self.holds():
            self.path.unlink(missing_ok=True)

    @contextmanager
    def beating(self) -> Iterator[Lease]:
        """A context in which a thread beats every ``beat`` seconds."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.beat):
                self.touch()

        thread = threading.Thread(target=beat, name="decentopt-lease", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
