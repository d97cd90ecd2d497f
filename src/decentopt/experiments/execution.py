"""Executing units: forked local workers, or any ``concurrent.futures.Executor``.

:class:`ForkPool` is the default engine of ``--jobs N``: N processes forked from the
sweep (they inherit its built problem and data; only the units' results travel back),
one thread each. Unlike :class:`~concurrent.futures.ProcessPoolExecutor`, it knows
which task each worker runs: a worker that dies (killed, out of memory) fails only its
own task, with :class:`WorkerDied` naming its PID and signal, and the others go on;
:meth:`ForkPool.stop` ends every worker at once (Ctrl-C). Workers ignore SIGINT:
the sweep's process decides, and stops them.

:func:`run_tasks` runs tasks through an :class:`Engine` (this pool, any executor, or a
cluster's); a task whose worker was lost runs once more.

What a sweep says while it runs (:class:`Progress`) is one whole line per event, never
interleaved: lines of parallel workers are each written in one call, so that they never
run together; the parent says at once which units it reuses, then one line per unit
finished, and one line for a unit whose worker died.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import queue
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from decentopt._process import die_with_parent
from decentopt.driver import intra_op_threads

__all__ = [
    "Engine",
    "ForkPool",
    "Progress",
    "SweepFailed",
    "UnitFailed",
    "WorkerDied",
    "WorkerLost",
    "WorkersLost",
    "forked_map",
    "run_tasks",
    "say_line",
]

R = TypeVar("R")


class WorkerLost(RuntimeError):
    """The worker, process or job computing a task ended before it returned its result."""


class WorkerDied(WorkerLost):
    """The forked worker computing a task ended before it returned (a signal, or an exit)."""

    def __init__(self, pid: int | None = None, exitcode: int | None = None) -> None:
        how = f"exit code {exitcode}"
        if exitcode is not None and exitcode < 0:
            how = f"killed by {signal.Signals(-exitcode).name}"
        lost = "no worker was left to compute it (they all died)"
        super().__init__(lost if pid is None else f"its worker (PID {pid}) died ({how})")


class SweepFailed(RuntimeError):
    """A sweep ended without some of its units (the finished ones are stored)."""


class WorkersLost(SweepFailed):
    """Units not computed because their workers died again and again."""


class UnitFailed(SweepFailed):
    """A unit raised where it ran (a cluster's job), reported in one line with its log."""


#: Units named in the line that says what a rerun keeps (the rest are counted).
SHOWN = 8


def say_line(text: str) -> None:
    """Print one whole line in a single write: lines of parallel workers never run together."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Progress:
    """The lines of one sweep: what it reuses, each unit done, each worker lost."""

    def __init__(self, say: Callable[[str], None], total: int) -> None:
        self.say = say
        self.total = total
        self.done = 0

    def reused(self, names: Sequence[str]) -> None:
        """Said before anything is computed: the finished units a rerun keeps."""
        if names:
            left = self.total - len(names)
            shown = ", ".join(names[:SHOWN])
            more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
            self.say(
                f"resuming: {len(names)} finished unit(s) kept ({shown}{more}); {left} to compute"
            )

    def finished(self, name: str, pending: int) -> None:
        self.done += 1
        self.say(f"  {name:14s} done ({self.done}/{pending})")

    def lost(self, name: str, why: str, again: bool) -> None:
        then = "computing it again" if again else "it is left for a rerun"
        first = why.strip().splitlines()[0] if why.strip() else "its worker was lost"
        self.say(f"  {name:14s} {first}; finished units are kept; {then}")


def _serve(conn: multiprocessing.connection.Connection) -> None:
    """A worker: compute ``(fn, args, kwargs)`` messages until ``None`` or the pipe closes,
    on one intra-op thread (as many workers as cores)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the sweep's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # whatever the parent made of it: it ends
    die_with_parent(signal.SIGKILL)  # a killed sweep leaves no worker computing on
    torch.set_num_threads(1)
    with suppress(EOFError):  # the pipe closed
        for fn, args, kwargs in iter(conn.recv, None):
            try:
                reply: tuple[bool, Any] = (True, fn(*args, **kwargs))
            except BaseException as exc:  # the caller's to raise
                reply = (False, exc)
            try:
                conn.send(reply)
            except Exception as exc:  # a result that cannot be pickled
                conn.send((False, RuntimeError(f"the result could not be sent back: {exc}")))


@dataclass
class ForkPool(Executor):
    """``workers`` forked processes, each computing one task at a time (see the module);
    a thread of this process feeds each worker the queue's tasks, one after the other."""

    workers: int
    _pool: list[Any] = field(default_factory=list)  # the forked processes
    #: the tasks waiting for a worker: ``(future, (fn, args, kwargs))``
    _queue: queue.SimpleQueue[tuple | None] = field(default_factory=queue.SimpleQueue)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _closed: bool = False

    def __post_init__(self) -> None:
        self._context = multiprocessing.get_context("fork")
        self._refill()

    def _refill(self) -> None:
        """Fork workers up to ``workers`` (in the caller's thread, never a feeding one)."""
        with self._lock:
            self._pool = [process for process in self._pool if process.is_alive()]
            while len(self._pool) < self.workers:
                mine, theirs = self._context.Pipe()
                process = self._context.Process(target=_serve, args=(theirs,), daemon=False)
                process.start()
                theirs.close()
                self._pool.append(process)
                thread = threading.Thread(target=self._feed, args=(process, mine), daemon=True)
                thread.start()
                self._threads.append(thread)

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        if self._closed:
            raise RuntimeError("cannot submit to a pool that was shut down")
        self._refill()  # a worker lost since the last submission is replaced
        future: Future[R] = Future()
        self._queue.put((future, (fn, args, kwargs)))
        return future

    def _feed(self, process: Any, conn: multiprocessing.connection.Connection) -> None:
        """Hand the worker ``process`` one task after the other through its pipe ``conn``,
        until it dies or the pool shuts down."""
        while (task := self._queue.get()) is not None:
            future, call = task
            if not future.running() and not future.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            if not process.is_alive():  # the task waits for another worker
                self._queue.put(task)
                break
            try:
                conn.send(call)
                ok, value = conn.recv()
            except (EOFError, OSError):  # it died computing the task
                process.join(1.0)
                future.set_exception(WorkerDied(process.pid, process.exitcode))
                break
            except Exception as exc:  # the task cannot be pickled
                future.set_exception(exc)
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        else:  # shut down
            with suppress(OSError):
                conn.send(None)
            process.join()
            return
        with self._lock:  # it died: with no worker left alive, the queued tasks are lost too
            if not any(worker.is_alive() for worker in self._pool):
                while not self._queue.empty():
                    if (task := self._queue.get()) is not None:
                        task[0].set_exception(WorkerDied())

    def stop(self) -> None:
        """End every worker now; what they were computing is lost, queued tasks cancelled."""
        self.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for process in self._pool:
                process.kill()  # (a dead one's is ignored)
        for process in self._pool:
            process.join(5.0)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            while cancel_futures and not self._queue.empty():
                if (task := self._queue.get()) is not None:
                    task[0].cancel()
            for _ in self._threads:
                self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


@dataclass
class Engine:
    """An executor as :func:`run_tasks` uses it: ``lost``, the exceptions by which it says
    that a worker was lost (its task may run again); ``stop()``, ending it at once;
    ``close()``, when every task is done; ``submit_all``, submitting many tasks at once
    (an array job), by default one by one."""

    executor: Executor
    lost: tuple[type[BaseException], ...] = (WorkerLost, BrokenProcessPool)
    stop: Callable[[], None] = lambda: None
    close: Callable[[], None] = lambda: None
    submit_all: Callable[[list[Callable[[], Any]]], list[Future]] | None = None


def run_tasks(
    engine: Engine,
    tasks: Sequence[Callable[[], R]],
    names: Sequence[str],
    keep: Callable[[int, R], None],
    progress: Progress,
) -> None:
    """Run every task through ``engine``; ``keep(index, result)`` as each one arrives. A
    task whose worker is lost runs once more (those lost again are never kept). Any other
    exception, or an interruption, cancels the rest and stops the engine before it
    propagates."""
    retried: set[int] = set()
    running: dict[Future, int] = {}

    def submit(index: int) -> None:
        try:
            running[engine.executor.submit(tasks[index])] = index
        except engine.lost as exc:  # a broken pool takes nothing more
            progress.lost(names[index], str(exc), again=False)

    try:
        if engine.submit_all is not None and tasks:
            running.update(zip(engine.submit_all(list(tasks)), range(len(tasks)), strict=True))
        else:
            for index in range(len(tasks)):
                submit(index)
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                index = running.pop(future)
                try:
                    result = future.result()
                except engine.lost as exc:
                    again = index not in retried
                    progress.lost(names[index], str(exc) or type(exc).__name__, again)
                    retried.add(index)
                    if again:
                        submit(index)
                    continue
                keep(index, result)
                progress.finished(names[index], len(tasks))
    except BaseException:
        for future in running:
            future.cancel()
        engine.stop()
        raise


#: What forked workers of :func:`forked_map` compute with (set before the fork, inherited).
_WORK: dict[str, Any] = {}


def _work(index: int) -> Any:
    return _WORK["compute"](*_WORK["pending"][index])


def forked_map(jobs: int, compute: Callable[..., R], pending: Sequence[tuple]) -> list[R]:
    """``[compute(*args) for args in pending]``, in ``jobs`` forked processes (one thread
    each) if more than one of both: the sweeps of a graph study, the figures of a report.
    ``compute`` and ``pending`` are inherited, only the results pickled."""
    if jobs < 2 or len(pending) < 2:
        return [compute(*args) for args in pending]
    with intra_op_threads(1, 0):  # no thread pool may exist in the parent when it forks
        _WORK.update(pending=list(pending), compute=compute)
        pool = ForkPool(min(jobs, len(pending)))
        try:
            return list(pool.map(_work, range(len(pending))))
        except BaseException:
            pool.stop()
            raise
        finally:
            pool.shutdown()
            _WORK.clear()
